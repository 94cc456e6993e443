"""The docs tables of the rates, adversarial, manifold and training studies are whole: every record of the committed
JSON appears in its row and column, with its own value (the reference is the JSON itself, read independently)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torchgcc.app.experiments import adversarial_study, manifold_study, rates_study, training_study

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"


def load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def parse(table: str) -> list[dict[str, str]]:
    """A Markdown table as one dict per row, header -> cell."""
    lines = [line.strip().strip("|") for line in table.strip().splitlines()]
    header = [cell.strip() for cell in lines[0].split("|")]
    assert set(lines[1].replace("|", "").replace("-", "").replace(":", "")) == set(), lines[1]
    rows = [[cell.strip() for cell in line.split("|")] for line in lines[2:]]
    assert all(len(row) == len(header) for row in rows)
    return [dict(zip(header, row)) for row in rows]


@pytest.mark.parametrize("workload", ["xsinx", "lenet5"])
def test_adversarial_worst_case_table_has_every_record(workload):
    data = load("adversarial.json")
    rows = parse(adversarial_study.docs_table(data, table="worst_case", workload=workload))
    records = [r for r in data["records"] if r["workload"] == workload]
    assert len(rows) == len({(r["a"], r["N"]) for r in records})
    for r in records:
        (row,) = [row for row in rows if float(row["a"]) == r["a"] and int(row["N"]) == r["N"]]
        assert row[r["scheme"]].startswith(f"{r['mse']:.3g} ({r['worst_family']}")


def test_adversarial_slopes_and_lenet5_case_tables_have_every_entry():
    data = load("adversarial.json")
    rows = parse(adversarial_study.docs_table(data, table="slopes"))
    cells = {
        (row["workload"], float(row["a"]), scheme): row[scheme] for row in rows for scheme in data["config"]["schemes"]
    }
    assert len(cells) == len(data["slopes"])
    for key, slope in data["slopes"].items():
        workload, a, scheme = key.split()
        assert cells[workload, float(a[2:]), scheme] == f"{slope['slope']:.2f} ({slope['q_over_n']:.2f})"
    case = parse(adversarial_study.docs_table(data, table="lenet5_case"))
    records = [r for r in data["records"] if r["workload"] == "lenet5_case"]
    assert [row["decoder"] for row in case] == [r["scheme"] for r in records]
    assert [row["worst-case MSE"] for row in case] == [f"{r['mse']:.3g}" for r in records]


def test_rates_tables_have_every_record():
    data = load("rates.json")
    seen = 0
    for s in data["config"]["stragglers"]:
        rows = {int(row["N"]): row for row in parse(rates_study.docs_table(data, table="against_N", stragglers=s))}
        for r in data["records"]:
            if r.get("S") == s and r["adversary"] in ("oracle", "widest_gap"):
                cell = rows[r["N"]][f"{r['scheme']} {r['adversary'].replace('_', ' ')}"]
                assert cell == f"{r['mse']:.3g} ± {r['mse_ci']:.1g}"
                seen += 1
    bernoulli = {int(row["N"]): row for row in parse(rates_study.docs_table(data, table="bernoulli"))}
    for r in data["records"]:
        if r["adversary"] == "bernoulli":
            assert bernoulli[r["N"]][f"gcc Bernoulli p={r['p']:g}"] == f"{r['mse']:.3g} ± {r['mse_ci']:.1g}"
            seen += 1
    by_s = {int(row["S"]): row for row in parse(rates_study.docs_table(data, table="against_S"))}
    for r in data["records"]:
        if r["adversary"] == "oracle" and r["N"] in data["config"]["stragglers_at"]:
            assert by_s[r["S"]][f"{r['scheme']} N={r['N']}"] == f"{r['mse']:.3g} ± {r['mse_ci']:.1g}"
    # every record is in a table (the against-S table repeats some of the against-N records)
    assert seen == len(data["records"]) - sum(
        r["adversary"] == "oracle" and r["S"] not in data["config"]["stragglers"] for r in data["records"]
    )
    assert len(parse(rates_study.docs_table(data, table="slopes"))) == len(data["slopes"])


@pytest.mark.parametrize("workload", ["swissroll", "scurve", "circle", "polynomial", "lenet5", "vit"])
def test_manifold_table_has_every_record(workload):
    data = load("manifold.json")
    rows = {row["row"]: row for row in parse(manifold_study.docs_table(data, workload=workload))}
    records = [r for r in data["records"] if r["workload"] == workload]
    assert len(rows) == len({r["scheme"] for r in records})
    for r in records:
        row = rows[r["scheme"]]
        assert row["same groups"] == ("yes" if r["same_groups_as_standard"] else "no")
        (cell,) = [value for key, value in row.items() if key.startswith(f"S={r['S']}:")]
        assert cell.startswith(f"{r['mse']:.3g} ± {r['mse_ci']:.1g} / {r['ratio']:.3f} ± {r['ratio_ci']:.2g}")
        assert row["distance to data"] == f"{r['distance_to_data']:.2f}"
        assert row["median / p90 / max"] == " / ".join(f"{q:.2f}" for q in r["distance_to_data_quantiles"])


def test_manifold_components_table_has_every_effect():
    data = load("manifold.json")
    table = parse(manifold_study.docs_table(data, table="components"))
    rows = {row["component (with / without)"]: row for row in table}
    effects = manifold_study.component_effects(data)
    assert len(rows) == len(manifold_study.CONTRASTS)
    for e in effects:
        assert f"S={e['S']}: {e['ratio']:.2f} ± {e['ci']:.2g}" in rows[e["component"]][e["workload"]]


@pytest.mark.parametrize("model", ["lenet5", "mlp"])
def test_training_verdicts_table_has_every_verdict(model):
    data = load(f"training-{model}.json")
    rows = parse(training_study.docs_table(data, model=model))
    labels = training_study.LABELS
    verdicts = [v for v in data["verdicts"] if v["model"] == model]
    assert sum(len(row) - 3 for row in rows) == len(verdicts)
    for v in verdicts:
        (row,) = [row for row in rows if (float(row["m"]), row["clock"], int(row["s"])) == (v["m"], v["clock"], v["s"])]
        assert row[f"{labels[v['pgc']]} vs {labels[v['rival']]}"].endswith(v["outcome"])
