"""``torchgcc reproduce manifold``: manifold-aware GCC (our reconstruction of arXiv 2609.00552), an ablation.

Every workload codes its evaluation inputs K = 8 at a time on N = 32 workers with random stragglers. The rows other
than ``regroup`` code the SAME groups (the caller's: consecutive inputs) and change one component of the encoder at
a time (:class:`torchgcc.manifold.RouteEncoder`):

- ``standard``: GCC, the inputs in the caller's order at the code's Chebyshev points;
- ``pc1``: the group sorted by its first principal component, the code's points;
- ``route``: the shortest straight-line route through the group, the code's points;
- ``geodesic``: the shortest route by the reference set's kNN-graph geodesics, the code's points;
- ``route_centripetal``: the straight-line route, regression points from the distances along it (centripetal);
- ``geodesic_centripetal``: the geodesic route, regression points from the geodesic distances (centripetal);
- ``full``: the geodesic route and points, the curve pulled onto the graph's shortest paths;
- ``regroup``: DIFFERENT groups, chosen along the data (:class:`torchgcc.manifold.ManifoldGrouping`), standard
  GCC (a separate feature, for comparison).

Every row of a (workload, S, seed) decodes the same masks with GCC's decoder; ``group_hash`` (per seed) fingerprints
which inputs were coded together, so the same-groups claim is checkable (``same_groups_as_standard``). For the coded
samples ``distance_to_data`` is their mean distance to the nearest data point (reference set and evaluation inputs),
``distance_to_data_quantiles`` its median, 90th percentile and maximum over the coded samples, and
``distance_to_group`` the mean distance to the nearest input of their own group, all over the data's mean
nearest-neighbour spacing; the synthetic workloads add ``distance_to_manifold`` (to a dense sample of the manifold,
same scale).

Workloads: ``swissroll`` (a Swiss roll in R^3 embedded in R^50), ``scurve`` (an S-curve in R^3 embedded in R^50),
``circle`` (a circle with Gaussian noise of 0.05 of its radius, in R^2 embedded in R^20), ``polynomial`` (a 2-torus
embedded in R^100 by a random linear map: the seed's high-dimensional polynomial evaluation) - each computing a cubic
polynomial of its inputs - and ``lenet5`` and ``vit`` (digits; reference: training inputs; MSE against the uncoded
logits and RelAcc). Every record is a mean over ``seeds`` with a Student-t 95% CI; ``ratio`` is the mean over seeds
of the row's MSE over ``standard``'s (with its CI).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import torch

import torchgcc
from torchgcc.app.evaluate import evaluate_coded, model_outputs
from torchgcc.app.plots import plt, save_figure
from torchgcc.app.results import ExperimentResult
from torchgcc.app.statistics import seed_mean_ci
from torchgcc.app.tables import markdown_grid, publish
from torchgcc.coded_module import group_samples
from torchgcc.manifold import ReferenceGraph, RouteGCC, manifold_order
from torchgcc.stragglers import FixedStragglers

__all__ = [
    "DEFAULT",
    "QUICK",
    "ROWS",
    "Config",
    "Workload",
    "CIRCLE_NOISE",
    "CONTRASTS",
    "add_arguments",
    "component_effects",
    "configure",
    "cubic_polynomial",
    "docs_table",
    "group_hash",
    "make_workload",
    "report",
    "run",
]

#: The ablation's rows, in table order, and the :class:`~torchgcc.manifold.RouteGCC` options of each encoder row.
ENCODERS = {
    "pc1": {"order": "pc1", "points": "code", "follow_paths": False},
    "route": {"order": "route", "points": "code", "follow_paths": False},
    "geodesic": {"order": "geodesic", "points": "code", "follow_paths": False},
    "route_centripetal": {"order": "route", "points": "centripetal", "follow_paths": False},
    "geodesic_centripetal": {"order": "geodesic", "points": "centripetal", "follow_paths": False},
    "full": {"order": "geodesic", "points": "centripetal", "follow_paths": True},
}
ROWS = ("standard", *ENCODERS, "regroup")


@dataclass(frozen=True)
class Config:
    workloads: tuple[str, ...] = ("swissroll", "scurve", "circle", "polynomial", "lenet5", "vit")
    num_inputs: int = 8
    num_workers: int = 32
    stragglers: tuple[int, ...] = (0, 4, 8)
    repeats: int = 5
    samples: int = 256  # evaluation inputs of the synthetic workloads
    reference_samples: int = 1000
    dense_samples: int = 20000  # the manifold sample that measures distance_to_manifold
    neighbours: int = 10
    seeds: tuple[int, ...] = (0, 1, 2)


#: The published run: six workloads, S in {0, 4, 8}, 3 seeds.
DEFAULT = Config()
#: ``--quick``: the same workloads, S in {0, 8}, 2 seeds, smaller sets.
QUICK = Config(
    stragglers=(0, 8),
    repeats=2,
    samples=128,
    reference_samples=400,
    dense_samples=5000,
    seeds=(0, 1),
)


@dataclass
class Workload:
    """Inputs ``(M, *in)``, the computation ``f``, the reference set ``(R, *in)``, an optional dense sample of the
    manifold ``(P, *in)`` and whether ``f`` is a classifier."""

    f: Callable[[torch.Tensor], torch.Tensor]
    inputs: torch.Tensor
    reference: torch.Tensor
    dense: Optional[torch.Tensor]
    classification: bool
    facts: dict[str, Any]


def cubic_polynomial(w: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """``f(x) = (z_1^3 + z_2^2 z_3, z_2^3 + z_3^2 z_1, z_3^3 + z_1^2 z_2)`` with ``z = x w`` (``w`` ``(dim, 3)``)."""

    def f(x: torch.Tensor) -> torch.Tensor:
        z = x @ w
        return torch.stack(
            [
                z[:, 0] ** 3 + z[:, 1] ** 2 * z[:, 2],
                z[:, 1] ** 3 + z[:, 2] ** 2 * z[:, 0],
                z[:, 2] ** 3 + z[:, 0] ** 2 * z[:, 1],
            ],
            dim=1,
        )

    return f


def _swiss_roll(n: int, generator: torch.Generator, basis: torch.Tensor) -> torch.Tensor:
    t = 1.5 * math.pi * (1 + 2 * torch.rand(n, generator=generator, dtype=torch.float64))
    height = 10 * torch.rand(n, generator=generator, dtype=torch.float64)
    return torch.stack([t * torch.cos(t), height, t * torch.sin(t)], dim=1) / 10 @ basis.T


def _torus(n: int, generator: torch.Generator, embedding: torch.Tensor) -> torch.Tensor:
    theta, phi = 2 * math.pi * torch.rand(2, n, generator=generator, dtype=torch.float64)
    features = torch.stack([theta.cos(), theta.sin(), phi.cos(), phi.sin(), (theta + phi).cos(), (theta + phi).sin()])
    return features.T @ embedding.T


def _s_curve(n: int, generator: torch.Generator, basis: torch.Tensor) -> torch.Tensor:
    t = 3 * math.pi * (torch.rand(n, generator=generator, dtype=torch.float64) - 0.5)
    height = 2 * torch.rand(n, generator=generator, dtype=torch.float64)
    return torch.stack([t.sin(), height, t.sign() * (t.cos() - 1)], dim=1) @ basis.T


#: The noisy circle's Gaussian noise, in units of its radius.
CIRCLE_NOISE = 0.05


def _noisy_circle(n: int, generator: torch.Generator, basis: torch.Tensor) -> torch.Tensor:
    theta = 2 * math.pi * torch.rand(n, generator=generator, dtype=torch.float64)
    plane = torch.stack([theta.cos(), theta.sin()], dim=1)
    return (plane + CIRCLE_NOISE * torch.randn(n, 2, generator=generator, dtype=torch.float64)) @ basis.T


#: The synthetic workloads: ``(ambient dimension, intrinsic dimension of the embedded data, sampler)``.
SYNTHETIC = {"swissroll": (50, 3, _swiss_roll), "scurve": (50, 3, _s_curve), "circle": (20, 2, _noisy_circle)}


def make_workload(name: str, config: Config, seed: int, *, progress: bool = False) -> Workload:
    """The workload ``name`` of ``seed``: synthetic ones drawn from ``seed``, the classifiers trained under it."""
    generator = torch.Generator().manual_seed(seed)
    if name in (*SYNTHETIC, "polynomial"):
        if name in SYNTHETIC:
            dim, intrinsic, sampler = SYNTHETIC[name]
            basis, _ = torch.linalg.qr(torch.randn(dim, intrinsic, generator=generator, dtype=torch.float64))
            draw = lambda n: sampler(n, generator, basis)  # noqa: E731
        else:
            dim = 100
            embedding = torch.randn(dim, 6, generator=generator, dtype=torch.float64) / 6**0.5
            draw = lambda n: _torus(n, generator, embedding)  # noqa: E731
        f = cubic_polynomial(torch.randn(dim, 3, generator=generator, dtype=torch.float64) / dim**0.25)
        inputs, reference, dense = draw(config.samples), draw(config.reference_samples), draw(config.dense_samples)
        return Workload(f, inputs, reference, dense, False, {"dim": dim})
    from torchgcc.app.data import load_dataset
    from torchgcc.app.model_cache import load_or_train

    split = load_dataset("digits", seed=seed)
    trained = load_or_train(name, split, seed=seed, progress=progress)
    facts = {"test_accuracy": trained.test_accuracy}
    return Workload(trained.model, split.test_x, split.train_x[: config.reference_samples], None, True, facts)


def group_hash(members: torch.Tensor) -> str:
    """A fingerprint of which inputs are coded together: ``members`` ``(B, K)`` input indices, order within a group
    and of the groups ignored."""
    groups = sorted(tuple(sorted(row)) for row in members.tolist())
    return hashlib.sha1(repr(groups).encode()).hexdigest()[:16]


def _distances(coded: torch.Tensor, groups: torch.Tensor, data: torch.Tensor, dense: Optional[torch.Tensor]):
    """Distances of the coded samples ``(B, N, *in)`` to the data (mean; median, 90th percentile and maximum), to
    their group's inputs and to the manifold (means), over the data's mean nearest-neighbour spacing."""
    flat = coded.flatten(2).to(torch.float64)
    data = data.flatten(1).to(torch.float64)
    spacing = torch.cdist(data, data).topk(2, largest=False).values[:, 1].mean()
    to_data = torch.cdist(flat.flatten(0, 1), data).min(dim=1).values / spacing
    out = {
        "distance_to_data": float(to_data.mean()),
        "distance_to_data_quantiles": to_data.quantile(torch.tensor([0.5, 0.9, 1.0], dtype=torch.float64)).tolist(),
        "distance_to_group": float(torch.cdist(flat, groups.flatten(2).to(flat)).min(dim=2).values.mean() / spacing),
        "spacing": float(spacing),
    }
    if dense is not None:
        out["distance_to_manifold"] = float(torch.cdist(flat.flatten(0, 1), dense).min(dim=1).values.mean() / spacing)
    return out


def _evaluate(config: Config, name: str, seed: int, progress: bool) -> list[dict[str, Any]]:
    """Every row and S of one workload and seed."""
    k, n = config.num_inputs, config.num_workers
    work = make_workload(name, config, seed, progress=progress)
    x, truth = work.inputs, model_outputs(work.f, work.inputs)
    graph = ReferenceGraph(work.reference.flatten(1).to(torch.float64), neighbours=config.neighbours)
    standard = torchgcc.make_code("gcc", num_inputs=k, num_workers=n)
    caller = torch.arange(len(x))
    rows = {"standard": (standard, caller)}
    rows |= {row: (RouteGCC(k, n, reference=graph, **options), caller) for row, options in ENCODERS.items()}
    rows["regroup"] = (torchgcc.make_code("gcc", num_inputs=k, num_workers=n), manifold_order(x.flatten(1)))
    data = torch.cat([work.reference.flatten(1), x.flatten(1)]).to(torch.float64)
    groups_count = math.ceil(len(x) / k)
    records = []
    for row, (code, order) in rows.items():
        members = group_samples(order, k)  # (B, K) input indices coded together
        inputs = x[order]
        with torch.no_grad():
            coded = code.encoder(group_samples(inputs, k))
        geometry = _distances(coded, group_samples(inputs, k), data, work.dense)
        paths = getattr(code.encoder, "last_path_points", None)
        for s in config.stragglers:
            masks = FixedStragglers(s, seed=1000 * seed + s).sample(groups_count * config.repeats, n)
            stats = evaluate_coded(
                work.f,
                code,
                inputs,
                masks.view(config.repeats, groups_count, n),
                reference=truth[order],
                classification=work.classification,
            )
            records.append(
                {
                    "workload": name,
                    "scheme": row,
                    "seed": seed,
                    "S": s,
                    "N": n,
                    "K": k,
                    "mse": stats["mse"],
                    "agreement": stats.get("agreement"),
                    "group_hash": group_hash(members),
                    "path_points": None if paths is None else float(paths.double().mean()),
                    **geometry,
                    **{f"{name}_{key}": value for key, value in work.facts.items()},
                }
            )
    return records


def run(config: Config, *, progress: bool = True) -> ExperimentResult:
    """Every workload, seed, row and S; one record per (workload, row, S) over the seeds."""
    from tqdm.auto import tqdm

    started = time.perf_counter()
    steps = [(name, seed) for name in config.workloads for seed in config.seeds]
    per_seed = []
    for name, seed in tqdm(steps, desc="workload, seed", disable=not progress, leave=False):
        per_seed += _evaluate(config, name, seed, progress)
    records = []
    for name in config.workloads:
        for row in ROWS:
            for s in config.stragglers:
                runs = [r for r in per_seed if (r["workload"], r["scheme"], r["S"]) == (name, row, s)]
                base = {
                    r["seed"]: r["mse"]
                    for r in per_seed
                    if (r["workload"], r["scheme"], r["S"]) == (name, "standard", s)
                }
                record = {"workload": name, "scheme": row, "S": s, "N": config.num_workers, "K": config.num_inputs}
                record["mse"], record["mse_ci"] = seed_mean_ci([r["mse"] for r in runs])
                record["ratio"], record["ratio_ci"] = seed_mean_ci([r["mse"] / base[r["seed"]] for r in runs])
                if runs[0]["agreement"] is not None:
                    record["agreement"], record["agreement_ci"] = seed_mean_ci([r["agreement"] for r in runs])
                for key in ("distance_to_data", "distance_to_group", "distance_to_manifold", "path_points"):
                    if runs[0].get(key) is not None:
                        record[key] = sum(r[key] for r in runs) / len(runs)
                record["distance_to_data_ci"] = seed_mean_ci([r["distance_to_data"] for r in runs])[1]
                record["distance_to_data_quantiles"] = [
                    sum(r["distance_to_data_quantiles"][i] for r in runs) / len(runs) for i in range(3)
                ]
                record["group_hash"] = [r["group_hash"] for r in runs]
                record["same_groups_as_standard"] = record["group_hash"] == [
                    r["group_hash"] for r in per_seed if (r["workload"], r["scheme"], r["S"]) == (name, "standard", s)
                ]
                record["seeds"] = [r["seed"] for r in runs]
                records.append(record)
    written = {
        **asdict(config),
        "wall_s": time.perf_counter() - started,
        "load_average": list(os.getloadavg()),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "torchgcc": torchgcc.__version__,
    }
    return ExperimentResult(records, written, {"per_seed": per_seed})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options beyond the run options."""


