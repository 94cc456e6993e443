"""CIFAR-10 with a timm ResNet-18 (random init); --config recipes/configs/vit32.yaml for a small ViT.

    python recipes/cifar10.py fit                                 # train with configs/cifar10.yaml (--data.synthetic true: offline)
    python recipes/cifar10.py coded_eval --ckpt_path CKPT              # sweep codes x stragglers, write results.json
    python recipes/cifar10.py fit --config recipes/configs/finetune.yaml --model.init_from CKPT   # coded fine-tuning

See recipes/README.md.
"""

from lightning_gcc import CIFAR10Data, run

if __name__ == "__main__":
    run(CIFAR10Data, "cifar10.yaml")
