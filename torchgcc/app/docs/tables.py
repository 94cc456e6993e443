"""Table renderers for results whose producing module does not define its own ``docs_table``.

Each function takes the plain JSON data of one committed results file and returns a whole Markdown table (see
:mod:`torchgcc.app.docs`). A renderer belongs next to the code that writes its JSON; these live here because that
code is a benchmark script or a module that has no renderer yet, and may move there.
"""

from __future__ import annotations

from typing import Any, Mapping

from torchgcc.app.tables import markdown_grid

__all__ = [
    "DECODE_CALLS",
    "FINETUNE_MODELS",
    "LAMBDA_SUITE_RULES",
    "NOISY_DECODERS",
    "adaptive_wait_seeds",
    "adversarial_lambda",
    "bmm_layout",
    "decode",
    "encode",
    "engines_before_after",
    "exports",
    "finetune_at",
    "finetune_seeds",
    "lambda_derived_rules",
    "lambda_suite",
    "lambda_suite_pools",
    "lambda_suite_worst",
    "latency",
    "latency_adaptive",
    "noisy",
    "profile",
    "training",
    "training_adaptive",
]

Data = Mapping[str, Any]


#: The decodes of ``benchmarks/decode.py`` (in the order of its table's columns) and their column titles.
DECODE_CALLS = {
    "eager": "eager",
    "eager_unchecked": "eager, `check=False`",
    "compiled": "compiled",
    "graph": "CUDA graph",
}


def decode(data: Data) -> str:
    """``benchmarks/decode.py``: every row of its JSON: the bare bmm's time and each decode against it (eager with and
    without the check, compiled, CUDA-graph replays where the run had them), the compiled decode against the compiled
    bmm where the run had it, the eager call's aten ops and host reads, and the load average after the row."""
    calls = [name for name in DECODE_CALLS if name in data["rows"][0]["over_bmm"]]
    against_compiled = "compiled_over_compiled_bmm" in data["rows"][0]
    lines = [
        "| threads | N | B | d | bmm (ms) | "
        + " | ".join(f"{DECODE_CALLS[name]} / bmm" for name in calls)
        + (" | compiled / compiled bmm" if against_compiled else "")
        + " | ops per call (reads) | load |",
        "|---:|---:|---:|---:|---:|" + "---:|" * (len(calls) + against_compiled) + "---:|---:|",
    ]
    for row in data["rows"]:
        ratios = " | ".join(f"{row['over_bmm'][name]:.3g}x" for name in calls)
        if against_compiled:
            ratios += f" | {row['compiled_over_compiled_bmm']:.3g}x"
        counts = row["per_call"]["eager"]
        lines.append(
            f"| {row['threads']} | {row['N']} | {row['B']} | {row['d']} | {1e3 * row['median_seconds']['bmm']:.3g} "
            f"| {ratios} | {counts['ops']} ({counts['reads']}) | {row['load_average_after'][0]:.1f} |"
        )
    return "\n".join(lines)


