"""ImageNet (ImageFolder layout under --data.root) with a timm ResNet-18 (random init).

    python recipes/imagenet.py fit                                 # train with configs/imagenet.yaml (--data.synthetic true: offline)
    python recipes/imagenet.py coded_eval --ckpt_path CKPT              # sweep codes x stragglers, write results.json
    python recipes/imagenet.py fit --config recipes/configs/finetune.yaml --model.init_from CKPT   # coded fine-tuning

See recipes/README.md.
"""

from lightning_gcc import ImageNetData, run

if __name__ == "__main__":
    run(ImageNetData, "imagenet.yaml")
