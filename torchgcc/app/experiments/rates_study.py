"""``torchgcc reproduce rates``: the Fig. 4 experiment under the oracle adversary, and the Bernoulli regime.

``f`` is a fixed random smooth network (a tanh MLP on low-dimensional inputs, float64; one per seed), the smooth
regime of the theory. The stragglers of the worst case are chosen per group by the ORACLE adversary
(:func:`torchgcc.oracles.worst_stragglers`, maximising the group's MSE given the results and the exact outputs: every
set where ``C(N, S) <= exhaustive_limit``, above that every block and pair of blocks and hill climbing from the worst
of them), not placed by a rule; the geometric rule
``FixedStragglers(placement="widest_gap")`` (the old "worst" placement) is kept as a row for comparison.

- vs N: MSE at every N of ``workers`` for every S of ``stragglers``, beside the bound ``O(S^3 N^-3)``;
- vs S: MSE at every S of ``stragglers_sweep`` for every N of ``stragglers_at``;
- Bernoulli: every worker straggles with probability p (``repeats`` masks per group), beside
  ``O(log_{1/p}(N)^3 N^-3)``.

Every record is the mean over ``seeds`` (``mse_ci``: the Student-t 95% half-width over seeds; ``mse_by_seed`` the
values). ``slopes`` in results.json: the log-log slope of every series per seed, their mean and CI, beside the slope
of the bound on the same grid. ``brute_force``: the oracle's worst block against a loop over every block position
that decodes one mask of one group per call (the first seed, the smaller N), and the largest relative excess of the
oracle's worst set over the worst block (how much non-contiguous sets add).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

import torchgcc
from torchgcc.app.options import add_gcc_arguments, gcc_options
from torchgcc.app.plots import SCHEME_LABELS, log_errorbar, plt, reference_curve, save_figure, series
from torchgcc.app.results import ExperimentResult
from torchgcc.app.statistics import loglog_slope, seed_mean_ci
from torchgcc.app.tables import markdown_grid, publish
from torchgcc.coded_module import group_samples
from torchgcc.oracles import worst_stragglers
from torchgcc.oracles.stragglers import EXHAUSTIVE_LIMIT
from torchgcc.stragglers import BernoulliStragglers, FixedStragglers

__all__ = [
    "DEFAULT",
    "DOCS_TABLES",
    "QUICK",
    "Config",
    "SmoothMLP",
    "add_arguments",
    "bacc_wins",
    "brute_force_block_mse",
    "configure",
    "docs_table",
    "fit_slopes",
    "report",
    "run",
    "workload",
]


class SmoothMLP(nn.Module):
    """``f(x) = tanh(x W1 + b1) W2``: a fixed random smooth map ``(M, dim) -> (M, out_dim)`` in float64."""

    def __init__(self, *, dim: int = 2, hidden: int = 16, out_dim: int = 4, seed: int = 0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        draw = lambda *shape: torch.randn(*shape, generator=generator, dtype=torch.float64)  # noqa: E731
        self.register_buffer("w1", draw(dim, hidden) / dim**0.5)
        self.register_buffer("b1", draw(hidden))
        self.register_buffer("w2", draw(hidden, out_dim) / hidden**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x @ self.w1 + self.b1) @ self.w2


@dataclass(frozen=True)
class Config:
    """Settings: per seed, ``samples`` standard-normal inputs of ``dim`` coordinates coded ``num_inputs`` per group;
    ``schemes`` under the oracle for every (N, S) of the two sweeps; GCC under Bernoulli(p) stragglers (at least
    ``min_arrived`` results arrive) with ``repeats`` masks per group; the oracle searches every straggler set up to
    ``exhaustive_limit`` sets."""

    num_inputs: int = 8
    workers: tuple[int, ...] = (32, 45, 64, 91, 128, 181, 256)
    stragglers: tuple[int, ...] = (2, 4, 8)
    stragglers_at: tuple[int, ...] = (64, 256)
    stragglers_sweep: tuple[int, ...] = (1, 2, 4, 8, 16)
    probabilities: tuple[float, ...] = (0.05, 0.1, 0.2)
    schemes: tuple[str, ...] = ("gcc", "natural", "bacc")
    exhaustive_limit: int = EXHAUSTIVE_LIMIT
    samples: int = 128
    dim: int = 2
    repeats: int = 10
    min_arrived: int = 2
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    brute_force_up_to: int = 64
    gcc: Mapping[str, Any] = field(default_factory=dict)


#: The published run: K = 8, N from 32 to 256, S in {2, 4, 8}; S from 1 to 16 at N = 64 and 256; 5 seeds.
DEFAULT = Config()
#: ``--quick``: three N, two S, one p, two seeds, 32 samples.
QUICK = replace(
    DEFAULT,
    workers=(16, 32, 64),
    stragglers=(2, 4),
    stragglers_at=(32,),
    stragglers_sweep=(1, 2, 4),
    probabilities=(0.1,),
    samples=32,
    repeats=3,
    seeds=(0, 1),
    brute_force_up_to=32,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_gcc_arguments(parser)


def configure(args: argparse.Namespace) -> Config:
    """``--seed s`` runs the seeds ``s, s + 1, ...`` (as many as the configuration has)."""
    base = QUICK if args.quick else DEFAULT
    return replace(base, seeds=tuple(args.seed + i for i in range(len(base.seeds))), gcc=gcc_options(args))


def workload(config: Config, seed: int) -> tuple[SmoothMLP, torch.Tensor]:
    """The network and the ``(samples, dim)`` inputs of ``seed``."""
    generator = torch.Generator().manual_seed(1000 + seed)
    inputs = torch.randn(config.samples, config.dim, dtype=torch.float64, generator=generator)
    return SmoothMLP(dim=config.dim, seed=seed), inputs


def make_code(config: Config, scheme: str, num_workers: int) -> torchgcc.Code:
    options = dict(config.gcc) if scheme == "gcc" else {}
    return torchgcc.make_code(scheme, num_inputs=config.num_inputs, num_workers=num_workers, **options)


@torch.no_grad()
def coded_results(f: nn.Module, code: torchgcc.Code, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every worker's result ``(B, N, out)`` and the exact outputs ``(B, K, out)`` of the groups of ``inputs``."""
    groups = group_samples(inputs, code.num_inputs)
    coded = code.encoder(groups)
    results = f(coded.flatten(0, 1)).unflatten(0, coded.shape[:2])
    return results, f(groups.flatten(0, 1)).unflatten(0, groups.shape[:2])


