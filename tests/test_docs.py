"""The docs generator (``python -m torchgcc.app.docs``) and the docs themselves.

Two parts: the generator's rule and its Jinja2 environment against hand-written cases, then the repository's docs: each
committed doc equals its rendering, no template has a measured number without a source, every source is a committed
file, every dotted ``torchgcc`` name resolves, the README's size, Quickstart and snippets, and the documented
commands (they parse, and none writes into a tracked file).
"""

from __future__ import annotations

import difflib
import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from torchgcc.app.docs import (
    TEMPLATES,
    DocsError,
    render_all,
    stale_docs,
    target_of,
    unsourced_numbers,
)
from torchgcc.app.docs import templates as templates_of
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
        # the two kinds that slipped through before: a margin written as code, orders of magnitude in words
        ("the event rate stays within `budget + 0.02`.", ["budget + 0.02"]),
        ("over-smoothed by up to two orders of\nmagnitude", ["two orders of magnitude"]),
        ("3 orders of magnitude below", ["3 orders of magnitude"]),
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
        "<!-- 0.5 s -->",  # an HTML comment
        '{{ demo.mse | fmt(".3g") }} s',  # a placeholder
        "{% set x = 0.5 %}, {% check x < 1.5 %}, {# 2.5 s #}",  # Jinja2 tags and comments
        "[results/adaptive-wait-budget0.002.json](results/adaptive-wait-budget0.002.json)",  # a path and a target
        "arXiv 2606.02218, §6.2, a 95% CI, the 95% confidence interval",  # exempt
        "3 seeds, 4 steps, 2 samples",  # words starting like units
        "`lam=0.5`, `r = 0.2`, `x + 1`, `0.5 * n` is n",  # settings and integer arithmetic in code
        "{{ gap | fmt('.0f') }} orders of magnitude",  # a placeholder's count
    ],
)
def test_the_rule_leaves_other_numbers_alone(text: str) -> None:
    assert measured_numbers(text) == []


def test_findings_carry_their_line() -> None:
    text = "first line\n```\n1.5 s\n```\nafter the block: 2.5 s\n"
    assert [(f.line, f.text) for f in measured_numbers(text)] == [(5, "2.5 s")]


# --- the Jinja2 environment ----------------------------------------------------------------------------------


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


def test_placeholders_sets_and_the_format_filter(results_root: Path) -> None:
    text = (
        '{% set toy = load("docs/results/toy.json") %}\n'
        'GCC {{ toy(scheme="gcc", S=0).mse }}, BACC {{ toy(scheme="bacc", S=0).mse | fmt(".1f") }}, '
        '{{ (toy(scheme="bacc", S=0).mse / toy(scheme="gcc", S=0).mse) | fmt(".2g") }}x, '
        '{{ toy.config.repeats }} repeats, {{ (1e-3 * toy.config.repeats) | fmt(".0e") }}, '
        '{{ toy.records | map(attribute="mse") | map("fmt", ".1%") | join(" / ") }}.\n'
    )
    assert _render(text, results_root) == "GCC 0.0224, BACC 0.1, 5.4x, 20 repeats, 2e-2, 2.2% / 12.1%.\n"


def test_tags_on_lines_of_their_own_vanish_with_their_line(results_root: Path) -> None:
    text = (
        "a\n"
        '  {% set toy = load("docs/results/toy.json") %}\n'
        "{% for r in toy.records %}\n"
        "{% check r.mse > 0 %}\n"
        "{% endfor %}\n"
        "b {{ toy.config.repeats }}\n"
    )
    assert _render(text, results_root) == "a\nb 20\n"


def test_a_failed_check_shows_the_claim_and_its_line(results_root: Path) -> None:
    text = (
        '{% set toy = load("docs/results/toy.json") %}\nok\n'
        "{% for r in toy.records %}\n{% check r.mse <\n    0.1 %}\n{% endfor %}\n"
    )
    with pytest.raises(DocsError, match=r"^toy.md:4: the claim no longer holds: r.mse < 0.1$"):
        _render(text, results_root)


