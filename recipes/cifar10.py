"""CIFAR-10 with a timm ResNet-18 (random init); add --config recipes/configs/vit32.yaml for a small ViT.

Train (configs/cifar10.yaml; add `--data.synthetic true` to run offline on random images of the same shape)::

    python recipes/cifar10.py fit

Sweep codes x stragglers on the test set of a checkpoint and write results.json and a plot::

    python recipes/cifar10.py coded_eval --ckpt_path CKPT

Fine-tune through the code with random stragglers every step::

    python recipes/cifar10.py fit --config recipes/configs/finetune.yaml --model.init_from CKPT

See recipes/README.md.
"""

from lightning_gcc import CIFAR10Data, run

if __name__ == "__main__":
    run(CIFAR10Data, "cifar10.yaml")
