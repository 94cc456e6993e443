"""MNIST with the LeNet5 of torchgcc.experiments.models.

    python recipes/mnist.py fit                                 # train with configs/mnist.yaml (--data.synthetic true: offline)
    python recipes/mnist.py coded_eval --ckpt_path CKPT              # sweep codes x stragglers, write results.json
    python recipes/mnist.py fit --config recipes/configs/finetune.yaml --model.init_from CKPT   # coded fine-tuning

See recipes/README.md.
"""

from lightning_gcc import MNISTData, run

if __name__ == "__main__":
    run(MNISTData, "mnist.yaml")