def configure(args: argparse.Namespace) -> Config:
    """``--seed s`` runs the seeds ``s, s + 1, ...`` (as many as the configuration has)."""
    base = QUICK if args.quick else DEFAULT
    return replace(base, seeds=tuple(args.seed + i for i in range(len(base.seeds))))


def report(result: ExperimentResult, out: Path, *, console: Any) -> list[Path]:
    """The ablation table and the ratios; results, table and ``manifold.png`` in ``out``."""
    config = result.config
    title = (
        f"Manifold-aware GCC (our reconstruction): ablation, K={config['num_inputs']}, N={config['num_workers']}, "
        f"random stragglers, {len(config['seeds'])} seeds"
    )
    paths = publish(
        out,
        config=config,
        records=result.records,
        setting="S",
        title=title,
        console=console,
        series=lambda r: f"{r['workload']} {r['scheme']}",
        **result.extra,
    )
    for r in result.records:
        if r["scheme"] != "standard":
            console.print(
                f"{r['workload']} S={r['S']} {r['scheme']}: MSE ratio {r['ratio']:.3f} ± {r['ratio_ci']:.3f}, "
                f"distance to data {r['distance_to_data']:.2f} spacings, same groups: {r['same_groups_as_standard']}"
            )
    return [*paths.values(), plot_manifold(result.records, out / "manifold.png", title=title)]


