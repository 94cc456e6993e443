"""The Lightning recipes: one fast_dev_run step of fit, coded evaluation and coded-aware fine-tuning, offline."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import torchgcc
from torchgcc import metrics
from torchgcc.stragglers import FixedStragglers

RECIPES = Path(__file__).resolve().parent.parent / "recipes"
sys.path.insert(0, str(RECIPES))

from lightning_gcc import (  # noqa: E402
    CIFAR10Data,
    CIFAR100Data,
    CodedClassifier,
    CodedTraining,
    DigitsData,
    ImageNetData,
    MNISTData,
    run,
)
from lightning_gcc.backbones import build_backbone  # noqa: E402

OFFLINE = [
    "--data.synthetic=true",
    "--trainer.fast_dev_run=true",
    "--data.num_workers=0",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
]


def fit(datamodule, config, tmp_path, *extra):
    return run(datamodule, config, args=["fit", *OFFLINE, f"--trainer.default_root_dir={tmp_path}", *extra])


@pytest.mark.parametrize(
    "datamodule, config, extra, shape, classes",
    [
        (DigitsData, "digits.yaml", [], (1, 8, 8), 10),
        (MNISTData, "mnist.yaml", ["--data.batch_size=16"], (1, 28, 28), 10),
        (CIFAR10Data, "cifar10.yaml", ["--data.batch_size=16"], (3, 32, 32), 10),
        (CIFAR100Data, "cifar100.yaml", ["--data.batch_size=16"], (3, 32, 32), 100),
        (ImageNetData, "imagenet.yaml", ["--data.batch_size=8", "--data.image_size=32"], (3, 32, 32), 1000),
    ],
    ids=["digits", "mnist", "cifar10", "cifar100", "imagenet"],
)
def test_fit_one_step_per_recipe(datamodule, config, extra, shape, classes, tmp_path):
    cli = fit(datamodule, config, tmp_path, *extra)
    assert cli.trainer.state.finished and cli.trainer.global_step == 1
    # the data's shape and classes reached the model through the CLI links
    assert cli.model.hparams.num_classes == classes and cli.model.hparams.in_chans == shape[0]
    cli.model.eval()
    assert cli.model(torch.zeros(2, *shape)).shape == (2, classes)
    metrics_ = cli.trainer.callback_metrics
    assert math.isfinite(metrics_["train/loss"]) and 0 <= metrics_["val/acc"] <= 1


def test_vit_config_builds_a_32px_vit(tmp_path):
    cli = fit(
        CIFAR10Data, "cifar10.yaml", tmp_path, f"--config={RECIPES / 'configs' / 'vit32.yaml'}", "--data.batch_size=8"
    )
    assert cli.model.net.patch_embed.grid_size == (8, 8)


def test_script_runs_from_the_command_line(tmp_path):
    command = [
        sys.executable,
        str(RECIPES / "digits.py"),
        "fit",
        "--data.synthetic",
        "true",
        "--trainer.fast_dev_run",
        "true",
        "--trainer.default_root_dir",
        str(tmp_path),
    ]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)  # slow on a loaded CPU
    assert done.returncode == 0, done.stderr[-2000:]
    assert "max_steps=1" in done.stdout + done.stderr


def test_coded_eval_without_a_checkpoint_refuses_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run(DigitsData, "digits.yaml", args=["coded_eval", *OFFLINE, f"--output_dir={tmp_path / 'eval'}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("coded_eval: error: no --ckpt_path") and "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "eval").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["coded_eval", "--ckpt_path=/nope.ckpt"], "coded_eval: error: --ckpt_path /nope.ckpt is not a file"),
        (["fit", "--ckpt_path=/nope.ckpt"], "fit: error: --ckpt_path /nope.ckpt is not a file"),
        (
            ["coded_eval", "--random_weights=true", "--output_dir={file}"],
            "coded_eval: error: --output_dir {file} is an existing file",
        ),
    ],
)
def test_a_path_that_cannot_work_stops_the_recipe_in_one_line_before_anything_is_built(argv, message, tmp_path, capsys):
    """A checkpoint that does not exist used to end in 40 lines of Lightning's traceback."""
    (tmp_path / "f").write_text("mine")
    argv = [arg.format(file=tmp_path / "f") for arg in argv]
    with pytest.raises(SystemExit) as exit_info:
        run(DigitsData, "digits.yaml", args=[*argv, *OFFLINE, f"--trainer.default_root_dir={tmp_path}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message.format(file=tmp_path / "f")) and "\n" not in err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["f"]


def test_a_recipe_without_its_extra_names_it_in_one_line():
    script = (
        "import runpy, sys; sys.modules['lightning'] = None; sys.argv = ['digits.py', 'fit']; "
        f"sys.path.insert(0, {str(RECIPES)!r}); runpy.run_path({str(RECIPES / 'digits.py')!r}, run_name='__main__')"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        "digits.py: error: lightning is not installed; it comes with the 'recipes' extra: "
        "pip install 'torchgcc[recipes]' (or pip install -e '.[recipes]' in a checkout)\n"
    )


def test_coded_eval_matches_coded_module(tmp_path):
    """The streaming sweep gives the same numbers as CodedModule on the same seeded masks."""
    out = tmp_path / "eval"
    cli = run(
        DigitsData,
        "digits.yaml",
        args=[
            "coded_eval",
            *OFFLINE,
            f"--trainer.default_root_dir={tmp_path}",
            "--codes=[gcc,bacc]",
            "--stragglers=[0,5]",
            "--repeats=2",
            "--num_inputs=8",
            "--num_workers=16",
            "--seed=3",
            f"--output_dir={out}",
            "--random_weights=true",  # the numbers, not the weights, are under test
        ],
    )
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["weights"] == "random (untrained)"
    assert (out / "results.csv").exists() and (out / "coded_eval.png").exists()
    records = {(r["scheme"], r["S"]): r for r in results["records"]}
    assert set(records) == {("gcc", 0), ("gcc", 5), ("bacc", 0), ("bacc", 5)}

    x, y = cli.datamodule.splits["test"].tensors  # 64 synthetic images: one batch
    model = cli.model.eval()
    with torch.no_grad():
        reference = model(x)
        for (scheme, s), record in records.items():
            masks = FixedStragglers(num_stragglers=s, placement="random", seed=3).sample(2 * 8, 16).view(2, 8, 16)
            coded = torchgcc.CodedModule(model.net, torchgcc.make_code(scheme, num_inputs=8, num_workers=16))
            decoded = torch.cat([coded(x, mask=mask) for mask in masks])
            expected = reference.repeat(2, 1)
            assert record["mse"] == pytest.approx(float(metrics.mse(decoded, expected)), rel=1e-4)
            assert record["agreement"] == pytest.approx(float(metrics.argmax_agreement(decoded, expected)))
            assert record["accuracy"] == pytest.approx(float(metrics.accuracy(decoded, y.repeat(2))))
            assert record["groups"] == 16 and math.isfinite(record["mse_ci"])
            assert cli.trainer.callback_metrics[f"coded/{scheme}/S{s}/mse"] == pytest.approx(record["mse"])
            assert record["reference_accuracy"] == pytest.approx(float(metrics.accuracy(reference, y)))
    config = results["config"]  # which recipe, data and checkpoint made these numbers
    assert config["data"] == "DigitsData" and config["ckpt_path"] is None and config["data_hparams"]["synthetic"]


def test_coded_finetune_one_step_through_the_code(tmp_path):
    cli = fit(DigitsData, "digits.yaml", tmp_path, f"--config={RECIPES / 'configs' / 'finetune.yaml'}")
    assert cli.model.coded == CodedTraining(plain_loss_weight=1.0)
    assert {"val/coded_acc", "val/agreement", "train/loss"} <= set(cli.trainer.callback_metrics)
    # codes stay out of the checkpoint: a coded model's state dict is a plain model's
    assert set(cli.model.state_dict()) == set(
        CodedClassifier(backbone="torchgcc:lenet5", in_chans=1, image_size=8).state_dict()
    )


def test_training_loss_is_on_the_decoded_outputs():
    torch.manual_seed(0)
    coded = CodedTraining(num_inputs=4, num_workers=10, num_stragglers=3, plain_loss_weight=0.5)
    module = CodedClassifier(backbone="torchgcc:lenet5", in_chans=1, image_size=8, coded=coded)
    module.log = lambda *args, **kwargs: None  # no trainer here
    module.on_fit_start()
    x, y = torch.randn(10, 1, 8, 8), torch.randint(10, (10,))
    loss = module.training_step((x, y), 0)
    mask = module._coded_runs["train"].last_mask
    assert mask.shape == (3, 10) and (mask.sum(1) == 7).all()
    decoded = torchgcc.CodedModule(module.net, torchgcc.GCC(num_inputs=4, num_workers=10))(x, mask=mask)
    expected = F.cross_entropy(decoded, y) + 0.5 * F.cross_entropy(module.net(x), y)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    loss.backward()
    assert all(p.grad is not None for p in module.net.parameters())


def test_init_from_loads_a_plain_checkpoint_into_a_coded_model(tmp_path):
    cli = fit(DigitsData, "digits.yaml", tmp_path)
    checkpoint = tmp_path / "plain.ckpt"
    cli.trainer.save_checkpoint(checkpoint)
    tuned = CodedClassifier(
        backbone="torchgcc:lenet5", in_chans=1, image_size=8, coded=CodedTraining(), init_from=str(checkpoint)
    )
    tuned.setup("fit")
    for name, value in cli.model.state_dict().items():
        torch.testing.assert_close(tuned.state_dict()[name], value)


def test_backbone_errors():
    with pytest.raises(ValueError, match="unknown backbone source"):
        build_backbone("nowhere:resnet18", num_classes=10, in_chans=3, image_size=32)
    with pytest.raises(ValueError, match="3-channel"):
        build_backbone("torchvision:resnet18", num_classes=10, in_chans=1, image_size=28)
    assert build_backbone("torchvision:resnet18", num_classes=7, in_chans=3, image_size=32).fc.out_features == 7


class FakeCIFAR10(torch.utils.data.Dataset):
    """Stands in for torchvision.datasets.CIFAR10: PIL images whose pixels encode (split, index)."""

    def __init__(self, root, train, transform=None, download=False):
        self.train, self.transform = train, transform

    def __len__(self):
        return 50 if self.train else 20

    def __getitem__(self, index):
        from PIL import Image

        value = index + (100 if self.train else 0)
        image = Image.new("RGB", (32, 32), color=(value, 0, 0))
        return self.transform(image), index % 10


def test_torchvision_data_holds_out_a_disjoint_validation_split(monkeypatch):
    import torchvision

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", FakeCIFAR10)
    data = CIFAR10Data(val_size=10, num_workers=0)
    data.setup("fit")
    train, val, test = data.splits["train"], data.splits["val"], data.splits["test"]
    assert (len(train), len(val), len(test)) == (40, 10, 20)
    assert set(train.indices).isdisjoint(val.indices) and len(set(train.indices) | set(val.indices)) == 50
    x, _ = val[0]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32
    # evaluation images are not augmented: the red channel is constant after normalisation
    assert torch.allclose(x[0], x[0, 0, 0].expand(32, 32))
    with pytest.raises(ValueError, match="val_size"):
        CIFAR10Data(val_size=50).hold_out(train.dataset, train.dataset)


def test_imagenet_reads_an_image_folder(tmp_path):
    from PIL import Image

    for split in ("train", "val"):
        for label, colour in enumerate(("red", "blue")):
            folder = tmp_path / "imagenet" / split / f"n0{label}"
            folder.mkdir(parents=True)
            for i in range(2):
                Image.new("RGB", (48, 40), color=colour).save(folder / f"{i}.png")
    cli = run(
        ImageNetData,
        "imagenet.yaml",
        args=[
            "fit",
            "--trainer.fast_dev_run=true",
            "--data.num_workers=0",
            "--data.batch_size=4",
            "--data.image_size=32",
            f"--data.root={tmp_path / 'imagenet'}",
            f"--trainer.default_root_dir={tmp_path}",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
        ],
    )
    assert cli.trainer.state.finished
    x, y = next(iter(cli.datamodule.val_dataloader()))
    assert x.shape == (4, 3, 32, 32) and sorted(y.tolist()) == [0, 0, 1, 1]
