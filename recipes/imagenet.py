"""ImageNet (ImageFolder layout under --data.root) with a timm ResNet-18 (random init).

Train (configs/imagenet.yaml; add `--data.synthetic true` to run offline on random images of the same shape)::

    python recipes/imagenet.py fit

Sweep codes x stragglers on the test set of a checkpoint and write results.json and a plot::

    python recipes/imagenet.py coded_eval --ckpt_path CKPT

Fine-tune through the code with random stragglers every step::

    python recipes/imagenet.py fit --config recipes/configs/finetune.yaml --model.init_from CKPT

See recipes/README.md.
"""

from lightning_gcc import ImageNetData, run

if __name__ == "__main__":
    run(ImageNetData, "imagenet.yaml")