def plot_manifold(records: list[dict[str, Any]], path: Path, *, title: str) -> Path:
    """Per workload: each row's MSE ratio to standard GCC against S (with CIs), and beside it each row's distance
    of the coded samples to the data."""
    workloads = list(dict.fromkeys(r["workload"] for r in records))
    fig, axes = plt.subplots(2, len(workloads), figsize=(3.6 * len(workloads), 6.2), squeeze=False)
    for col, name in enumerate(workloads):
        for index, row in enumerate(ROWS):
            rows = sorted((r for r in records if r["workload"] == name and r["scheme"] == row), key=lambda r: r["S"])
            s = [r["S"] for r in rows]
            ci = [0.0 if r["ratio_ci"] is None or math.isnan(r["ratio_ci"]) else r["ratio_ci"] for r in rows]
            axes[0][col].errorbar(s, [r["ratio"] for r in rows], yerr=ci, fmt="o-", color=f"C{index}", label=row)
            axes[1][col].bar(index, rows[0]["distance_to_data"], color=f"C{index}")
        axes[0][col].set(yscale="log", title=name, xlabel="stragglers S")
        axes[1][col].set_xticks(range(len(ROWS)), ROWS, rotation=30, fontsize=7)
        axes[0][col].grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("MSE / standard GCC's")
    axes[1][0].set_ylabel("coded samples' distance to data\n(data spacings)")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    return save_figure(fig, path)


