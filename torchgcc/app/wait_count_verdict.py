"""The acceptance verdict of an adaptive wait count against fixed S (``reproduce adaptive-wait``, ``bench-latency``)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

__all__ = ["compare_with_fixed"]


def compare_with_fixed(
    fixed: Sequence[Mapping[str, Any]], adaptive: Mapping[str, Any], deadline: float
) -> dict[str, Any]:
    """The acceptance comparison of an adaptive wait count with fixed S rows (each ``{"S", "p99", "agreement"}``).

    The reference is the most accurate fixed S whose p99 latency meets ``deadline`` (ties: the smaller S); the
    adaptive row passes when its p99 is no worse and its agreement no lower than the reference's.
    """
    meeting = [r for r in fixed if r["p99"] <= deadline]
    if not meeting:
        return {"reference_S": None, "note": "no fixed S meets the deadline at p99"}
    best = max(meeting, key=lambda r: (r["agreement"], -r["S"]))
    return {
        "reference_S": best["S"],
        "reference_p99": best["p99"],
        "reference_agreement": best["agreement"],
        "adaptive_p99": adaptive["p99"],
        "adaptive_agreement": adaptive["agreement"],
        "adaptive_p99_no_worse": adaptive["p99"] <= best["p99"],
        "adaptive_agreement_no_worse": adaptive["agreement"] >= best["agreement"],
        "adaptive_meets_deadline": adaptive["p99"] <= deadline,
    }