@torch.no_grad()
def brute_force_block_mse(code: torchgcc.Code, results: torch.Tensor, reference: torch.Tensor, s: int) -> float:
    """The mean over groups of the worst block's MSE, by a plain loop: one block, one group per decoder call."""
    n = code.num_workers
    worst = []
    for group in range(len(results)):
        errors = []
        for start in range(n - s + 1):
            mask = torch.ones(1, n, dtype=torch.bool)
            mask[0, start : start + s] = False
            decoded = code.decoder(results[group : group + 1], mask)
            errors.append(float((decoded - reference[group : group + 1]).pow(2).mean()))
        worst.append(max(errors))
    return sum(worst) / len(worst)


def _settings(config: Config) -> list[tuple[int, int]]:
    """The (N, S) pairs of both sweeps, each once, in N order."""
    pairs = {(n, s) for n in config.workers for s in config.stragglers}
    pairs |= {(n, s) for n in config.stragglers_at for s in config.stragglers_sweep}
    return sorted(pairs)


def run(config: Config, *, progress: bool = True) -> ExperimentResult:
    """Both sweeps and the Bernoulli runs for every seed; ``extra`` holds the slopes and the brute-force check."""
    started = time.perf_counter()
    per_seed: dict[tuple, dict[int, float]] = {}  # (scheme, adversary, N, "S" | "p", value) -> seed -> value
    details: dict[tuple, dict[int, dict[str, float]]] = {}
    brute: list[dict[str, Any]] = []
    lambda_dec: dict[int, Any] = {}
    settings = _settings(config)
    sizes = sorted({n for n, _ in settings})
    steps = [(seed, scheme, n) for seed in config.seeds for scheme in config.schemes for n in sizes]
    for seed, scheme, n in tqdm(steps, desc="seed, scheme, N", disable=not progress, leave=False):
        f, inputs = workload(config, seed)
        code = make_code(config, scheme, n)
        if scheme == "gcc":
            lambda_dec[n] = code.lambda_dec
        results, reference = coded_results(f, code, inputs)
        for s in [s for size, s in settings if size == n and n - s >= code.min_arrived]:
            found = worst_stragglers(code.decoder, results, reference, s, exhaustive_limit=config.exhaustive_limit)
            key = (scheme, "oracle", n, "S", s)
            per_seed.setdefault(key, {})[seed] = float(found.errors.mean())
            details.setdefault(key, {})[seed] = {
                "block_mse": float(found.block_errors.mean()),
                "beyond_block": float(found.beyond_block.double().mean()),
                "exact": found.exact,
            }
            if s in config.stragglers:
                mask = FixedStragglers(s, "widest_gap").sample(len(results), n)
                widest = (code.decoder(results, mask) - reference).pow(2).flatten(1).mean(dim=1)
                per_seed.setdefault((scheme, "widest_gap", n, "S", s), {})[seed] = float(widest.mean())
            if seed == config.seeds[0] and n <= config.brute_force_up_to and s in config.stragglers:
                loop = brute_force_block_mse(code, results, reference, s)
                brute.append(
                    {
                        "scheme": scheme,
                        "N": n,
                        "S": s,
                        "seed": seed,
                        "brute_force_block_mse": loop,
                        "oracle_block_mse": float(found.block_errors.mean()),
                        "oracle_mse": float(found.errors.mean()),
                        "relative_difference": abs(float(found.block_errors.mean()) - loop) / loop,
                    }
                )
        if scheme == "gcc" and n in config.workers:
            for p in config.probabilities:
                stragglers = BernoulliStragglers(p, min_arrived=config.min_arrived, seed=1000 * seed + n)
                masks = stragglers.sample(len(results) * config.repeats, n)
                decoded = code.decoder(results.repeat(config.repeats, 1, 1), masks)
                errors = (decoded - reference.repeat(config.repeats, 1, 1)).pow(2).flatten(1).mean(dim=1)
                per_seed.setdefault((scheme, "bernoulli", n, "p", p), {})[seed] = float(errors.mean())

    records = []
    for key, values in per_seed.items():
        scheme, adversary, n, kind, value = key
        by_seed = [values[seed] for seed in config.seeds]
        mean, ci = seed_mean_ci(by_seed)
        record = {"scheme": scheme, "adversary": adversary, "N": n, "K": config.num_inputs, kind: value}
        record.update(mse=mean, mse_ci=ci, mse_by_seed=by_seed, seeds=len(by_seed))
        if key in details:
            for name in ("block_mse", "beyond_block"):
                record[name] = float(np.mean([details[key][seed][name] for seed in config.seeds]))
            record["exact"] = all(details[key][seed]["exact"] for seed in config.seeds)
        records.append(record)
    excess = [(r["mse"] - r["block_mse"]) / r["mse"] for r in records if r["adversary"] == "oracle"]
    load = os.getloadavg()
    written = {
        **asdict(config),
        "function": f"f(x) = tanh(x W1 + b1) W2, fixed random per seed, {config.dim} -> 16 -> 4, float64",
        "adversary": "oracle: torchgcc.oracles.worst_stragglers, per group (exhaustive up to exhaustive_limit sets)",
        "gcc_lambda_dec_by_N": lambda_dec,
        "wall_s": time.perf_counter() - started,
        "load_average": list(load),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "torchgcc": torchgcc.__version__,
    }
    extra = {
        "slopes": fit_slopes(per_seed, config),
        "brute_force": {
            "checks": brute,
            "largest_relative_difference": max((b["relative_difference"] for b in brute), default=math.nan),
            "largest_excess_of_oracle_over_worst_block": max(excess, default=math.nan),
        },
    }
    return ExperimentResult(records, written, extra)


