"""The docs generator (``python -m torchgcc.app.docs``) and the docs themselves.

Two parts: the generator's rule and template engine against hand-written cases, then the repository's docs: each
committed doc equals its rendering, no template has a measured number without a source, every source is a committed
file, every dotted ``torchgcc`` name resolves, the README's size, Quickstart and snippets, and the documented
commands (they parse, and none writes into a tracked file).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torchgcc.app.docs import (
    DocsError,
)
from torchgcc.app.docs.rule import measured_numbers
from torchgcc.app.docs.sources import Sources
from torchgcc.app.docs.template import render

ROOT = Path(__file__).resolve().parents[1]


# --- the measured-number rule ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, flagged",
    [
        ("MSE 0.5 at S=4", ["0.5"]),
        ("slope -8.36", ["-8.36"]),
        ("noise 1e-2 and 3E5", ["1e-2", "3E5"]),
        ("99.7% of groups, 5 %", ["99.7%", "5 %"]),
        ("9x faster, 1.8x", ["9x", "1.8x"]),
        (
            "34 s, 12.5 ms, 21 minutes, 19.7 MB, 8 MiB, 3 min",
            ["34 s", "12.5 ms", "21 minutes", "19.7 MB", "8 MiB", "3 min"],
        ),
        ("steps of 0.64-0.78 s", ["0.64", "0.78 s"]),
        ("(0.2)", ["0.2"]),
    ],
)
def test_the_rule_flags_measured_numbers(text: str, flagged: list[str]) -> None:
    assert [finding.text for finding in measured_numbers(text)] == flagged


@pytest.mark.parametrize(
    "text",
    [
        "N = 32 workers, 3 seeds, 1000 steps, S=16",  # integers without a mark
        "float32, bf16, ResNet-18, vit_tiny_patch16_224, 8x8 digits, 24x8",  # parts of names
        "see `0.5 s` and `1e-2`, or ``x = 1.5``",  # code spans
        "```bash\nsleep 0.5  # 3 s\n```",  # fenced code
        "<!-- let x = 0.5 -->",  # a directive
        "{{ demo.mse | .3g }} s",  # a placeholder
        "[results/adaptive-wait-budget0.002.json](results/adaptive-wait-budget0.002.json)",  # a path and a target
        "arXiv 2606.02218, §6.2, a 95% CI, the 95% confidence interval",  # exempt
        "3 seeds, 4 steps, 2 samples",  # words starting like units
    ],
)
def test_the_rule_leaves_other_numbers_alone(text: str) -> None:
    assert measured_numbers(text) == []


def test_findings_carry_their_line() -> None:
    text = "first line\n```\n1.5 s\n```\nafter the block: 2.5 s\n"
    assert [(f.line, f.text) for f in measured_numbers(text)] == [(5, "2.5 s")]


# --- the template engine --------------------------------------------------------------------------------------


@pytest.fixture
def results_root(tmp_path: Path) -> Path:
    folder = tmp_path / "docs" / "results"
    folder.mkdir(parents=True)
    records = [
        {"scheme": "gcc", "S": 0, "mse": 0.0224, "mse_ci": 0.0007},
        {"scheme": "bacc", "S": 0, "mse": 0.121, "mse_ci": 0.003},
    ]
    (folder / "toy.json").write_text(json.dumps({"config": {"repeats": 20}, "records": records}))
    return tmp_path


def _render(text: str, root: Path) -> str:
    return render(text, name="toy.md", sources=Sources(root))


def test_placeholders_lets_and_format_specs(results_root: Path) -> None:
    text = (
        '<!-- let toy = load("docs/results/toy.json") -->\n'
        'GCC {{ toy(scheme="gcc", S=0).mse }}, BACC {{ toy(scheme="bacc", S=0).mse | .1f }}, '
        '{{ toy(scheme="bacc", S=0).mse / toy(scheme="gcc", S=0).mse | .2g }}x, '
        "{{ toy.config.repeats }} repeats, {{ 1e-3 * toy.config.repeats | .0e }}.\n"
    )
    assert _render(text, results_root) == "GCC 0.0224, BACC 0.1, 5.4x, 20 repeats, 2e-2.\n"


def test_a_failed_check_names_the_line(results_root: Path) -> None:
    text = '<!-- let toy = load("docs/results/toy.json") -->\nok\n<!-- check toy.config.repeats > 50 -->\n'
    with pytest.raises(DocsError, match=r"toy.md:3: the claim no longer holds: toy.config.repeats > 50"):
        _render(text, results_root)


@pytest.mark.parametrize(
    "text, message",
    [
        ("{{ 0.5 }}", "computes from no source"),
        ("<!-- let x = 2 * 3 -->", "computes from no source"),
        ('{{ load("docs/results/toy.json")(scheme="lcc").mse }}', "0 records match"),
        ('{{ load("docs/results/toy.json").config.seed }}', "has no entry 'seed'"),
        ('{{ load("docs/results/missing.json") }}', "no such file"),
        ('{{ load("README.md") }}', "templates read results from"),
        ('{{ load("docs/results/toy.json").config }}', "is a dict, not a number"),
        ('{{ table("experiments.no_such_study", 1) }}', "table"),
    ],
)
def test_template_errors_say_what_is_wrong(results_root: Path, text: str, message: str) -> None:
    with pytest.raises(DocsError, match=message):
        _render(text, results_root)


def test_a_table_comes_from_its_renderer(results_root: Path) -> None:
    text = '{{ table("experiments.polynomial_study", load("docs/results/toy.json")) }}'
    assert _render(text, results_root).splitlines() == [
        "| S | GCC MSE | BACC MSE |",
        "|---:|---:|---:|",
        "| 0 | 0.0224 ± 0.0007 | 0.121 ± 0.003 |",
    ]