def test_an_undefined_name_fails_with_its_line(results_root: Path) -> None:
    text = '{% set toy = load("docs/results/toy.json") %}\n\nGCC {{ toy(scheme="gcc", S=0).mse }}, {{ tyo.mse }}\n'
    with pytest.raises(DocsError, match=r"^toy.md:3: UndefinedError: 'tyo' is undefined$"):
        _render(text, results_root)


@pytest.mark.parametrize(
    "text, message",
    [
        ("{{ 0.5 }}", "toy.md:1: the expression computes from no source"),
        ("\n{% set x = 2 * 3 %}", "toy.md:2: the expression computes from no source"),
        ('{% set d = {} %}{{ d["gcc"].mse }}', "UndefinedError: 'dict object' has no attribute 'gcc'"),
        ('{{ load("docs/results/toy.json").config.seed | fmt(".2f") }}', "has no entry 'seed'"),
        ('{{ load("docs/results/toy.json").config.repeats | fmt(".2q") }}', "fmt\\('.2q'\\) of 20"),
        ('{{ load("docs/results/toy.json").records[0].data.get("seed") }}', "the value is None"),
        ("{{ load( }}", "toy.md:1: unexpected '}'"),
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


# --- the repository's docs ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered() -> list:
    return render_all(ROOT)


def _git_files() -> set[str]:
    try:
        listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: which files are committed is unknown")
    return set(listed.stdout.splitlines())


def test_every_doc_is_rendered_from_a_template() -> None:
    docs = {Path("README.md"), Path("recipes/README.md")} | {p.relative_to(ROOT) for p in (ROOT / "docs").glob("*.md")}
    templates = {target_of(path) for path in templates_of(ROOT)}
    assert docs == templates


def test_committed_docs_equal_their_rendering(rendered) -> None:
    stale = stale_docs(ROOT, rendered)
    diffs = []
    for doc in rendered:
        if doc.target in stale:
            committed = (ROOT / doc.target).read_text().splitlines() if (ROOT / doc.target).is_file() else []
            diff = difflib.unified_diff(committed, doc.text.splitlines(), str(doc.target), "rendered", lineterm="")
            diffs.append("\n".join(list(diff)[:40]))
    assert not stale, "run `python -m torchgcc.app.docs`; the docs differ from their templates:\n" + "\n".join(diffs)


def test_every_measured_number_has_a_source() -> None:
    assert unsourced_numbers(ROOT) == {}


def test_every_source_is_a_committed_file(rendered) -> None:
    committed = _git_files()
    read = {source for doc in rendered for source in doc.sources}
    assert read and read <= committed, sorted(read - committed)


_DOTTED = re.compile(r"(?<![\w.])torchgcc(?:\.[A-Za-z_]\w*)+")
_FROM_IMPORT = re.compile(r"^[ \t]*from (torchgcc(?:\.\w+)*) import (?:\(([\w\s,]+)\)|([\w ,]+)$)", re.M)


def _names_in(text: str) -> set[str]:
    names = set(_DOTTED.findall(text))
    for module, wrapped, inline in _FROM_IMPORT.findall(text):
        names |= {f"{module}.{name.strip()}" for name in (wrapped or inline).split(",") if name.strip()}
    return names


def test_the_name_collector_sees_dotted_names_and_imports() -> None:
    text = "`torchgcc.codes.maps.CACHE_BYTES`, torchgcc.GCC.\n```python\n"
    text += "from torchgcc.control import (\n    A,\n    B,\n)\n```"
    assert _names_in(text) == {
        "torchgcc.codes.maps.CACHE_BYTES",
        "torchgcc.GCC",
        "torchgcc.control",
        "torchgcc.control.A",
        "torchgcc.control.B",
    }


def test_every_dotted_name_in_the_docs_resolves(rendered) -> None:
    from torchgcc.app.docs.sources import value

    dangling = []
    for doc in rendered:
        for name in sorted(_names_in(doc.text)):
            try:
                value(name)
            except (DocsError, ImportError) as error:
                dangling.append(f"{doc.target}: {name} ({error})")
    assert not dangling, "\n".join(dangling)


def _readme() -> str:
    return (ROOT / "README.md").read_text()


def test_readme_is_short_and_its_quickstart_is_two_commands_ci_runs() -> None:
    readme = _readme()
    assert len(readme) < 12_000
    quickstart = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", quickstart, re.S)
    assert [len(block.strip().splitlines()) for block in blocks] == [1, 1]
    demo, tests = (block.strip() for block in blocks)
    assert demo.endswith('pip install -e ".[experiments]" && torchgcc demo')
    assert tests.endswith('pip install -e ".[test]" && pytest')
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -q -e ".[test]"' in ci and re.search(r"^pytest$", ci, re.M)


def test_readme_snippets_run_as_doctests() -> None:
    """Warnings are errors: doctest does not see stderr, so a warning the example triggers would pass unseen."""
    import doctest
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        failures, attempted = doctest.testfile(str(ROOT / "README.md"), module_relative=False, verbose=False)
    assert attempted >= 10 and failures == 0


# --- the docs' Python snippets, run ---------------------------------------------------------------------------


def _python_blocks(doc: str, marker: str) -> list[str]:
    """The ``python`` blocks of a committed doc that contain ``marker``."""
    text = (ROOT / doc).read_text()
    return [body for language, body in _code_blocks(text) if language == "python" and marker in body]


def _run_snippet(body: str, namespace: dict) -> None:
    """Run a doc's Python block in ``namespace``, warnings as errors. A ``name = ...`` line is a placeholder: the
    namespace's value of ``name`` stands for it."""
    import ast
    import warnings

    tree = ast.parse(body)
    tree.body = [
        node
        for node in tree.body
        if not (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and node.value.value is Ellipsis
            and all(isinstance(target, ast.Name) and target.id in namespace for target in node.targets)
        )
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exec(compile(tree, "<doc snippet>", "exec"), namespace)


def test_the_snippet_runner_fills_placeholders_and_raises_warnings() -> None:
    namespace = {"x": 2}
    _run_snippet("x = ...  # given\ny = x + 1\n", namespace)
    assert namespace["y"] == 3
    with pytest.raises(UserWarning, match="loud"):
        _run_snippet("import warnings\nwarnings.warn('loud')\n", {})


def test_control_wait_count_snippets_run() -> None:
    """control.md's ``WaitCountController`` blocks (the construction, then ``observe`` in a ``CodedModule`` loop)
    run against the real signatures, with the names they take as given filled in here."""
    import torch

    import torchgcc
    from torchgcc.stragglers import LatencyStragglers

    blocks = _python_blocks("docs/control.md", "policy.")
    assert len(blocks) == 2
    num_workers = 24
    namespace = {
        "agreement_by_S": {s: 1 - s / 32 for s in range(num_workers - 8 + 1)},
        "latencies": torch.full((num_workers,), 1.0),
        "LatencyStragglers": LatencyStragglers,
        "N": num_workers,
        "deadline": 1.6,
        "num_groups": 2,
        "coded_module": torchgcc.CodedModule(
            torch.nn.Linear(3, 2), torchgcc.GCC(num_inputs=8, num_workers=num_workers, lambda_dec="spacing")
        ),
        "batches": [torch.randn(16, 3), torch.randn(16, 3)],
    }
    for body in blocks:
        _run_snippet(body, namespace)
    assert namespace["y"].shape == (16, 2)


def test_api_cnn_example_runs_without_warnings() -> None:
    (block,) = _python_blocks("docs/api.md", "cnn = ")
    namespace: dict = {}
    _run_snippet(block, namespace)
    assert namespace["estimates"].shape == (*namespace["images"].shape[:2], 10)


def test_training_md_names_the_gradient_coding_modules() -> None:
    """training.md's "**Part** (`module.py`)" bullets name modules of ``torchgcc.gradient_coding``."""
    text = (ROOT / "docs" / "training.md").read_text()
    named = re.findall(r"^- \*\*[^*]+\*\* \(`(\w+\.py)`\)", text, re.M)
    assert len(named) >= 5
    package = ROOT / "torchgcc" / "gradient_coding"
    assert [name for name in named if not (package / name).is_file()] == []


# --- the documented commands ----------------------------------------------------------------------------------


def _code_blocks(text: str) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced code block, in order."""
    blocks, fence, language, body = [], None, "", []
    for line in text.splitlines():
        stripped = line.strip()
        if fence is None and stripped.startswith(("```", "~~~")):
            fence, language, body = stripped[:3], stripped[3:].strip(), []
        elif fence is not None and stripped.startswith(fence):
            blocks.append((language, "\n".join(body) + "\n"))
            fence = None
        elif fence is not None:
            body.append(line)
    return blocks


def _commands(text: str) -> list[str]:
    """Every command line of the ``bash`` and ``sh`` code blocks: continuations joined, comments dropped."""
    found = []
    for language, block in _code_blocks(text):
        if language not in ("bash", "sh"):
            continue
        for line in re.sub(r"\s*\\\n\s*", " ", block).splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                found += [part.strip() for part in line.split("&&")]
    return found


def test_commands_are_read_from_shell_blocks_only() -> None:
    text = "```python\nx = 1\n```\nprose\n```bash\ntorchgcc demo \\\n    --quick  # fast\na && b\n```\n"
    assert _commands(text) == ["torchgcc demo --quick", "a", "b"]


def _options_in_source(path: Path) -> set[str]:
    """The option strings a script's argparse calls declare (read from its source, not run)."""
    import ast

    options = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            options |= {
                arg.value for arg in node.args if isinstance(arg, ast.Constant) and str(arg.value).startswith("-")
            }
    return options


def _check_command(command: str) -> None:
    """Parse a documented command with the parser it names (raises on an unknown option or a bad value)."""
    import argparse

    argv = shlex.split(command)
    while argv and re.fullmatch(r"[A-Z_]+=\S*", argv[0]):  # OMP_NUM_THREADS=1 python ...
        argv = argv[1:]
    if argv[0] == "torchgcc":
        from torchgcc.app.cli import build_parser

        build_parser(argv[1:]).parse_args(argv[1:])
        return
    if argv[0] == "torchrun":
        argv = ["python", *argv[argv.index("-m") :]]
    if argv[:2] == ["python", "-m"]:
        module, options = argv[2], argv[3:]
        if module in ("torchgcc.distributed", "torchgcc.distributed.launch"):
            from torchgcc.app.commands.distributed_job import JOB_PROG, add_job_arguments, settings_from

            job = options[options.index("--") + 1 :] if "--" in options else options
            settings_from(add_job_arguments(argparse.ArgumentParser(prog=JOB_PROG, allow_abbrev=False)).parse_args(job))
        elif module == "torchgcc.gradient_coding.runtime":
            from torchgcc.app.commands.gradient_coding_job import parser

            parser().parse_args(options)
        else:
            raise AssertionError(f"a documented module the test does not know: {module}")
        return
    if argv[0] in ("python", "python3", "bash") and argv[1].endswith((".py", ".sh")):
        script = ROOT / argv[1]
        assert script.is_file(), command
        if argv[1].startswith("benchmarks/") and script.suffix == ".py":
            options = {o.split("=")[0] for o in argv[2:] if o.startswith("-")}
            assert options <= _options_in_source(script), (command, options - _options_in_source(script))
        return
    known = (".", "cd", "kill", "pip", "pytest", "python3")
    assert argv[0] in known, f"a documented command the test does not know: {command}"


def _documented_commands(rendered) -> list[tuple[str, str]]:
    return [(str(doc.target), command) for doc in rendered for command in _commands(doc.text)]


def test_every_documented_command_parses(rendered) -> None:
    bad = []
    for doc, command in _documented_commands(rendered):
        try:
            _check_command(command)
        except (SystemExit, ValueError, AssertionError) as error:
            bad.append(f"{doc}: {command} ({type(error).__name__}: {error})")
    assert not bad, "\n".join(bad)


def _writes_into_the_checkout(command: str) -> bool:
    """Whether a command's output option names a path in the checkout outside ``./torchgcc-results/`` (gitignored):
    ``--out benchmarks/results/x.json`` rewrites a tracked file, ``--save run.pt`` leaves a file in the root."""
    argv = shlex.split(command)
    for option, target in zip(argv, argv[1:]):
        if option in ("--out", "--save", "--trace") or option.endswith("default_root_dir"):
            placeholder = re.fullmatch(r"[A-Z_]+|<[^>]+>", target) is not None
            outside = target.startswith(("/", "~", "$", "torchgcc-results/"))
            if not (placeholder or outside):
                return True
    return False


@pytest.mark.parametrize(
    "command, writes",
    [
        ("python benchmarks/lambda_suite.py --out benchmarks/results/lambda_suite.json", True),
        ("torchrun -m torchgcc.gradient_coding.runtime --save run.pt", True),
        ("torchgcc reproduce training --out torchgcc-results/training-lenet5", False),
        ("torchgcc reproduce adversarial --out <dir>", False),
        ("torchgcc profile --trace /tmp/trace.json --out DIR", False),
    ],
)
def test_the_write_check_tells_the_checkout_from_elsewhere(command: str, writes: bool) -> None:
    assert _writes_into_the_checkout(command) is writes


def test_no_documented_command_writes_into_the_checkout(rendered) -> None:
    writes = [
        f"{doc}: {command}" for doc, command in _documented_commands(rendered) if _writes_into_the_checkout(command)
    ]
    assert not writes, "\n".join(writes)


def test_every_python_block_of_the_docs_is_python(rendered) -> None:
    """A ``python`` block must at least parse (signature listings are ``text`` blocks); README's blocks run."""
    import ast

    broken = []
    for doc in rendered:
        for language, body in _code_blocks(doc.text):
            if language == "python":
                try:
                    ast.parse(body)
                except SyntaxError as error:
                    broken.append(f"{doc.target}: {error.msg} in {body.splitlines()[(error.lineno or 1) - 1]!r}")
    assert not broken, "\n".join(broken)


def test_the_command_writes_checks_and_refuses_unsourced_numbers(results_root: Path, monkeypatch, capsys) -> None:
    from torchgcc.app.docs.__main__ import main

    monkeypatch.chdir(results_root)
    templates = results_root / TEMPLATES
    templates.mkdir(parents=True)
    (templates / "toy.md").write_text('# Toy\n\nGCC {{ load("docs/results/toy.json")(scheme="gcc", S=0).mse }}.\n')
    assert main(["--check"]) == 1  # docs/toy.md does not exist yet
    assert main([]) == 0
    assert (results_root / "docs" / "toy.md").read_text().endswith("# Toy\n\nGCC 0.0224.\n")
    assert main(["--check"]) == 0
    (templates / "toy.md").write_text("# Toy\n\nGCC took 1.5 s.\n")
    assert main([]) == 1 and main(["--check"]) == 1
    assert "toy.md:3: measured number '1.5 s' has no placeholder" in capsys.readouterr().err
    assert (results_root / "docs" / "toy.md").read_text().endswith("GCC 0.0224.\n")  # nothing written