def _bernoulli_bound(n: np.ndarray, p: float) -> np.ndarray:
    return (np.log(n) / np.log(1 / p)) ** 3 / n**3


def fit_slopes(per_seed: Mapping[tuple, Mapping[int, float]], config: Config) -> dict[str, dict[str, Any]]:
    """Log-log slopes per series and seed, their mean and 95% CI over seeds, and the bound's slope on the grid.

    Series: ``"<scheme> <adversary> S=<S> vs N"``, ``"<scheme> oracle N=<N> vs S"`` and ``"gcc bernoulli p=<p> vs
    N"``.
    """
    groups: dict[str, dict[str, Any]] = {}
    for (scheme, adversary, n, kind, value), values in per_seed.items():
        if kind == "S" and value in config.stragglers:
            groups.setdefault(f"{scheme} {adversary} S={value} vs N", {"x": "N", "bound": "S^3 N^-3", "points": {}})
            groups[f"{scheme} {adversary} S={value} vs N"]["points"][n] = values
        if kind == "S" and adversary == "oracle" and n in config.stragglers_at and value in config.stragglers_sweep:
            groups.setdefault(f"{scheme} oracle N={n} vs S", {"x": "S", "bound": "S^3 N^-3", "points": {}})
            groups[f"{scheme} oracle N={n} vs S"]["points"][value] = values
        if kind == "p":
            name = f"{scheme} bernoulli p={value:g} vs N"
            groups.setdefault(name, {"x": "N", "bound": "log_{1/p}(N)^3 N^-3", "p": value, "points": {}})
            groups[name]["points"][n] = values
    out = {}
    for name, group in groups.items():
        xs = sorted(group["points"])
        if len(xs) < 2:
            continue
        by_seed = [loglog_slope(xs, [group["points"][x].get(seed) for x in xs]) for seed in config.seeds]
        mean, ci = seed_mean_ci(by_seed)
        grid = np.array(xs, dtype=float)
        if "p" in group:
            bound = loglog_slope(grid, _bernoulli_bound(grid, group["p"]))
        else:
            bound = -3.0 if group["x"] == "N" else 3.0
        out[name] = {"slope": mean, "ci": ci, "by_seed": by_seed, "bound": group["bound"], "bound_slope": bound}
    return out


