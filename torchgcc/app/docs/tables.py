"""Table renderers for results whose producing module does not define its own ``docs_table``.

Each function takes the plain JSON data of one committed results file and returns a whole Markdown table (see
:mod:`torchgcc.app.docs`). A renderer belongs next to the code that writes its JSON; these live here because that
code is a benchmark script or a module that has no renderer yet, and may move there.
"""

from __future__ import annotations

from typing import Any, Mapping

from torchgcc.app.tables import markdown_table

__all__ = [
    "ADVERSARIAL_DECODERS",
    "DECODE_ROWS",
    "LAMBDA_SUITE_RULES",
    "NOISY_DECODERS",
    "adaptive_wait_seeds",
    "adversarial_acceptance",
    "adversarial_lambda",
    "adversarial_lenet5_case",
    "adversarial_worst_case",
    "decode",
    "exports",
    "lambda_suite",
    "lambda_suite_worst",
    "latency",
    "latency_adaptive",
    "manifold",
    "noisy",
    "profile",
    "rates",
    "training",
    "training_adaptive",
]

Data = Mapping[str, Any]


def rates(data: Data) -> str:
    """``torchgcc reproduce rates``: its ``table.md`` (MSE against N, one column per series)."""
    return markdown_table(data["records"], setting="N")


#: What each timing of ``benchmarks/decode.py`` measures (a key it does not know is shown by name).
DECODE_ROWS: dict[str, str] = {
    "bmm": "bare `torch.bmm` applying {groups} precomputed `(K, N)` matrices",
    "decode_cold": 'decode, `lambda_dec="spacing"`, empty cache ({groups} distinct matrices built in the call)',
    "decode_cold_check_false": 'decode, `lambda_dec="spacing"`, empty cache, `check=False`',
    "decode_warm": 'decode, `lambda_dec="spacing"`, the matrices cached',
    "construct": "matrix construction alone ({groups} masks)",
    "decode_adaptive_default": 'decode, the default `lambda_dec="adaptive"` (lambda per group, nothing cached)',
    "scipy_loop": "a scipy loop fitting each group's results (spacing lambda)",
}


def decode(data: Data) -> str:
    """``benchmarks/decode.py``: every timing of its JSON, in ms and against the bare bmm."""
    settings, seconds = data["settings"], data["seconds"]
    lines = ["| what | time (ms) | against the bare bmm |", "|---|---:|---:|"]
    for key, value in seconds.items():
        label = DECODE_ROWS.get(key, f"`{key}`").format(groups=settings["groups"])
        lines.append(f"| {label} | {1e3 * value:.3g} | {value / seconds['bmm']:.3g}x |")
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


def _markdown(header: list[str], rows: list[list[str]], *, left: int = 1) -> str:
    """A Markdown table: the first ``left`` columns left-aligned, the others right-aligned."""
    rule = "|" + "---|" * left + "---:|" * (len(header) - left)
    return "\n".join(["| " + " | ".join(header) + " |", rule] + ["| " + " | ".join(row) + " |" for row in rows])


#: The rules of ``benchmarks/lambda_suite.py``, in table order, with their column headings.
LAMBDA_SUITE_RULES: dict[str, str] = {
    "natural": "natural",
    "spacing": "spacing",
    "gcv": "GCV",
    "adaptive": "default",
    "bacc": "BACC",
}


def lambda_suite(data: Data) -> str:
    """``benchmarks/lambda_suite.py``: every cell (workload, K, N, S), each rule's MSE as a ratio to the best of
    natural / spacing / GCV, the ratio the default calibrated, and whether the default passes there."""
    header = ["workload", "K", "N", "S", *LAMBDA_SUITE_RULES.values(), "default's r", "default passes"]
    rows = [
        [r["workload"], str(r["K"]), str(r["N"]), str(r["S"])]
        + [f"{r['ratio_to_best'][rule]:.2f}" for rule in LAMBDA_SUITE_RULES]
        + [f"{r['adaptive_ratio_chosen']:g}", _suite_verdict(r)]
        for r in data["records"]
    ]
    return _markdown(header, rows)


def lambda_suite_worst(data: Data) -> str:
    """``benchmarks/lambda_suite.py`` per workload: each rule's worst ratio to the best of natural / spacing / GCV
    over the workload's cells, and the default's failing cells."""
    workloads: dict[str, list] = {}
    for r in data["records"]:
        workloads.setdefault(r["workload"], []).append(r)
    header = ["workload", "cells", *LAMBDA_SUITE_RULES.values(), "default fails"]
    rows = []
    for name, cells in workloads.items():
        worst = [f"{max(r['ratio_to_best'][rule] for r in cells):.2f}" for rule in LAMBDA_SUITE_RULES]
        failing = [f"K={r['K']} N={r['N']} S={r['S']}" for r in cells if not r["passes"]]
        rows.append([name, str(len(cells)), *worst, ", ".join(failing) or "none"])
    return _markdown(header, rows)


