"""CIFAR-100 with a timm RepVGG-A0 (random init).

    python recipes/cifar100.py fit                                 # train with configs/cifar100.yaml (--data.synthetic true: offline)
    python recipes/cifar100.py coded_eval --ckpt_path CKPT              # sweep codes x stragglers, write results.json
    python recipes/cifar100.py fit --config recipes/configs/finetune.yaml --model.init_from CKPT   # coded fine-tuning

See recipes/README.md.
"""

from lightning_gcc import CIFAR100Data, run

if __name__ == "__main__":
    run(CIFAR100Data, "cifar100.yaml")