def report(result: ExperimentResult, out: Path, *, console: Any) -> list[Path]:
    """The table, slopes and brute-force check; results, table and ``rates.png`` in ``out``."""
    config, slopes = result.config, result.extra["slopes"]
    title = (
        f"Fig. 4 analogue under the oracle adversary: smooth f, K={config['num_inputs']}, "
        f"{len(config['seeds'])} seeds; GCC lambdas: {dict(config['gcc']) or 'library defaults'}"
    )
    paths = publish(
        out,
        config=config,
        records=result.records,
        setting="N",
        title=title,
        console=console,
        series=lambda r: f"{r['scheme']} {r['adversary']} " + (f"S={r['S']}" if "S" in r else f"p={r['p']:g}"),
        **result.extra,
    )
    plot = plot_rates(
        result.records,
        out / "rates.png",
        slopes=slopes,
        stragglers=config["stragglers"],
        stragglers_at=config["stragglers_at"],
        title=title,
    )
    for name, slope in slopes.items():
        console.print(
            f"{name}: slope {slope['slope']:.2f} ± {slope['ci']:.2f} "
            f"(bound {slope['bound']}: {slope['bound_slope']:.2f})"
        )
    check = result.extra["brute_force"]
    console.print(
        f"brute force over blocks vs the oracle's worst block: largest relative difference "
        f"{check['largest_relative_difference']:.2g}; the oracle's worst set exceeds the worst block by at most "
        f"{100 * check['largest_excess_of_oracle_over_worst_block']:.2f}%"
    )
    return [*paths.values(), plot]