def _suite_verdict(cell: Data) -> str:
    if cell["passes"]:
        return "yes"
    reasons = []
    if not cell["within_tolerance"]:
        reasons.append("above 1.10")
    if not cell["not_worse_than_bacc"]:
        reasons.append("worse than BACC")
    return "**no** (" + ", ".join(reasons) + ")"


#: Decoders of the adversarial experiment, in table order, with their column headings.
ADVERSARIAL_DECODERS: dict[str, str] = {
    "natural": "natural",
    "gcc": "GCC default",
    "plain": "adversarial lambda",
    "huber": "Huber",
    "trim": "trim",
    "bacc": "BACC",
}


def adversarial_worst_case(data: Data, *, workload: str = "xsinx") -> str:
    """``torchgcc reproduce adversarial``: per (a, N), each decoder's worst-case MSE over the attacks (named)."""
    cells: dict[tuple, dict[str, str]] = {}
    for r in data["records"]:
        if r["workload"] == workload:
            cells.setdefault((r["a"], r["N"], r["q"]), {})[r["scheme"]] = f"{r['mse']:.3g} ({r['attack']})"
    header = ["a", "N", "q"] + list(ADVERSARIAL_DECODERS.values())
    rows = [
        [f"{a:g}", str(n), str(q)] + [by.get(scheme, "-") for scheme in ADVERSARIAL_DECODERS]
        for (a, n, q), by in sorted(cells.items())
    ]
    return _markdown(header, rows, left=0)


def adversarial_acceptance(data: Data) -> str:
    """The adversarial experiment's acceptance checks on x sin x: each robust decoder's slope against the bound."""
    checks = data["acceptance"]["xsinx"]
    largest = {check["largest_N"] for check in checks.values()}
    header = ["a", "decoder", "slope", "bound (6/5)(a-1)+0.15", f"natural / robust at N = {max(largest)}"]
    rows = []
    for key, check in checks.items():
        a, decoder = key.split()
        rows.append(
            [
                a.removeprefix("a="),
                decoder,
                f"{check['slope']:.2f}",
                f"{check['bound']:.2f}",
                f"{check['natural_over_robust_at_largest_N']:.3g}",
            ]
        )
    return _markdown(header, rows, left=0)


def adversarial_lenet5_case(data: Data) -> str:
    """The adversarial experiment's LeNet5 case: every decoder under every attack (MSE, RelAcc, detection)."""
    header = ["decoder", "attack", "MSE", "RelAcc %", "detection"]
    rows = []
    for key, values in data["acceptance"]["lenet5_case"].items():
        decoder, attack = key.split()
        detection = "-" if values["detection"] is None else f"{100 * values['detection']:.0f}%"
        rows.append([decoder, attack, f"{values['mse']:.3g}", f"{100 * values['agreement']:.1f}", detection])
    return _markdown(header, rows, left=2)


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
    return _markdown(header, rows, left=0)


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
    return _markdown(header, rows, left=0)


def manifold(data: Data) -> str:
    """``torchgcc reproduce manifold``: each order's MSE (and ratio to the standard order) and RelAcc."""
    cells: dict[tuple, dict[str, Mapping[str, Any]]] = {}
    for r in data["records"]:
        cells.setdefault((r["workload"], r["S"]), {})[r["scheme"]] = r
    header = [
        "workload",
        "S",
        "standard MSE",
        "greedy MSE (ratio)",
        "spectral MSE (ratio)",
        "RelAcc standard / greedy / spectral",
    ]
    rows = []
    for (workload, s), by in cells.items():
        relacc = (
            " / ".join(f"{100 * by[k]['agreement']:.1f}" for k in ("standard", "greedy", "spectral"))
            if by["standard"].get("agreement") is not None
            else "-"
        )
        rows.append(
            [workload, str(s), f"{by['standard']['mse']:.3g}"]
            + [f"{by[k]['mse']:.3g} ({by[k]['ratio']:.3f})" for k in ("greedy", "spectral")]
            + [relacc]
        )
    return _markdown(header, rows)


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
    return _markdown(header, rows)


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
    return _markdown(header, rows, left=0)


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
    return _markdown(header, rows, left=0)


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
    return _markdown(header, rows)


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
    return _markdown(header, rows)
