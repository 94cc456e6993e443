"""scikit-learn's bundled 8x8 digits with LeNet5: fully offline, trains in seconds on a CPU.

    python recipes/digits.py fit                                 # train with configs/digits.yaml (--data.synthetic true: offline)
    python recipes/digits.py coded_eval --ckpt_path CKPT              # sweep codes x stragglers, write results.json
    python recipes/digits.py fit --config recipes/configs/finetune.yaml --model.init_from CKPT   # coded fine-tuning

See recipes/README.md.
"""

from lightning_gcc import DigitsData, run

if __name__ == "__main__":
    run(DigitsData, "digits.yaml")
