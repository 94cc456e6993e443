"""CIFAR-100 with a timm RepVGG-A0 (random init).

Train (configs/cifar100.yaml; add `--data.synthetic true` to run offline on random images of the same shape)::

    python recipes/cifar100.py fit

Sweep codes x stragglers on the test set of a checkpoint and write results.json and a plot::

    python recipes/cifar100.py coded_eval --ckpt_path CKPT

Fine-tune through the code with random stragglers every step::

    python recipes/cifar100.py fit --config recipes/configs/finetune.yaml --model.init_from CKPT

See recipes/README.md.
"""

from lightning_gcc import CIFAR100Data, run

if __name__ == "__main__":
    run(CIFAR100Data, "cifar100.yaml")