#: What each component of the encoder changes: ``name -> (row with it, the same row without it)``.
CONTRASTS = {
    "route (vs the caller's order)": ("route", "standard"),
    "PC1 sort (vs the caller's order)": ("pc1", "standard"),
    "geodesic route (vs straight-line)": ("geodesic", "route"),
    "centripetal points (straight-line route)": ("route_centripetal", "route"),
    "geodesic distances (route and points)": ("geodesic_centripetal", "route_centripetal"),
    "graph pull (geodesic, centripetal)": ("full", "geodesic_centripetal"),
    "the whole graph (full vs route_centripetal)": ("full", "route_centripetal"),
}


def component_effects(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per contrast of :data:`CONTRASTS`, workload and S: the MSE of the row with the component over the row without
    it, per seed (the same groups and masks), its mean and 95% CI over seeds, from ``per_seed`` of a results.json."""
    mse = {(r["workload"], r["scheme"], r["S"], r["seed"]): r["mse"] for r in data["per_seed"]}
    seeds = sorted({key[3] for key in mse})
    effects = []
    for name, (row, without) in CONTRASTS.items():
        for workload in dict.fromkeys(key[0] for key in mse):
            for s in sorted({key[2] for key in mse}):
                ratios = [mse[workload, row, s, seed] / mse[workload, without, s, seed] for seed in seeds]
                mean, ci = seed_mean_ci(ratios)
                effects.append({"component": name, "workload": workload, "S": s, "ratio": mean, "ci": ci})
    return effects


def _components_table(data: Mapping[str, Any]) -> str:
    """Per contrast (rows) and workload (columns): the MSE ratio with / without the component at each S, mean ± 95%
    CI over seeds; a ratio whose CI lies wholly below 1 is marked "better", wholly above 1 "worse"."""
    effects = component_effects(data)
    workloads = list(dict.fromkeys(e["workload"] for e in effects))
    rows = []
    for name in CONTRASTS:
        cells = [name]
        for workload in workloads:
            parts = []
            for e in (e for e in effects if (e["component"], e["workload"]) == (name, workload)):
                mark = " better" if e["ratio"] + e["ci"] < 1 else " worse" if e["ratio"] - e["ci"] > 1 else ""
                parts.append(f"S={e['S']}: {e['ratio']:.2f} ± {e['ci']:.2g}{mark}")
            cells.append("; ".join(parts))
        rows.append(cells)
    return markdown_grid(["component (with / without)"] + workloads, rows, left=len(workloads) + 1)


def docs_table(data: Mapping[str, Any], *, workload: Optional[str] = None, table: str = "ablation") -> str:
    """``table="components"``: :func:`_components_table`. Otherwise the ablation of ``workload`` from a committed
    ``manifold.json`` (for :mod:`torchgcc.app.docs`): per row,
    whether it coded the same groups as standard GCC, per S the MSE ± 95% CI over seeds, the ratio to standard's ± its
    CI and (classifiers) RelAcc %, then the coded samples' distances to the data (mean; median / 90th percentile /
    maximum), to their own group's inputs and (synthetic workloads) to the manifold, in nearest-neighbour spacings."""
    if table == "components":
        return _components_table(data)
    if table != "ablation" or workload is None:
        raise ValueError(f"table must be 'ablation' (with a workload) or 'components', got {table!r}")
    records = [r for r in data["records"] if r["workload"] == workload]
    stragglers = sorted({r["S"] for r in records})
    by = {(r["scheme"], r["S"]): r for r in records}
    relacc = records[0].get("agreement") is not None
    manifold = records[0].get("distance_to_manifold") is not None
    per_s = "MSE / ratio / RelAcc" if relacc else "MSE / ratio"
    header = ["row", "same groups"] + [f"S={s}: {per_s}" for s in stragglers]
    header += ["distance to data", "median / p90 / max", "to own group"] + (["to the manifold"] if manifold else [])
    rows = []
    for row in dict.fromkeys(r["scheme"] for r in records):
        first = by[row, stragglers[0]]
        cells = [row, "yes" if first["same_groups_as_standard"] else "no"]
        for s in stragglers:
            r = by[row, s]
            cell = f"{r['mse']:.3g} ± {r['mse_ci']:.1g} / {r['ratio']:.3f} ± {r['ratio_ci']:.2g}"
            cells.append(cell + (f" / {100 * r['agreement']:.1f}" if relacc else ""))
        # The coded samples do not depend on S: their distances are the same in every S's record.
        cells.append(f"{first['distance_to_data']:.2f}")
        cells.append(" / ".join(f"{q:.2f}" for q in first["distance_to_data_quantiles"]))
        cells += [
            f"{first[key]:.2f}" for key in ("distance_to_group",) + (("distance_to_manifold",) if manifold else ())
        ]
        rows.append(cells)
    return markdown_grid(header, rows, left=2)