def bmm_layout(data: Data) -> str:
    """``benchmarks/bmm_layout.py``: every row of its JSON: the contiguous bmm's time, the kernels' rows read
    transposed and a transposing copy before the product against it, and the load average after the row."""
    lines = [
        "| threads | N | B | d | contiguous bmm (ms) | rows read transposed | copy, then bmm | load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in data["rows"]:
        ratios, contiguous_ms = row["over_contiguous"], 1e3 * row["median_seconds"]["contiguous"]
        lines.append(
            f"| {row['threads']} | {row['N']} | {row['B']} | {row['d']} | {contiguous_ms:.3g} "
            f"| {ratios['rows_transposed']:.2f}x | {ratios['copy_then_bmm']:.2f}x "
            f"| {row['load_average_after'][0]:.1f} |"
        )
    return "\n".join(lines)


def encode(data: Data) -> str:
    """``benchmarks/encode.py``: every row of its JSON: the bare matmul's time, CodedModule's encode against it, and
    the load average after the row."""
    lines = ["| threads | B | matmul (ms) | encode / matmul | load |", "|---:|---:|---:|---:|---:|"]
    for row in data["rows"]:
        lines.append(
            f"| {row['threads']} | {row['B']} | {1e3 * row['median_seconds']['matmul']:.3g} "
            f"| {row['encode_over_matmul']:.3g}x | {row['load_average_after'][0]:.1f} |"
        )
    return "\n".join(lines)


def profile(data: Data) -> str:
    """``torchgcc profile``'s ``profile.json``: every stage's median, its share of the forward, and per group."""
    forward = data["stages"]["forward"]["median_ms"]
    lines = ["| stage | median (ms) | per group (ms) | of the forward |", "|---|---:|---:|---:|"]
    for name, summary in data["stages"].items():
        share = summary["median_ms"] / forward
        lines.append(f"| {name} | {summary['median_ms']:.4g} | {data['per_group_ms'][name]:.4g} | {share:.3%} |")
    return "\n".join(lines)


def exports(data: None, *, modules: list[str]) -> str:
    """Each module's ``__all__`` (imported from the code), one row per module."""
    from torchgcc.app.docs.sources import exports as names

    lines = ["| module | `__all__` |", "|---|---|"]
    lines += [f"| `{module}` | {names(module)} |" for module in modules]
    return "\n".join(lines)


#: The rules of ``benchmarks/lambda_suite.py``, in table order, with their column headings: the baselines, the
#: default, BACC, then the candidate pooled rules the default was chosen from.
LAMBDA_SUITE_RULES: dict[str, str] = {
    "natural": "natural",
    "spacing": "spacing",
    "gcv": "GCV",
    "default": "default",
    "bacc": "BACC",
    "pooled": "pooled GCV",
    "previous": "previous default",
    "one_se": "one SE",
    "halved": "halved",
}


def lambda_suite(data: Data) -> str:
    """``benchmarks/lambda_suite.py``: every cell (workload, seed, K, N, S), each rule's MSE as a ratio to the best of
    natural / spacing / GCV, the ratio the default calibrated, and whether the default passes there."""
    header = ["workload", "seed", "K", "N", "S", *LAMBDA_SUITE_RULES.values(), "default's r", "default passes"]
    rows = [
        [r["workload"], str(r["seed"]), str(r["K"]), str(r["N"]), str(r["S"])]
        + [f"{r['ratio_to_best'][rule]:.2f}" for rule in LAMBDA_SUITE_RULES]
        + [f"{r['default_ratio_chosen']:.3g}", _suite_verdict(r)]
        for r in data["records"]
    ]
    return markdown_grid(header, rows)


def lambda_suite_worst(data: Data) -> str:
    """``benchmarks/lambda_suite.py`` per workload: each rule's worst ratio to the best of natural / spacing / GCV
    over the workload's cells (both seeds), and the default's failing cells."""
    workloads: dict[str, list] = {}
    for r in data["records"]:
        workloads.setdefault(r["workload"], []).append(r)
    header = ["workload", "cells", *LAMBDA_SUITE_RULES.values(), "default fails"]
    rows = []
    for name, cells in workloads.items():
        worst = [f"{max(r['ratio_to_best'][rule] for r in cells):.2f}" for rule in LAMBDA_SUITE_RULES]
        failing = [f"seed {r['seed']} K={r['K']} N={r['N']} S={r['S']}" for r in cells if not r["passes"]]
        rows.append([name, str(len(cells)), *worst, ", ".join(failing) or "none"])
    return markdown_grid(header, rows)


def lambda_suite_pools(runs: list[Data]) -> str:
    """Runs of ``benchmarks/lambda_suite.py`` on one split that differ in ``--calibration-groups`` (the first batch
    the default and the candidates calibrate on), in the order given: each rule's worst ratio to the best of natural /
    spacing / GCV over every cell, the cells where the default fails the criterion, and its worst cell."""
    header = ["calibration groups", "cells", *LAMBDA_SUITE_RULES.values(), "default fails", "default's worst cell"]
    rows = []
    for run in runs:
        summary = run["summary"]
        workload, seed, k, n, s = summary["worst"]["default"]["cell"]
        rows.append(
            [str(run["config"]["calibration_groups"]), str(summary["cells"])]
            + [f"{summary['worst'][rule]['ratio']:.2f}" for rule in LAMBDA_SUITE_RULES]
            + [str(summary["cells_failing"]["default"]), f"{workload} seed {seed} K={k} N={n} S={s}"]
        )
    return markdown_grid(header, rows)


def lambda_derived_rules(data: Data) -> str:
    """``benchmarks/lambda_derived_rules.py``: per rule (then the default decoded again by that run, and the suites' own
    default) and suite, the worst ratio to the best of natural / spacing / GCV and the cells failing the criterion, and
    the failing cells over all suites."""
    suites = data["config"]["suites"]
    names = [*data["config"]["rules"], *data["config"]["references"], "validated", "default_rebuilt", "default"]
    header = ["rule", *(f"{_suite_name(path)}: worst (cells failing)" for path in suites), "cells failing, all"]
    rows = []
    for name in names:
        per_suite = [data["summary"][path][name] for path in suites]
        cells = [f"{s['worst']:.3f} ({s['cells_failing']})" for s in per_suite]
        rows.append([name, *cells, str(sum(s["cells_failing"] for s in per_suite))])
    return markdown_grid(header, rows)


def _suite_name(path: str) -> str:
    """``.../lambda_suite_heldout.json`` -> ``heldout``."""
    return path.rsplit("/", 1)[-1].removeprefix("lambda_suite_").removesuffix(".json")


def _suite_verdict(cell: Data) -> str:
    if cell["passes"]:
        return "yes"
    reasons = []
    if not cell["within_tolerance"]:
        reasons.append("above 1.10")
    if not cell["not_worse_than_bacc"]:
        reasons.append("worse than BACC")
    return "**no** (" + ", ".join(reasons) + ")"


def adversarial_lambda(data: Data) -> str:
    """``benchmarks/adversarial_lambda.py``: the slope of the plain decoder's error per constant c and exponent a."""
    by = {(r["c"], r["a"]): r for r in data["records"]}
    exponents = sorted({a for _, a in by})
    header = ["c"] + [f"slope a={a:g} (theory {by[next(iter(by))[0], a]['theory']:.2f})" for a in exponents]
    last = exponents[-1]
    header.append(f"MSE at N={by[next(iter(by))[0], last]['N'][-1]}, a={last:g}")
    rows = [
        [f"{c:g}"] + [f"{by[c, a]['slope']:.2f}" for a in exponents] + [f"{by[c, last]['mse'][-1]:.3g}"]
        for c in sorted({c for c, _ in by})
    ]
    return markdown_grid(header, rows, left=0)


#: Decoders of the noisy-workers experiment, in table order, with their column headings.
NOISY_DECODERS: dict[str, str] = {
    "noise-aware": "noise-aware",
    "natural": "natural",
    "gcv": "GCV",
    "gcc": "GCC (default)",
    "bacc": "BACC",
}


def noisy(data: Data, *, sweep: str = "N") -> str:
    """``torchgcc reproduce noisy``: MSE of every decoder against N (``sweep="N"``, ``"bf16"``) or against sigma
    (``sweep="sigma"``, the ``sigma_records``)."""
    records = data["sigma_records"] if sweep == "sigma" else [r for r in data["records"] if r["sweep"] == sweep]
    setting = "sigma" if sweep == "sigma" else "N"
    cells: dict[Any, dict[str, str]] = {}
    for r in records:
        cells.setdefault(r[setting], {})[r["scheme"]] = f"{r['mse']:.3g}"
    header = [setting] + list(NOISY_DECODERS.values())
    rows = [[f"{value:g}"] + [by.get(scheme, "-") for scheme in NOISY_DECODERS] for value, by in cells.items()]
    return markdown_grid(header, rows, left=0)


def _training_labels() -> dict[str, str]:
    from torchgcc.app.experiments.training_study import LABELS

    return LABELS


def training(data: Data, *, model: str) -> str:
    """``torchgcc reproduce training``: for ``model``, every (clock, m, s) row and every scheme, each cell
    ``seconds per step / steps to target / virtual seconds to target`` (means over seeds; ``(k of n)`` when only k
    seeds reached the target)."""
    config, labels = data["config"], _training_labels()
    schemes = list(dict.fromkeys(r["scheme"] for r in data["records"] if r["model"] == model))
    cells: dict[tuple, dict[str, str]] = {}
    for r in data["records"]:
        if r["model"] != model:
            continue
        time = "-" if r["time_to_target"] is None else f"{r['time_to_target']:.0f}"
        steps = "-" if r["steps_to_target"] is None else f"{r['steps_to_target']:.0f}"
        reached = "" if r["reached"] == r["seeds"] else f" ({r['reached']} of {r['seeds']})"
        key = (r["clock"], r["m"], r["s"])
        cells.setdefault(key, {})[r["scheme"]] = f"{r['step_time']:.3g} / {steps} / {time}{reached}"
    header = ["t_c", "m (s)", "s"] + [labels.get(scheme, scheme) for scheme in schemes]
    clocks = list(config["compute_times"][model])
    rows = []
    for (clock, m, s), by in sorted(cells.items(), key=lambda item: (clocks.index(item[0][0]), *item[0][1:])):
        t_c = f"{_seconds(config['compute_times'][model][clock])} ({clock})"
        rows.append([t_c, f"{m:g}", str(s)] + [by.get(scheme, "-") for scheme in schemes])
    return markdown_grid(header, rows)


def _seconds(value: float) -> str:
    """``0.0437`` -> ``"43.7 ms"``, ``1.61`` -> ``"1.61 s"``."""
    return f"{value:.3g} s" if value >= 1 else f"{1e3 * value:.3g} ms"


def training_adaptive(data: Data, *, model: str) -> str:
    """The adaptive-wait rows of ``torchgcc reproduce training``: per (m, s, scheme), the mean S over seeds and,
    on each clock, seconds per step and time to target, then steps to target and final loss (mean ± 95% CI)."""
    labels = _training_labels()
    clocks = list(data["config"]["compute_times"][model])
    mean_s: dict[tuple, list[float]] = {}
    for run in data["runs"]:
        if run["model"] == model:
            mean_s.setdefault((run["scheme"], run["s"]), []).append(run.get("mean_S", run["s"]))
    by = {(r["m"], r["s"], r["scheme"], r["clock"]): r for r in data["records"] if r["model"] == model}

    def pm(record: Mapping[str, Any], key: str, digits: int = 3) -> str:
        value, ci = record[key], record.get(f"{key}_ci")
        return "-" if value is None else f"{value:.{digits}g}" + ("" if ci is None else f" ± {ci:.1g}")

    header = ["m (s)", "s", "scheme", "mean S"]
    header += [f"{name} ({clock} clock)" for clock in clocks for name in ("s/step", "time to target (s)")]
    header += ["steps to target", "final loss"]
    rows = []
    for m, s, scheme in sorted(dict.fromkeys(key[:3] for key in by), key=lambda key: key[:2]):
        first = by[m, s, scheme, clocks[0]]
        values = mean_s[scheme, s]
        row = [f"{m:g}", str(s), labels.get(scheme, scheme), f"{sum(values) / len(values):.2f}"]
        row += [pm(by[m, s, scheme, clock], key) for clock in clocks for key in ("step_time", "time_to_target")]
        row += [pm(first, "steps_to_target"), pm(first, "final_loss")]
        rows.append(row)
    return markdown_grid(header, rows, left=0)


def _pm(value: Any, ci: Any, spec: str, ci_spec: str) -> str:
    return "-" if value is None else f"{value:{spec}} ± {(0.0 if ci is None else ci):{ci_spec}}"


def latency(data: Data) -> str:
    """``torchgcc bench-latency``'s ``results.json``: every scheme of every setting (latencies in seconds, MSE and
    agreement as means ± 95% CI over steps)."""
    header = ["N", "K", "p", "scheme", "median s", "p99 s", "model p99 s", "MSE (95% CI)", "agreement (95% CI)"]
    rows = []
    for setting in data["settings"]:
        for scheme, r in setting["schemes"].items():
            rows.append(
                [str(setting["N"]), str(setting["K"]), "-" if setting["p"] is None else f"{setting['p']:g}", scheme]
                + [f"{r[key]:.3f}" for key in ("median_latency_s", "p99_latency_s", "model_p99_latency_s")]
                + [_pm(r["mse"], r["mse_ci"], ".1e", ".0e"), _pm(r["agreement"], r["agreement_ci"], ".3f", ".3f")]
            )
    return markdown_grid(header, rows, left=0)


def latency_adaptive(data: Data) -> str:
    """``torchgcc bench-latency --adaptive-wait``: every scheme of its (one) setting with the adaptive columns."""
    (setting,) = data["settings"]
    deadline = setting["adaptive_wait"]["deadline_s"]
    header = ["scheme", "mean S", "median s", "p99 s", "p99 after change s", "model p99 s"]
    header += [f"steps over {deadline:g} s", "agreement (95% CI)"]
    rows = []
    for scheme, r in setting["schemes"].items():
        mean_s = r.get("mean_S")
        rows.append(
            [scheme, "-" if mean_s is None or mean_s != mean_s else f"{mean_s:.2f}"]
            + [f"{r[key]:.3f}" for key in ("median_latency_s", "p99_latency_s", "p99_after_change_s")]
            + [f"{r['model_p99_latency_s']:.3f}", f"{r['over_deadline']:.3f}"]
            + [_pm(r["agreement"], r["agreement_ci"], ".3f", ".3f")]
        )
    return markdown_grid(header, rows)


def adaptive_wait_seeds(data: Mapping[str, Data]) -> str:
    """``benchmarks/adaptive_wait_seeds.py``: per file (one setting each, ``{label: data}``), over its seeds, how
    often the adaptive row met each count and both, its mean S and the tail changes it detected per run."""
    header = ["settings (file)", "seeds", "p99 no higher", "agreement no lower", "both", "mean S"]
    header.append("detected changes per run")
    rows = []
    for label, runs in data.items():
        seeds = runs["runs"]
        rows.append(
            [f"`{label}`", str(len(seeds))]
            + [str(runs["passed"][key]) for key in ("p99", "agreement", "both")]
            + [f"{sum(r['mean_S'] for r in seeds) / len(seeds):.2f}"]
            + [f"{sum(r['changes'] for r in seeds) / len(seeds):.1f}"]
        )
    return markdown_grid(header, rows)


#: The three models of ``recipes/finetune_study.py``, in table order.
FINETUNE_MODELS = ("base", "coded_finetune", "plain_finetune")


def finetune_at(data: Data, model: str, *, scheme: str = "gcc", stragglers: int | None = None) -> Data:
    """The record of ``model`` in one ``recipes/finetune_study.py`` JSON at ``scheme`` and ``stragglers`` (default:
    the S it fine-tuned with)."""
    s = data["settings"]["num_stragglers"] if stragglers is None else stragglers
    return next(r for r in data["records"][model] if r["scheme"] == scheme and r["S"] == s)


def finetune_seeds(data: list) -> str:
    """``recipes/finetune_study.py`` over seeds: each model's plain accuracy, and its RelAcc and decoded accuracy
    (± 95% half-width) with GCC at the S it fine-tuned with; the best of the three models in bold; the mean row."""

    def cells(values: list[float], cis: list[float] | None) -> list[str]:
        best = max(values)
        return [
            ("**{:.4f}**" if value == best else "{:.4f}").format(value) + ("" if cis is None else f" ± {ci:.4f}")
            for value, ci in zip(values, cis or [None] * len(values))
        ]

    rows, columns = [], {"plain": [], "agreement": [], "accuracy": []}
    for run in data:
        at = [finetune_at(run, model) for model in FINETUNE_MODELS]
        plain = [run["reference_accuracy"][model] for model in FINETUNE_MODELS]
        columns["plain"].append(plain)
        columns["agreement"].append([r["agreement"] for r in at])
        columns["accuracy"].append([r["accuracy"] for r in at])
        rows.append(
            [str(run["settings"]["seed"]), " / ".join(f"{value:.3f}" for value in plain)]
            + cells([r["agreement"] for r in at], [r["agreement_ci"] for r in at])
            + cells([r["accuracy"] for r in at], [r["accuracy_ci"] for r in at])
        )
    mean = {key: [sum(v[i] for v in values) / len(values) for i in range(3)] for key, values in columns.items()}
    rows.append(
        ["mean", " / ".join(f"{value:.3f}" for value in mean["plain"])]
        + cells(mean["agreement"], None)
        + cells(mean["accuracy"], None)
    )
    header = ["seed", "plain acc: base / coded FT / plain FT", "RelAcc: base", "coded FT", "plain FT"]
    header += ["decoded acc: base", "coded FT", "plain FT"]
    return markdown_grid(header, rows, left=2)


def engines_before_after(data: Data) -> str:
    """``benchmarks/engines_before_after.py``: the transport medians, then every mode and code of the step-latency
    jobs (median and p99 step latency, and the injected jobs' median overhead over the delays), before and after,
    with their ratio; and each job's exit codes by rank."""
    before, after = data["before"], data["after"]

    def row(label: str, old: float, new: float) -> str:
        return f"| {label} | {1e3 * old:.1f} | {1e3 * new:.1f} | {new / old:.2f}x |"

    lines = ["| measured (one run each) | before (ms) | after (ms) | after / before |", "|---|---:|---:|---:|"]
    for path in ("pg", "store"):
        label = "data plane" if path == "pg" else "store"
        old, new = before["transport"]["median_s"][path], after["transport"]["median_s"][path]
        lines.append(row(f"16 MB rank -> coordinator, {label} (median)", old, new))
    for mode in ("injected", "measured"):
        old_rows, new_rows = before["step_latency"][mode]["schemes"], after["step_latency"][mode]["schemes"]
        for name, old in old_rows.items():
            new = new_rows[name]
            lines.append(row(f"{mode} `{name}`: median step", old["median_latency_s"], new["median_latency_s"]))
            lines.append(row(f"{mode} `{name}`: p99 step", old["p99_latency_s"], new["p99_latency_s"]))
            if "median_overhead_s" in old:
                lines.append(
                    row(f"{mode} `{name}`: median overhead", old["median_overhead_s"], new["median_overhead_s"])
                )
        codes = (before["step_latency"][mode]["returncodes"], after["step_latency"][mode]["returncodes"])
        lines.append(f"| {mode} job: exit codes by rank | {codes[0]} | {codes[1]} | |")
    return "\n".join(lines)