def plot_rates(
    records: Sequence[dict],
    path: str | Path,
    *,
    slopes: Mapping[str, Any],
    stragglers: Sequence[int],
    stragglers_at: Sequence[int],
    title: str = "",
) -> Path:
    """Three log-log panels: (a) MSE vs N under the oracle for every S of ``stragglers`` (GCC solid, BACC dashed,
    the widest-gap rule grey) with ``S^3 N^-3``; (b) MSE vs S at every N of ``stragglers_at`` with ``S^3``; (c) GCC
    under Bernoulli(p) beside the oracle's worst case at the middle S, with ``log_{1/p}(N)^3 N^-3``."""
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(15, 4.4))

    def slope(name: str) -> float:
        return slopes.get(name, {}).get("slope", np.nan)

    for index, s in enumerate(stragglers):
        colour = f"C{index}"
        for scheme, fmt in (("gcc", "o-"), ("bacc", "s--")):
            xs, ys, ci = series(records, x="N", y="mse", scheme=scheme, adversary="oracle", S=s)
            label = f"{SCHEME_LABELS.get(scheme, scheme)} S={s} ({slope(f'{scheme} oracle S={s} vs N'):.2f})"
            log_errorbar(left, xs, ys, ci, fmt, colour, label)
        xs, ys, _ = series(records, x="N", y="mse", scheme="gcc", adversary="widest_gap", S=s)
        left.plot(xs, ys, "x:", color="0.6", label="GCC, widest-gap rule" if index == 0 else None)
        xs, ys, _ = series(records, x="N", y="mse", scheme="gcc", adversary="oracle", S=s)
        reference_curve(left, xs, lambda n, s=s: s**3 / n**3, ys[0], r"$S^3N^{-3}$" if index == 0 else None, colour)
    left.set(title="(a) oracle stragglers vs N", xlabel="workers N")

    for index, n in enumerate(stragglers_at):
        xs, ys, ci = series(records, x="S", y="mse", scheme="gcc", adversary="oracle", N=n)
        log_errorbar(middle, xs, ys, ci, "o-", f"C{index}", f"GCC N={n} ({slope(f'gcc oracle N={n} vs S'):.2f})")
        reference_curve(middle, xs, lambda s: s**3, ys[0], r"$S^3$" if index == 0 else None, f"C{index}")
    middle.set(title="(b) oracle stragglers vs S", xlabel="stragglers S")

    for index, p in enumerate(sorted({r["p"] for r in records if "p" in r})):
        xs, ys, ci = series(records, x="N", y="mse", scheme="gcc", adversary="bernoulli", p=p)
        log_errorbar(
            right, xs, ys, ci, "s-", f"C{index + 4}", f"p = {p:g} ({slope(f'gcc bernoulli p={p:g} vs N'):.2f})"
        )
        reference_curve(right, xs, lambda n, p=p: _bernoulli_bound(n, p), ys[0], None, f"C{index + 4}")
    middle_s = stragglers[len(stragglers) // 2]
    xs, ys, ci = series(records, x="N", y="mse", scheme="gcc", adversary="oracle", S=middle_s)
    log_errorbar(right, xs, ys, ci, "o-", "k", f"GCC, oracle S={middle_s}")
    right.set(title=r"(c) GCC, Bernoulli(p); dotted: $\log_{1/p}(N)^3N^{-3}$", xlabel="workers N")
    workers = sorted({r["N"] for r in records})
    for ax, ticks in ((left, workers), (middle, sorted({r["S"] for r in records if "S" in r})), (right, workers)):
        ax.set(xscale="log", yscale="log", ylabel="MSE")
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle(title, fontsize=9)
    return save_figure(fig, path)


def _cell(record: Mapping[str, Any] | None) -> str:
    return "-" if record is None else f"{record['mse']:.3g} ± {record['mse_ci']:.1g}"


def _series_table(data: Mapping[str, Any], setting: str, columns: Sequence[tuple[str, Any]]) -> str:
    """MSE ± 95% CI against ``setting`` (``"N"`` or ``"S"``), one column per ``(label, predicate of a record)``."""
    values = sorted({r[setting] for r in data["records"] if setting in r})
    rows = []
    for value in values:
        found = [next((r for r in data["records"] if r.get(setting) == value and keep(r)), None) for _, keep in columns]
        if any(found):
            rows.append([str(value)] + [_cell(record) for record in found])
    return markdown_grid([setting] + [label for label, _ in columns], rows, left=0)


def _against_n_table(data: Mapping[str, Any], *, stragglers: int) -> str:
    """Worst-case MSE against N at ``stragglers`` stragglers: every scheme under the oracle and the widest gap."""
    columns = [
        (
            f"{scheme} {adversary.replace('_', ' ')}",
            lambda r, scheme=scheme, adversary=adversary: (
                (r["scheme"], r["adversary"], r.get("S")) == (scheme, adversary, stragglers)
            ),
        )
        for scheme in data["config"]["schemes"]
        for adversary in ("oracle", "widest_gap")
    ]
    return _series_table(data, "N", columns)


def _against_s_table(data: Mapping[str, Any]) -> str:
    """Worst-case MSE under the oracle against S, one column per (scheme, N of ``stragglers_at``)."""
    columns = [
        (
            f"{scheme} N={n}",
            lambda r, scheme=scheme, n=n: (r["scheme"], r["adversary"], r["N"]) == (scheme, "oracle", n),
        )
        for n in data["config"]["stragglers_at"]
        for scheme in data["config"]["schemes"]
    ]
    return _series_table(data, "S", columns)


def _bernoulli_table(data: Mapping[str, Any]) -> str:
    """GCC's MSE under Bernoulli stragglers against N, one column per p."""
    columns = [
        (f"gcc Bernoulli p={p:g}", lambda r, p=p: r["adversary"] == "bernoulli" and r["p"] == p)
        for p in data["config"]["probabilities"]
    ]
    return _series_table(data, "N", columns)


def _slopes_table(data: Mapping[str, Any]) -> str:
    """Every fitted slope (mean ± 95% CI over seeds) beside the bound's slope on the same grid."""
    rows = [
        [name, f"{s['slope']:.2f} ± {s['ci']:.2f}", f"{s['bound_slope']:.2f} ({s['bound']})"]
        for name, s in data["slopes"].items()
    ]
    return markdown_grid(["series", "slope ± 95% CI over seeds", "the bound's slope on the same grid"], rows)


def _by_s_table(data: Mapping[str, Any]) -> str:
    """Per S, GCC's and BACC's slopes in N under the oracle adversary (mean ± 95% CI over seeds) beside the bound's."""
    rows = []
    for s in data["config"]["stragglers"]:
        gcc, bacc = (data["slopes"][f"{scheme} oracle S={s} vs N"] for scheme in ("gcc", "bacc"))
        rows.append(
            [
                str(s),
                f"{gcc['slope']:.2f} ± {gcc['ci']:.2f}",
                f"{bacc['slope']:.2f} ± {bacc['ci']:.2f}",
                f"{gcc['bound_slope']:.0f}",
            ]
        )
    return markdown_grid(["S", "GCC slope in N", "BACC slope in N", "bound (S^3 N^-3)"], rows, left=0)


def bacc_wins(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every (N, S) of either sweep where BACC's worst case under the oracle is below GCC's (mean over seeds), with
    both means and CIs and whether the CIs overlap, in (N, S) order."""
    oracle = {(r["scheme"], r["N"], r["S"]): r for r in data["records"] if r["adversary"] == "oracle"}
    wins = []
    for (scheme, n, s), bacc in sorted(oracle.items(), key=lambda item: item[0][1:]):
        gcc = oracle.get(("gcc", n, s))
        if scheme == "bacc" and gcc is not None and bacc["mse"] < gcc["mse"]:
            overlap = bacc["mse"] + bacc["mse_ci"] >= gcc["mse"] - gcc["mse_ci"]
            wins.append({"N": n, "S": s, "bacc": bacc, "gcc": gcc, "overlap": overlap})
    return wins


def _bacc_wins_table(data: Mapping[str, Any]) -> str:
    """The settings of :func:`bacc_wins`: BACC's and GCC's worst-case MSE ± 95% CI and whether the CIs overlap."""
    rows = [
        [str(w["N"]), str(w["S"]), _cell(w["bacc"]), _cell(w["gcc"]), "yes" if w["overlap"] else "no"]
        for w in bacc_wins(data)
    ]
    return markdown_grid(["N", "S", "BACC oracle", "GCC oracle", "CIs overlap"], rows, left=0)


#: The tables :func:`docs_table` makes, by name.
DOCS_TABLES: dict[str, Any] = {
    "against_N": _against_n_table,
    "against_S": _against_s_table,
    "bernoulli": _bernoulli_table,
    "slopes": _slopes_table,
    "by_S": _by_s_table,
    "bacc_wins": _bacc_wins_table,
}


def docs_table(data: Mapping[str, Any], *, table: str = "slopes", **options: Any) -> str:
    """One whole table of a committed ``rates.json`` (for :mod:`torchgcc.app.docs`): ``table`` is a key of
    :data:`DOCS_TABLES` (``"against_N"`` takes ``stragglers=S``)."""
    if table not in DOCS_TABLES:
        raise ValueError(f"table: {table!r} is not one of {sorted(DOCS_TABLES)}")
    return DOCS_TABLES[table](data, **options)
