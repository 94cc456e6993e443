"""scikit-learn's bundled 8x8 digits with LeNet5: fully offline, trains in seconds on a CPU.

Train (configs/digits.yaml; add `--data.synthetic true` to run offline on random images of the same shape)::

    python recipes/digits.py fit

Sweep codes x stragglers on the test set of a checkpoint and write results.json and a plot::

    python recipes/digits.py coded_eval --ckpt_path CKPT

Fine-tune through the code with random stragglers every step::

    python recipes/digits.py fit --config recipes/configs/finetune.yaml --model.init_from CKPT

See recipes/README.md.
"""

from lightning_gcc import DigitsData, run

if __name__ == "__main__":
    run(DigitsData, "digits.yaml")
