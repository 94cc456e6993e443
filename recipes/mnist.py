"""MNIST with the LeNet5 of torchgcc.app.models.

Train (configs/mnist.yaml; add `--data.synthetic true` to run offline on random images of the same shape)::

    python recipes/mnist.py fit

Sweep codes x stragglers on the test set of a checkpoint and write results.json and a plot::

    python recipes/mnist.py coded_eval --ckpt_path CKPT

Fine-tune through the code with random stragglers every step::

    python recipes/mnist.py fit --config recipes/configs/finetune.yaml --model.init_from CKPT

See recipes/README.md.
"""

from lightning_gcc import MNISTData, run

if __name__ == "__main__":
    run(MNISTData, "mnist.yaml")
