"""A seeded property fuzzer of torchgcc's public API: the code registry, every code's encoder, decoder and
``decode_matrix``, and :class:`torchgcc.CodedModule`.

Each call is drawn at random, valid or not: K, N, rules and options of every registered code, masks (bool, int, lists,
wrong shapes, all False, fewer results than ``min_arrived``), dtypes (float32/64, bfloat16, int), shapes
``(B, K, *feat)`` with ``feat`` ``()``, ``(d,)`` or ``(c, h, w)``, empty batches, NaN/Inf values, scales from 1e-300 to
1e300 (float64; 1e-30 to 1e30 otherwise), cpu and meta tensors, ``check=True/False``, ``chunk_size`` values and
models returning tensors, containers, scalars, ``()``, ints or None. Every call is written as a Python snippet and
run from it (``exec``), so the snippet kept in the results reproduces the call exactly.

Each outcome is one of:

- ``ok``: a valid call whose result passed every oracle below, or an invalid one rejected with a clear error;
- ``clear_error``: a ``ValueError``/``TypeError`` raised from torchgcc's own code, one line (``named``: whether it
  names the argument the fuzzer broke; ``on_valid``: whether the fuzzer thought the call valid);
- ``silent_wrong``: a result that fails an oracle, or an invalid call accepted without an error;
- ``raw_error``: any other exception (a torch ``RuntimeError``/``IndexError`` from inside, a multi-line message, an
  error raised outside torchgcc).

(An invalid call that ends in a clear error counts as ``clear_error``; ``ok`` is reserved for valid calls.)

The oracles of a valid call, their tolerances from the dtype's unit roundoff ``u`` times the conditioning of the
linear maps involved (``|D| |y|``, ``|D| |E| |x|``: the sum of the absolute terms a product accumulates), so that a
tolerance grows exactly where rounding can, and never from a fixed number:

- ``decoder(y, mask)`` equals ``decode_matrix(mask) @ y`` computed in float64, within
  ``c u (|D| @ |y|) + u_out |ref|`` with ``c = 2 (N + 2)``; where ``nonfinite="straggle"`` the reference mask drops
  the non-finite workers; results at straggler positions never enter (replacing them changes nothing);
- the documented exceptions: with ``check=False`` a group with fewer than ``min_arrived`` results is all NaN, a
  NaN/Inf in a group's column makes that column NaN (``nonfinite="error"``), and an entry whose absolute sum
  ``|D| @ |y|`` exceeds the compute dtype's range may overflow; with ``check=True`` too few results or a non-finite
  arrived result raise ``ValueError``;
- exact recovery: data that are a polynomial of the points of a degree the code reproduces (GCC's splines: lines,
  Berrut: constants, LCC: ``fit_degree``, or ``n - 1`` below its threshold) decode to that polynomial at the
  regression points; LCC on a model ``t ** p`` with ``p <= degree`` recovers ``f(x)`` from ``threshold`` results;
- scale invariance of the data-adaptive rules: ``decoder(y * 2**k, mask) / 2**k`` equals ``decoder(y, mask)``
  (``2**k`` from 1e-300 to 1e300 in float64), on fresh copies of the code;
- ``decode_matrix``: zero in straggler columns, a group's matrix the same alone as in its batch, and polynomial
  reproduction as above (``D @ p(beta) = p(alpha)``);
- the encoder equals ``E @ x`` in float64 and reproduces its polynomials (``E @ p(alpha) = p(beta)``);
- ``CodedModule``: its output equals the closed form ``D (f(E X))`` computed in float64 by hand (``f`` a linear or
  elementwise polynomial model, or any zoo model run by hand on the coded inputs), with the output container, keys
  and shapes of the model's; meta inputs give meta outputs of the right shape.

``benchmarks/fuzz_api.py`` runs it from the command line; ``tests/test_fuzz_api.py`` runs a seeded slice and
checks the oracles on injected faults.
"""

from __future__ import annotations

import collections
import copy
import math
import os
import random
import re
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch

import torchgcc
from torchgcc.coded_module import group_samples, ungroup_samples
from torchgcc.codes.maps import compute_dtype
from torchgcc.functional.lagrange import chebyshev_vandermonde

CATEGORIES = ("ok", "clear_error", "silent_wrong", "raw_error")
ENTRY_POINTS = ("make_code", "encoder", "decoder", "decode_matrix", "calibrate", "coded_module")
MAX_EXAMPLES = 20
#: How often each oracle property was checked (on valid calls), reset by :func:`fuzz`.
CHECKED: collections.Counter = collections.Counter()
#: Numbers in error messages, replaced by ``#`` to group outcomes by their message.
NUMBER = re.compile(r"\d[\d.]*(e[+-]?\d+)?")
PACKAGE_DIR = str(Path(torchgcc.__file__).resolve().parent)

F64 = torch.float64


# --- outcomes ------------------------------------------------------------------------------------------------------


@dataclass
class Case:
    """One drawn call: ``setup`` (lines building its arguments, valid Python) and ``call`` (the lines under test);
    ``invalid`` names the arguments the draw broke (the tokens a clear error should contain), empty for a valid
    draw. ``oracle(ns)`` judges a returned result from the namespace the snippet ran in: None if right, else why.
    Every call that raises must leave the code as it was: a decoder that had not chosen its smoothing has not chosen
    it after the error (a first batch that fails the check must not calibrate the default rule)."""

    entry: str
    setup: list[str]
    call: list[str]
    invalid: list[str] = field(default_factory=list)
    oracle: Optional[Callable[[dict], Optional[str]]] = None

    @property
    def snippet(self) -> str:
        return "\n".join(["import copy, torch, torchgcc", *self.setup, *self.call])


class Expected(Exception):
    """Raised by an oracle that finds the call should have raised (a documented error): ``tokens`` name it."""

    def __init__(self, tokens: list[str]) -> None:
        super().__init__(", ".join(tokens))
        self.tokens = tokens


def raised_in_torchgcc(error: BaseException) -> bool:
    """Whether the innermost frame of ``error``'s traceback is torchgcc's own code."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and str(Path(frames[-1].filename).resolve()).startswith(PACKAGE_DIR)


def classify_error(error: BaseException, tokens: list[str]) -> dict[str, Any]:
    message = str(error)
    clear = isinstance(error, (ValueError, TypeError)) and "\n" not in message.strip() and raised_in_torchgcc(error)
    return {
        "category": "clear_error" if clear else "raw_error",
        "error": f"{type(error).__name__}: {message.splitlines()[0] if message else ''}"[:400],
        "named": any(token.lower() in message.lower() for token in tokens) if tokens else None,
    }


def run_case(case: Case) -> dict[str, Any]:
    """Run ``case`` from its snippet and classify the outcome. The default's advice on a first batch smaller than
    its pool (:class:`torchgcc.CalibrationWarning`) is expected of the fuzzer's small batches: ignored in the setup,
    the call and the oracles alike."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torchgcc.CalibrationWarning)
        return _run_case(case)


def _run_case(case: Case) -> dict[str, Any]:
    ns: dict[str, Any] = {"copy": copy, "torch": torch, "torchgcc": torchgcc}
    exec("\n".join(case.setup), ns)  # a failure here is the fuzzer's own bug: let it propagate
    before = calibration(ns.get("code"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", torchgcc.CalibrationWarning)  # "always" above replaced the outer filter
        try:
            exec("\n".join(case.call), ns)
            error = None
        except Exception as raised:  # noqa: BLE001 - classifying every exception is the point
            error = raised
    ns["caught_warnings"] = caught  # for the oracles of documented warnings
    outcome = judge(case, ns, error)
    if error is not None and outcome["category"] == "clear_error" and calibration(ns.get("code")) != before:
        outcome = {
            "category": "silent_wrong",
            "error": f"a call that raised changed the decoder's calibration from {before} to "
            f"{calibration(ns.get('code'))} (later calls decode with a smoothing chosen from the rejected batch): "
            f"{outcome['error'][:200]}",
        }
    if caught:
        outcome["warnings"] = sorted({f"{w.category.__name__}: {str(w.message).splitlines()[0]}" for w in caught})
    return outcome


def calibration(code: object) -> Optional[tuple]:
    """``(calibrated, ratio)`` of a code whose decoder calibrates (the default GCC rule), else None."""
    decoder = getattr(code, "decoder", None)
    if not getattr(decoder, "calibrates", False):
        return None
    ratio = float(decoder.ratio)
    return decoder.calibrated, None if math.isnan(ratio) else ratio


def judge(case: Case, ns: dict, error: Optional[BaseException]) -> dict[str, Any]:
    """The outcome of ``case`` from its namespace after the call and the exception it raised (or None)."""
    if error is not None:
        outcome = classify_error(error, case.invalid)
        outcome["on_valid"] = not case.invalid
        if outcome["category"] == "clear_error" and not outcome["named"] and case.oracle is not None:
            try:  # a valid-looking call the oracle knows must raise (too few results, a non-finite arrived one)
                case.oracle(ns)
            except Expected as expected:  # the error names that instead of the argument the draw broke
                outcome["on_valid"] = False
                outcome["named"] = any(t.lower() in str(error).lower() for t in expected.tokens)
            except Exception:  # noqa: BLE001
                pass
        return outcome
    if case.invalid:
        return {"category": "silent_wrong", "error": f"accepted although {', '.join(case.invalid)} is invalid"}
    try:
        problem = None if case.oracle is None else case.oracle(ns)
    except Expected as expected:
        problem = f"returned a result where a ValueError naming {expected.tokens} is documented"
    except Exception as error:  # noqa: BLE001 - an oracle's follow-up call of the API (a copy, a variant) failed
        problem = f"a follow-up call of the oracle raised {type(error).__name__}: {str(error).splitlines()[0]}"
    if problem:
        return {"category": "silent_wrong", "error": problem[:600]}
    return {"category": "ok"}


# --- numerical helpers ---------------------------------------------------------------------------------------------


def unit_roundoff(dtype: torch.dtype) -> float:
    """The larger of the data's and its compute dtype's machine epsilon (float64 for integers)."""
    if not dtype.is_floating_point:
        return torch.finfo(F64).eps
    return max(torch.finfo(dtype).eps, torch.finfo(compute_dtype(dtype)).eps)


def compare(
    out: torch.Tensor,
    ref: torch.Tensor,
    env: torch.Tensor,
    terms: int,
    dtype: torch.dtype,
    *,
    nan_ok: Optional[torch.Tensor] = None,
    overflow_ok: bool = False,
    build_terms: Optional[torch.Tensor] = None,
) -> Optional[str]:
    """None if ``out`` matches ``ref`` within ``2 (terms + 2) u env + u_out |ref|`` (plus the smallest normal times
    ``terms``, for products that underflow in the data's dtype), else the worst entry. ``env`` is the absolute sum
    the rounding errors scale with; ``nan_ok`` marks entries whose non-finite value is documented; with
    ``overflow_ok`` an entry whose ``env`` exceeds the compute dtype's range may be non-finite, and an entry whose
    ``|ref| + tol`` exceeds the output dtype's range may be infinite. ``build_terms`` ``(B,)`` adds ``2 build u64 env``
    where ``ref`` is an exact value rather than the product of the code's own float64 matrices: those come from
    solves whose rounding grows with their condition (:func:`solve_terms`)."""
    if tuple(out.shape) != tuple(ref.shape):
        return f"shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    if out.dtype != dtype:
        return f"dtype {out.dtype}, expected {dtype}"
    got = out.detach().to(F64)
    u, u_out = unit_roundoff(dtype), torch.finfo(dtype).eps
    tiny = torch.finfo(dtype).tiny  # the data's own: a model's product may underflow in float16
    tol = 2 * (terms + 2) * u * env + u_out * ref.abs() + (terms + 2) * tiny
    if build_terms is not None:
        tol = tol + 2 * build_terms.to(F64).view((-1,) + (1,) * (env.ndim - 1)) * torch.finfo(F64).eps * env
    allowed = torch.zeros_like(got, dtype=torch.bool) if nan_ok is None else nan_ok.expand(got.shape).clone()
    allowed |= ~torch.isfinite(ref)
    # the result within its tolerance may not fit the output dtype (ill-conditioned decodes: LCC on random points)
    allowed |= ref.abs() + tol > torch.finfo(dtype).max
    if overflow_ok:
        allowed |= env > torch.finfo(compute_dtype(dtype)).max / 2
    bad_nonfinite = ~torch.isfinite(got) & ~allowed
    if bad_nonfinite.any():
        index = tuple(int(i) for i in bad_nonfinite.nonzero()[0])
        return f"non-finite {got[index].item()} at {index} where the reference is {ref[index].item():.6g}"
    error = torch.where(allowed | ~torch.isfinite(got), 0.0, (got - ref).abs() - tol)
    if (error > 0).any():
        index = tuple(int(i) for i in torch.nonzero(error == error.max())[0])
        return (
            f"off by {(got[index] - ref[index]).abs().item():.3g} at {index} (tolerance {tol[index].item():.3g}, "
            f"reference {ref[index].item():.6g})"
        )
    return None


def solve_terms(code: torchgcc.Code, used: torch.Tensor, points: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``(B,)`` the factor by which the rounding of a group's float64 decode matrix (or, with ``points=code.alpha``
    and ``used`` all True, of the encoder's) can exceed that of a product: ``4 (P + Q)`` (a cubic's four
    coefficients, ``P`` points fitted, ``Q`` evaluated) times the ratio of the largest to the smallest gap between the
    fitted points (the condition of the spline and polynomial systems on them grows with it), squared for LCC's
    polynomial fits; plus, for an LCC decoder's least-squares fit (more survivors than ``fit_degree + 1``, solved by a
    pseudo-inverse), twice the 2-norm condition number of its Chebyshev-Vandermonde matrix, which that solve's
    rounding grows with (at equispaced points it outgrows the gap ratio: 7.6e6 at 23 of 30 workers, degree 21)."""
    fitted = code.beta if points is None else points
    evaluated = code.num_workers if points is not None else code.num_inputs
    big = torch.where(used, fitted, float("inf")).sort(-1).values
    gaps = big.diff(dim=-1)
    if gaps.shape[-1] == 0:  # one point: nothing solved
        return torch.full((used.shape[0],), 4.0 * (1 + evaluated), dtype=F64)
    finite = torch.isfinite(gaps)
    ratio = torch.where(finite, gaps, 0.0).amax(-1) / torch.where(finite, gaps, float("inf")).amin(-1)
    ratio = torch.nan_to_num(ratio, nan=1.0, posinf=1.0).clamp_min(1.0)
    terms = 4 * (used.shape[-1] + evaluated) * ratio
    if type(code).__name__ != "LCC":
        return terms
    if points is not None:  # the encoder interpolates its K points: no least-squares fit
        return terms**2
    degree = code.decoder.fit_degree
    least_squares = used.sum(-1) > degree + 1
    condition = torch.zeros_like(terms)
    for group in least_squares.nonzero().flatten().tolist():
        nodes = fitted[used[group]].to(F64)
        condition[group] = torch.linalg.cond(chebyshev_vandermonde(nodes, degree))
    return terms**2 + 2 * condition


def times_power_of_two(t: torch.Tensor, k: int) -> torch.Tensor:
    """``t * 2**k`` in ``t``'s dtype, exact while the result is normal (in float64, two steps: 2**k alone may not
    fit)."""
    half = k // 2
    return (t.to(F64) * 2.0**half * 2.0 ** (k - half)).to(t.dtype)


def scale_exponent(rng: random.Random, scale: float, dtype: str) -> int:
    """An exponent ``k`` such that data of ``scale`` times ``2**k`` have another scale of the dtype's range (at most
    1e-8 of its largest value, so that estimates, weighted sums of the data, still fit; float16: 0.1 or 10)."""
    if dtype == "int64":
        return 0
    scales = [s for s in scales_of(dtype) if s <= 1e-8 * torch.finfo(getattr(torch, dtype)).max] or [0.1, 10.0]
    return round(math.log2(rng.choice(scales)) - math.log2(scale))


def reproduced_degree(code: torchgcc.Code, side: str, count: Optional[torch.Tensor] = None) -> torch.Tensor | int:
    """The polynomial degree the code's encoder (``side="encoder"``) or decoder (for ``count`` arrived results,
    ``(B,)``) reproduces exactly."""
    name = type(code).__name__
    if side == "encoder":
        if name == "LCC":
            return code.num_inputs - 1
        return 1 if name == "GCC" and code.num_inputs >= 2 else 0
    if name == "LCC":
        return torch.clamp(count - 1, max=code.decoder.fit_degree)
    return torch.full_like(count, 1 if name == "GCC" else 0)


def chebyshev_envelope(matrix: torch.Tensor, coefficients: torch.Tensor) -> torch.Tensor:
    """The absolute sum for ``matrix @ p(points)`` against ``p`` evaluated directly, ``p`` of ``coefficients``
    ``(B, J, d)``: both evaluations round relative to ``sum_j |c_j| >= |T_j|``, not to ``|p|`` (which cancellation
    can make far smaller): ``(|matrix| @ 1 + 1) sum_j |c_j|``, ``(B, M, d)``."""
    size = coefficients.abs().sum(1, keepdim=True)  # (B, 1, d)
    return (matrix.abs().sum(-1, keepdim=True) + 1) * size


def chebyshev(points: torch.Tensor, coefficients: torch.Tensor) -> torch.Tensor:
    """``sum_j c_j T_j(points)``: ``points`` ``(P,)``, ``coefficients`` ``(B, J, d)`` -> ``(B, P, d)``."""
    basis = torch.cos(torch.arange(coefficients.shape[1], dtype=F64).view(1, -1) * torch.acos(points.view(-1, 1)))
    return torch.einsum("pj,bjd->bpd", basis, coefficients)


def chebyshev_source(points: str) -> str:
    """:func:`chebyshev` of ``coef`` at ``points`` as a snippet expression."""
    return (
        f"torch.einsum('pj,bjd->bpd', torch.cos(torch.arange(coef.shape[1], dtype=torch.float64) "
        f"* torch.acos({points}).unsqueeze(-1)), coef)"
    )


# --- the drawing of codes and data ---------------------------------------------------------------------------------

SCALES_F64 = (1e-300, 1e-150, 1e-20, 1.0, 1e20, 1e150, 1e300)
SCALES_LOW = (1e-30, 1e-6, 1.0, 1e6, 1e30, 1e37)
SCALES_HALF = (1e-3, 0.1, 1.0, 10.0, 1e3)


def scales_of(dtype: str) -> tuple[float, ...]:
    """The data scales drawn for ``dtype``: 1e-300..1e300 in float64, 1e-30..1e30 in float32/bfloat16, 1e-3..1e3 in
    float16."""
    return {"float64": SCALES_F64, "float16": SCALES_HALF}.get(dtype, SCALES_LOW)


def draw_code(rng: random.Random) -> tuple[str, str]:
    """``(source, name)`` of a valid code ``code = ...`` (its decoder may ask for the triton backend, which CPU data
    must refuse: see :func:`backend_tokens`)."""
    name = rng.choice(["gcc", "gcc", "natural", "bacc", "lcc"])
    k = rng.choice([1, 2, 3, 4, 5, 8])
    options: dict[str, Any] = {}
    if name == "lcc":
        degree = rng.choice([1, 1, 2, 3])
        n = (k - 1) * degree + 1 + rng.choice([0, 1, 3, 8])
        options["degree"] = degree
        if rng.random() < 0.3:
            options["below_threshold"] = "interpolate"
    else:
        n = k + rng.choice([0, 1, 2, 4, 8, 16, 28, 120])
    n = max(n, 2)  # the default worker points (chebyshev2) need two
    if name == "gcc":
        options["lambda_dec"] = rng.choice(["adaptive", "adaptive", "gcv", "spacing", 0.0, 1e-4, 0.3])
        if rng.random() < 0.2:
            options["lambda_enc"] = rng.choice([1e-5, 0.01])
    if rng.random() < 0.5:
        options["check"] = False
    if rng.random() < 0.3:
        options["nonfinite"] = "straggle"
    if rng.random() < 0.2:
        options["alpha"] = rng.choice(["equispaced", "chebyshev2"] if k >= 2 else ["chebyshev1"])
    if rng.random() < 0.2:
        options["beta"] = rng.choice(["equispaced", "chebyshev1"])
    if name != "lcc" and rng.random() < 0.03:
        options["backend"] = "triton"
    args = "".join(f", {key}={value!r}" for key, value in options.items())
    if rng.random() < 0.08:  # explicit worker points: random, sorted, on [-1, 1] (unevenly spaced)
        args += (
            f", beta=torch.rand({n}, generator=torch.Generator().manual_seed({rng.randrange(10**6)}), "
            "dtype=torch.float64).mul(2).sub(1).sort().values"
        )
        args = args.replace(f", beta={options.get('beta')!r}", "") if "beta" in options else args
    source = f"code = torchgcc.make_code({name!r}, num_inputs={k}, num_workers={n}{args})"
    if rng.random() < 0.05:  # the code cast along with a model: its float64 points and matrices must stay float64
        source += f".to(torch.{rng.choice(['bfloat16', 'float16', 'float32'])})"
    return source, name


def backend_tokens(code: torchgcc.Code) -> list[str]:
    """The tokens of the clear error a decode on CPU data must raise for a code built with ``backend="triton"``."""
    return ["triton"] if code.decoder.backend == "triton" and not os.environ.get("TRITON_INTERPRET") else []


def without_backend(invalid: list[str]) -> list[str]:
    """``invalid`` less the backend's tokens: meta tensors never reach the kernel."""
    return [token for token in invalid if token != "triton"]


def draw_feat(rng: random.Random) -> tuple[int, ...]:
    return rng.choice([(), (1,), (3,), (7,), (2, 3, 2)])


def draw_dtype(rng: random.Random, *, allow_int: bool = True) -> str:
    choices = ["float32"] * 4 + ["float64"] * 4 + ["bfloat16"] * 2 + ["float16"] + (["int64"] if allow_int else [])
    return rng.choice(choices)


def data_source(
    rng: random.Random, name: str, shape: str, dtype: str, seed: int, *, allow_special: bool = True
) -> tuple[str, float]:
    """``(name = ..., scale)``: random data of ``shape`` (a tuple's source), of a random scale, perhaps NaN/Inf."""
    scale = rng.choice(scales_of(dtype))
    if dtype == "int64":
        return f"{name} = torch.randint(-5, 5, {shape}, generator=torch.Generator().manual_seed({seed}))", 1.0
    lines = [
        f"{name} = (torch.randn({shape}, generator=torch.Generator().manual_seed({seed}), dtype=torch.float64)"
        f" * {scale!r}).to(torch.{dtype})"
    ]
    if allow_special and rng.random() < 0.15:
        value = rng.choice(["float('nan')", "float('inf')", "-float('inf')"])
        lines.append(f"if {name}.numel(): {name}.view(-1)[{rng.randrange(10**6)} % {name}.numel()] = {value}")
    return "\n".join(lines), scale


def mask_source(rng: random.Random, b: int, n: int, seed: int, *, any_batch: bool = False) -> tuple[str, list[str]]:
    """``mask = ...`` and the tokens naming it if the draw is invalid (``any_batch``: every number of rows is valid,
    as for ``decode_matrix``). A meta mask is valid only with meta results: the caller decides."""
    kind = rng.choice(
        ["bool"] * 14 + ["all_true", "all_false", "int", "list", "short_rows", "wrong_shape", "meta", "few", "few"]
    )
    gen = f"generator=torch.Generator().manual_seed({seed})"
    p = rng.choice([0.5, 0.8, 0.95])
    if kind == "bool":
        if rng.random() < 0.1:
            return f"mask = (torch.rand({n}, {b}, {gen}) < {p}).T  # not contiguous", []
        return f"mask = torch.rand({b}, {n}, {gen}) < {p}", []
    if kind == "all_true":
        return f"mask = torch.ones({b}, {n}, dtype=torch.bool)", []
    if kind == "all_false":
        return f"mask = torch.zeros({b}, {n}, dtype=torch.bool)", []
    if kind == "few":  # exactly one or two arrived results per group
        keep = rng.choice([1, 2])
        return f"mask = torch.rand({b}, {n}, {gen}).argsort(-1) < {keep}", []
    if kind == "int":
        return f"mask = (torch.rand({b}, {n}, {gen}) < {p}).long()", ["mask"]
    if kind == "list":
        return f"mask = (torch.rand({b}, {n}, {gen}) < {p}).tolist()", ["mask"]
    if kind == "short_rows":
        return f"mask = torch.rand({b}, {max(n - 1, 0)}, {gen}) < {p}", ["mask"]
    if kind == "wrong_shape":
        rows, cols = (b, n + 1) if any_batch else (b + 1, n)
        return f"mask = torch.rand({rows}, {cols}, {gen}) < {p}", ["mask"]
    return f"mask = torch.ones({b}, {n}, dtype=torch.bool, device='meta')", []


# --- the decoder and decode_matrix ---------------------------------------------------------------------------------


def decode_plan(code, y: torch.Tensor, mask: torch.Tensor, check: bool):
    """What ``code.decoder(y, mask)`` documents for results ``y`` ``(B, N, *out)``: ``(matrix, used, nan_ok)`` with
    the float64 ``(B, K, N)`` matrices (zero for groups too short to decode), ``used`` ``(B, N)`` the results that
    enter, and ``nan_ok`` ``(B, 1 or K, d)`` the estimates that may be NaN; raises :class:`Expected` where the call
    must fail."""
    decoder = code.decoder
    flat = y.reshape(y.shape[0], y.shape[1], -1)
    finite_rows = torch.isfinite(flat).all(-1)
    used = mask & finite_rows if decoder.nonfinite == "straggle" else mask
    short = used.sum(-1) < decoder.min_arrived
    if check and (short.any() or (used & ~finite_rows).any()):
        raise Expected(["arrived", "non-finite", "needs at least", "group"])
    if decoder.depends_on_results:  # per-group GCV: the matrices come with the results (straggler values zeroed)
        matrix = decoder.matrices(torch.where(used.unsqueeze(-1), flat, 0.0), used)
    else:
        matrix = decoder.decode_matrix(used, check=False)
    matrix = torch.where(short.view(-1, 1, 1), 0.0, matrix.to(F64))
    nan_ok = short.view(-1, 1, 1).expand(-1, 1, flat.shape[-1]).clone()
    if not check and decoder.nonfinite == "error":
        nan_ok |= (~torch.isfinite(flat)).any(1, keepdim=True)
    return matrix, used, nan_ok


def conditioning_problem(code, y: torch.Tensor, mask: torch.Tensor, check: bool, caught: list) -> Optional[str]:
    """LCC's documented :class:`torchgcc.ConditioningWarning`: with ``check=True`` a decode warns iff its matrices'
    largest absolute row sum exceeds ``u ** -0.5`` (``u`` the unit roundoff of the results' dtype), and never without
    a check or without estimates; not judged within 1% of the limit (rounding decides there)."""
    if not isinstance(code, torchgcc.LCC):
        return None
    warned = any(issubclass(w.category, torchgcc.ConditioningWarning) for w in caught)
    if not check or y.numel() == 0:
        return "ConditioningWarning without a check or without estimates" if warned else None
    matrix, _, _ = decode_plan(code, y.detach(), mask, check)
    amplification = float(matrix.abs().sum(-1).amax())
    limit = (torch.finfo(y.dtype).eps / 2) ** -0.5
    CHECKED["decoder: LCC warns where its weights amplify rounding"] += 1
    if abs(math.log(amplification / limit)) < 0.01 or warned == (amplification > limit):
        return None
    return f"amplification {amplification:.3e} against the limit {limit:.3e}, but warned={warned}"


def decode_reference(
    code,
    y: torch.Tensor,
    mask: torch.Tensor,
    check: bool,
    exact: Optional[torch.Tensor] = None,
    envelope: Optional[torch.Tensor] = None,
):
    """``(ref, env, nan_ok)`` float64 ``(B, K, d)``: the documented estimates of ``code.decoder(y, mask)``, the
    absolute sums their rounding errors scale with, and the entries that may be NaN. ``exact`` and ``envelope``
    (``(B, N, d)``) replace ``y`` and ``|y|`` in the product (the float64 values the results approximate)."""
    matrix, used, nan_ok = decode_plan(code, y, mask, check)
    flat = (y if exact is None else exact).reshape(y.shape[0], y.shape[1], -1).to(F64)
    keep = used.unsqueeze(-1) & torch.isfinite(flat)
    clean = torch.where(keep, flat, 0.0)
    size = flat.abs() if envelope is None else envelope.reshape(flat.shape)
    return matrix @ clean, matrix.abs() @ torch.where(keep, size, 0.0), nan_ok


def draw_decoder(rng: random.Random, seed: int) -> Case:
    source, name = draw_code(rng)
    ns: dict[str, Any] = {"torch": torch, "torchgcc": torchgcc}
    exec(source, ns)
    code = ns["code"]
    k, n = code.num_inputs, code.num_workers
    b = rng.choice([1, 2, 5, 17])
    feat = draw_feat(rng)
    dtype = draw_dtype(rng)
    setup = [source, "fresh = copy.deepcopy(code)"]
    invalid: list[str] = backend_tokens(code)
    shape = (b, n, *feat)
    shape_kind = rng.choice(["ok"] * 20 + ["empty", "wrong_n", "one_dim", "list", "meta"])
    if shape_kind == "empty":
        shape, invalid = (0, n, *feat), ["empty", "B = 0"]
    elif shape_kind == "wrong_n":
        shape, invalid = (b, n + 1, *feat), ["N="]
    elif shape_kind == "one_dim":
        shape, invalid = (b,), ["N="]
    poly = shape_kind == "ok" and dtype != "int64" and rng.random() < 0.25
    if poly:  # results that are a polynomial of the worker points (per group and column)
        feat_size = math.prod(feat)
        degree = rng.choice([0, 1, 2, 4, 8])
        setup.append(
            f"coef = torch.randn({b}, {degree + 1}, {feat_size}, generator=torch.Generator().manual_seed({seed}), "
            f"dtype=torch.float64)"
        )
        setup.append(f"y = {chebyshev_source('code.beta')}.reshape({shape}).to(torch.{dtype})")
    else:
        line, scale = data_source(rng, "y", repr(shape), dtype, seed)
        setup.append(line)
    if dtype == "int64" and shape_kind != "list":
        invalid += ["floating point"]
    if shape_kind == "list":
        setup.append("y = y.tolist()")
        invalid += ["torch.Tensor"]
    if shape_kind == "meta":
        setup.append("y = y.to('meta')")
        invalid = without_backend(invalid)
    elif shape_kind == "ok" and len(shape) >= 3 and rng.random() < 0.15:
        setup.append("y = y.transpose(0, 1).contiguous().transpose(0, 1)  # not contiguous")
    if shape_kind in ("ok", "wrong_n") and dtype != "int64" and rng.random() < 0.15:
        setup.append("y.requires_grad_()")
    mask_line, mask_invalid = mask_source(rng, b, n, seed + 1)
    setup.append(mask_line)
    invalid += mask_invalid
    if "device='meta'" in mask_line and shape_kind != "meta":
        invalid += ["mask", "meta"]  # a mask without data for results with data
    scale_k = scale_exponent(rng, 1.0 if poly else scale, dtype)
    check = code.decoder.check
    call = ["out = code.decoder(y, mask)"]

    def oracle(ns: dict) -> Optional[str]:
        code, y, mask, out = ns["code"], ns["y"], ns["mask"], ns.get("out")
        if y.is_meta:
            expected = (y.shape[0], k) + tuple(y.shape[2:])
            return None if out.is_meta and tuple(out.shape) == expected else f"meta output {tuple(out.shape)}"
        ref, env, nan_ok = decode_reference(code, y, mask, check)  # raises Expected for a documented error
        flat_out = out.reshape(out.shape[0], k, -1) if out.ndim >= 2 else out
        if tuple(out.shape) != (y.shape[0], k) + tuple(y.shape[2:]):
            return f"shape {tuple(out.shape)}, expected {(y.shape[0], k) + tuple(y.shape[2:])}"
        CHECKED["decoder: decoder(y, mask) = decode_matrix(mask) @ y"] += 1
        problem = compare(flat_out, ref, env, n, y.dtype, nan_ok=nan_ok, overflow_ok=not check)
        if problem:
            return "decoder(y, mask) vs decode_matrix(mask) @ y: " + problem
        problem = conditioning_problem(code, y, mask, check, ns["caught_warnings"])
        if problem:
            return problem
        flat = y.reshape(y.shape[0], n, -1).to(F64)
        if poly and not nan_ok.any():  # exact recovery of a polynomial the decoder reproduces
            eff = mask & torch.isfinite(flat).all(-1) if code.decoder.nonfinite == "straggle" else mask
            exact = reproduced_degree(code, "decoder", eff.sum(-1)) >= ns["coef"].shape[1] - 1
            if exact.any():
                truth = chebyshev(code.alpha, ns["coef"])
                build = solve_terms(code, eff)[exact]
                matrix, _, _ = decode_plan(code, y.detach(), mask, check=False)
                size = env + chebyshev_envelope(matrix, ns["coef"])
                CHECKED["decoder: polynomial results recovered"] += 1
                problem = compare(flat_out[exact], truth[exact], size[exact], n, y.dtype, build_terms=build)
                if problem:
                    return "polynomial data not recovered: " + problem
        fresh = ns["fresh"]
        finite = torch.isfinite(flat).all()
        if rng_flags["stragglers"] and finite:  # straggler values must not matter, also for the adaptive rules
            noise = torch.randn(flat.shape, generator=torch.Generator().manual_seed(seed + 2), dtype=F64)
            size = min(8 * flat.abs().amax().clamp_min(1.0).item(), torch.finfo(y.dtype).max / (64 * n))
            if check or code.decoder.nonfinite == "straggle":  # documented: NaN/Inf at stragglers are kept out
                noise = torch.where(noise > 1.5, float("nan"), torch.where(noise < -1.5, float("inf"), noise))
            swapped = torch.where(mask.unsqueeze(-1), flat, noise * size).to(y.dtype)
            other = copy.deepcopy(fresh).decoder(swapped.reshape(y.shape), mask)
            CHECKED["decoder: straggler values ignored"] += 1
            problem = compare(
                other.reshape(flat_out.shape), flat_out.to(F64), env, n, y.dtype, nan_ok=nan_ok, overflow_ok=not check
            )
            if problem:
                return (
                    "straggler values changed the estimate (fresh copy of the code, y replaced at mask == False): "
                    + problem
                )
        if rng_flags["reload"]:  # a new code loading the state dict decodes alike (the adaptive ratio is in it)
            namespace = {"torch": torch, "torchgcc": torchgcc}
            exec(source, namespace)
            reloaded = namespace["code"]
            reloaded.load_state_dict(code.state_dict())
            again = reloaded.decoder(y, mask)
            CHECKED["decoder: state_dict reload"] += 1
            problem = compare(again.reshape(flat_out.shape), flat_out.to(F64), env, n, y.dtype, nan_ok=nan_ok)
            if problem:
                return f"a code loading code.state_dict() decodes differently: {problem}"
        if rng_flags["scale"] and finite and fresh.decoder.depends_on_results:
            scaled = times_power_of_two(copy.deepcopy(fresh).decoder(times_power_of_two(y, scale_k), mask), -scale_k)
            CHECKED["decoder: scale invariance"] += 1
            problem = compare(
                scaled.reshape(flat_out.shape), flat_out.to(F64), env, n, y.dtype, nan_ok=nan_ok, overflow_ok=True
            )
            if problem:
                return f"not scale invariant: fresh.decoder(y * 2.0**{scale_k}, mask) / 2.0**{scale_k}: {problem}"
        return None

    rng_flags = {"stragglers": rng.random() < 0.3, "scale": rng.random() < 0.5, "reload": rng.random() < 0.15}
    return Case("decoder", setup, call, invalid, oracle)


def draw_decode_matrix(rng: random.Random, seed: int) -> Case:
    source, name = draw_code(rng)
    ns: dict[str, Any] = {"torch": torch, "torchgcc": torchgcc}
    exec(source, ns)
    code = ns["code"]
    k, n = code.num_inputs, code.num_workers
    b = rng.choice([1, 3, 9])
    setup = [source]
    calibrated = False
    calibrates = getattr(code.decoder, "calibrates", False) and not backend_tokens(code)
    if code.decoder.depends_on_results and rng.random() < 0.7 and calibrates:
        setup.append(
            f"code.decoder(torch.randn({b}, {n}, 3, dtype=torch.float64), torch.ones({b}, {n}, "
            "dtype=torch.bool))  # calibrates the adaptive rule"
        )
        calibrated = True
    mask_line, invalid = mask_source(rng, b, n, seed, any_batch=True)
    invalid += backend_tokens(code)
    setup.append(mask_line)
    if "device='meta'" in mask_line:
        invalid = without_backend(invalid)
    check_arg = rng.choice([None, True, False])
    call = [f"out = code.decoder.decode_matrix(mask{'' if check_arg is None else f', check={check_arg}'})"]
    if code.decoder.depends_on_results and not calibrated:
        invalid += ["depend on the results", "matrices"]
    check = code.decoder.check if check_arg is None else check_arg

    def oracle(ns: dict) -> Optional[str]:
        code, mask, out = ns["code"], ns["mask"], ns.get("out")
        if mask.is_meta:
            return None if out.is_meta and tuple(out.shape) == (b, k, n) else f"meta output {tuple(out.shape)}"
        counts = mask.sum(-1)
        short = counts < code.decoder.min_arrived
        if check and short.any():
            raise Expected(["needs at least", "arrived"])
        rows = mask.shape[0]
        if tuple(out.shape) != (rows, k, n) or out.dtype != F64:
            return f"shape {tuple(out.shape)} dtype {out.dtype}, expected {(rows, k, n)} float64"
        if not torch.isnan(out[short]).all():
            return "a group with fewer than min_arrived results has a non-NaN matrix"
        good = out[~short]
        if not torch.isfinite(good).all():
            return "non-finite matrix for a group with enough results"
        if (good * ~mask[~short].unsqueeze(1)).abs().sum() > 0:
            return "non-zero weight in a straggler column"
        CHECKED["decode_matrix: a group's matrix alone as in its batch"] += 1
        for row in range(rows):  # a group's matrix alone as in its batch
            alone = code.decoder.decode_matrix(mask[row : row + 1], check=False)[0]
            if not short[row] and not torch.allclose(
                alone, out[row], rtol=0, atol=64 * n * 2.2e-16 * out[row].abs().sum(-1, keepdim=True).max().item()
            ):
                return f"group {row}'s matrix differs alone (decode_matrix(mask[{row}:{row + 1}]))"
        degree = reproduced_degree(code, "decoder", counts)
        coef = torch.randn(rows, int(degree.max()) + 1, 1, generator=torch.Generator().manual_seed(seed), dtype=F64)
        coef = coef * (torch.arange(coef.shape[1]).view(1, -1, 1) <= degree.view(-1, 1, 1))
        values = chebyshev(code.beta, coef)
        ok = ~short
        CHECKED["decode_matrix: D @ p(beta) = p(alpha)"] += 1
        problem = compare(
            out[ok] @ values[ok],
            chebyshev(code.alpha, coef)[ok],
            chebyshev_envelope(out[ok], coef[ok]),
            n,
            F64,
            build_terms=solve_terms(code, mask)[ok],
        )
        return None if problem is None else f"D @ p(beta) != p(alpha) for a reproduced degree: {problem}"

    return Case("decode_matrix", setup, call, invalid, oracle)


def draw_calibrate(rng: random.Random, seed: int) -> Case:
    """The data-adaptive rules' own entry points: ``calibrate(y, mask)`` of the default rule, with or without the
    groups' uncoded outputs ``reference`` (the validated choice), and ``matrices(y, mask)`` of per-group GCV (the call
    ``decode_matrix``'s TypeError recommends)."""
    rule = rng.choice(["adaptive", "gcv"])
    k = rng.choice([2, 3, 4, 8])
    n = k + rng.choice([1, 4, 12])
    b = rng.choice([1, 3, 20])
    source = f"code = torchgcc.GCC({k}, {n}, lambda_dec={rule!r})"
    setup, invalid = [source], []
    dtype = draw_dtype(rng)
    shape_kind = rng.choice(["ok"] * 8 + ["wrong_n", "list", "two_dim", "meta"])
    shape = {"wrong_n": (b, n + 1, 3), "two_dim": (b, n)}.get(shape_kind, (b, n, 3))
    setup.append(data_source(rng, "y", repr(shape), dtype, seed)[0])
    invalid += {"wrong_n": ["N="], "list": ["torch.Tensor"]}.get(shape_kind, [])
    if shape_kind == "meta" and rule == "adaptive":  # calibrate needs values; matrices gives meta ones (shapes)
        invalid += ["meta"]
    if shape_kind == "list":
        setup.append("y = y.tolist()")
    if shape_kind == "meta":
        setup.append("y = y.to('meta')")
    if dtype == "int64":
        invalid += ["floating point"]
    mask_line, mask_invalid = mask_source(rng, b, n, seed + 1)
    setup.append(mask_line)
    meta_mask_alone = "device='meta'" in mask_line and shape_kind != "meta"  # a meta mask needs meta results
    invalid += mask_invalid + (["mask", "meta"] if meta_mask_alone else [])
    method = "calibrate" if rule == "adaptive" else "matrices"
    reference = (
        rng.choice(["none"] * 4 + ["ok"] * 3 + ["wrong_k", "int", "nan", "list"]) if method == "calibrate" else "none"
    )
    if reference != "none":
        ref_shape = (b, k + 1, 3) if reference == "wrong_k" else (b, k, 3)
        ref_dtype = "int64" if reference == "int" else "float64"
        setup.append(data_source(rng, "outputs", repr(ref_shape), ref_dtype, seed + 2, allow_special=False)[0])
        if reference == "nan":
            setup.append("outputs[0, 0, 0] = float('nan')")
        if reference == "list":
            setup.append("outputs = outputs.tolist()")
        if shape_kind == "two_dim" and reference in ("ok", "nan"):  # the outputs' shape follows y's: (B, K)
            setup.append("outputs = outputs[..., 0]")
        if reference != "ok":
            invalid.append("reference")
    call = [f"out = code.decoder.{method}(y, mask{', reference=outputs' if reference != 'none' else ''})"]

    def oracle(ns: dict) -> Optional[str]:
        code, mask = ns["code"], ns["mask"]
        if method == "calibrate" and (mask.sum(-1) < code.decoder.min_arrived).any():
            raise Expected(["arrived results", "needs at least"])  # calibrate checks the counts ...
        y = ns["y"]
        if method == "calibrate" and not torch.isfinite(y.reshape(*y.shape[:2], -1)[mask]).all():
            raise Expected(["non-finite"])  # ... and the results of the arrived workers
        if method == "calibrate" and reference == "ok" and not torch.isfinite(y).all():
            raise Expected(["non-finite", "every worker's result"])  # validation reads the stragglers' results too
        out = ns["out"]
        if method == "calibrate":  # a candidate r* divided by 2^(1 - rho), rho in [0, 1], or 0 (interpolation)
            ratios = code.decoder.ratios
            between = bool(((ratios / 2 <= out) & (out <= ratios)).any()) or float(out) == 0.0
            if not (out.ndim == 0 and between and code.decoder.calibrated):
                return f"calibrate returned {out}, not within [r / 2, r] of a candidate r in {ratios.tolist()}"
            if reference == "ok":  # validated: GCV's own choice (a fresh decoder without outputs) or a candidate
                gcv = float(torchgcc.GCC(k, n).decoder.calibrate(y, mask))
                CHECKED["validated choice is GCV's or a candidate"] += 1
                if float(out) != gcv and not bool((ratios == out).any()):
                    return f"validated calibrate returned {float(out)}: neither GCV's choice {gcv} nor a candidate"
            return None
        if tuple(out.shape) != (mask.shape[0], k, n):
            return f"matrices shape {tuple(out.shape)}, expected {(mask.shape[0], k, n)}"
        return None

    return Case("calibrate", setup, call, invalid, oracle)


# --- the encoder ---------------------------------------------------------------------------------------------------


def draw_encoder(rng: random.Random, seed: int) -> Case:
    source, name = draw_code(rng)
    ns: dict[str, Any] = {"torch": torch, "torchgcc": torchgcc}
    exec(source, ns)
    code = ns["code"]
    k, n = code.num_inputs, code.num_workers
    b, feat, dtype = rng.choice([1, 4, 13]), draw_feat(rng), draw_dtype(rng)
    shape, invalid = (b, k, *feat), []
    kind = rng.choice(["ok"] * 10 + ["empty", "wrong_k", "zero_dim", "meta", "poly", "poly"])
    setup = [source]
    if kind == "empty":
        shape, invalid = (0, k, *feat), ["empty", "B = 0"]
    elif kind == "wrong_k":
        shape, invalid = (b, k + 1, *feat), ["K="]
    elif kind == "zero_dim":
        shape, invalid = (), ["K="]
    if kind == "poly" and dtype != "int64":
        degree = reproduced_degree(code, "encoder")
        setup.append(
            f"coef = torch.randn({b}, {degree + 1}, {math.prod(feat)}, "
            f"generator=torch.Generator().manual_seed({seed}), dtype=torch.float64)"
        )
        setup.append(f"x = {chebyshev_source('code.alpha')}.reshape({shape}).to(torch.{dtype})")
    else:
        setup.append(data_source(rng, "x", repr(shape), dtype, seed)[0])
    if dtype == "int64":
        invalid += ["floating point"]
    if kind == "meta":
        setup.append("x = x.to('meta')")
    elif kind == "ok" and len(shape) >= 3 and rng.random() < 0.2:
        setup.append("x = x.transpose(0, 1).contiguous().transpose(0, 1)  # not contiguous")
    call = ["out = code.encoder(x)"]

    def oracle(ns: dict) -> Optional[str]:
        x, out = ns["x"], ns["out"]
        expected = (x.shape[0], n) + tuple(x.shape[2:])
        if tuple(out.shape) != expected:
            return f"shape {tuple(out.shape)}, expected {expected}"
        if x.is_meta:
            return None if out.is_meta else "meta input, non-meta output"
        flat = x.reshape(x.shape[0], k, -1).to(F64)
        matrix = code.encoder.matrix
        clean = torch.where(torch.isfinite(flat), flat, 0.0)
        ref, env = matrix @ clean, matrix.abs() @ clean.abs()
        nan_ok = (~torch.isfinite(flat)).any(1, keepdim=True)
        CHECKED["encoder: encoder(x) = E @ x"] += 1
        problem = compare(out.reshape(out.shape[0], n, -1), ref, env, k, x.dtype, nan_ok=nan_ok, overflow_ok=False)
        if problem:
            return "encoder(x) vs E @ x: " + problem
        if "coef" in ns:
            build = solve_terms(code, torch.ones(1, k, dtype=torch.bool), code.alpha)
            size = env + chebyshev_envelope(matrix.expand(x.shape[0], n, k), ns["coef"])
            CHECKED["encoder: E @ p(alpha) = p(beta)"] += 1
            problem = compare(
                out.reshape(out.shape[0], n, -1), chebyshev(code.beta, ns["coef"]), size, k, x.dtype, build_terms=build
            )
            if problem:
                return "E @ p(alpha) != p(beta) for a reproduced degree: " + problem
        return None

    return Case("encoder", setup, call, invalid, oracle)


# --- the registry and constructors ---------------------------------------------------------------------------------

BAD_COUNTS = (0, -1, 2.5, True, "4", None)


def source_of(value: object) -> str:
    """``repr(value)``, with non-finite floats written so that they evaluate."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    return repr(value)


#: The registered codes whose constructors the fuzzer knows the rules of (replication and uncoded are not drawn).
FUZZED_CODES = ["bacc", "gcc", "lcc", "natural"]


def draw_make_code(rng: random.Random, seed: int) -> Case:
    name = rng.choice(FUZZED_CODES + ["GCC", "Natural", "gcc2", "", 3])
    k, n = rng.choice([1, 2, 4, 6]), rng.choice([1, 4, 8, 20])
    invalid: list[str] = []
    if not isinstance(name, str) or name.lower() not in FUZZED_CODES:
        invalid.append("unknown code")
    if rng.random() < 0.15:
        k = rng.choice(BAD_COUNTS)
        invalid.append("num_inputs")
    if rng.random() < 0.15:
        n = rng.choice(BAD_COUNTS)
        invalid.append("num_workers")
    if isinstance(k, int) and isinstance(n, int) and not isinstance(k, bool) and not isinstance(n, bool):
        if k > n >= 1 and k >= 1:
            invalid.append("num_inputs")
    options: dict[str, Any] = {}
    lname = name.lower() if isinstance(name, str) else ""
    if lname == "lcc":
        degree = rng.choice([1, 2, 0, -1, 1.5, None])
        if degree is not None:
            options["degree"] = degree
        if degree is None or isinstance(degree, float) or degree < 1:
            invalid.append("degree")
        elif isinstance(k, int) and isinstance(n, int) and not isinstance(k, bool) and (k - 1) * degree + 1 > n:
            invalid.append("degree")
        if rng.random() < 0.2:
            options["below_threshold"] = rng.choice(["interpolate", "bogus"])
            invalid += ["below_threshold"] if options["below_threshold"] == "bogus" else []
    if lname == "gcc" and rng.random() < 0.5:
        value = rng.choice(["adaptive", "gcv", "spacing", 0.0, 0.5, -1.0, float("nan"), float("inf"), "smooth", None])
        options["lambda_dec"] = value
        if not (value in ("adaptive", "gcv", "spacing") or (isinstance(value, float) and 0 <= value < math.inf)):
            invalid.append("lambda_dec")
    if lname in ("gcc", "natural") and rng.random() < 0.2:
        value = rng.choice([0.0, 1e-3, -0.5, float("nan")])
        options["lambda_enc"] = value
        invalid += [] if 0 <= value < math.inf else ["lambda_enc"]
    for option, good, bad in (
        ("check", [True, False], ["yes", 1, None]),
        ("nonfinite", ["error", "straggle"], ["ignore", None]),
        ("backend", ["auto", "torch"], ["cuda", None]),
        ("alpha", ["chebyshev1", "equispaced"], ["gauss", "reversed", "short"]),
        ("beta", ["chebyshev2", "equispaced"], ["gauss", "reversed", "short"]),
    ):
        if rng.random() < 0.2:
            value = rng.choice(good + bad)
            if any(value is b or (type(value) is type(b) and value == b) for b in bad):  # 1 == True
                invalid.append(option)
            if value == "reversed":
                count = k if option == "alpha" else n
                valid_count = isinstance(count, int) and not isinstance(count, bool) and count >= 2
                value = f"torch.linspace(1, -1, {count if valid_count else 3})"
            elif value == "short":
                value = "[0.0]"
            else:
                value = source_of(value)
            options[option] = value
    if lname == "natural" and "lambda_dec" in options:
        options.pop("lambda_dec")
    args = "".join(
        f", {key}={value if key in ('alpha', 'beta', 'check', 'nonfinite', 'backend') else source_of(value)}"
        for key, value in options.items()
    )
    call = [f"code = torchgcc.make_code({name!r}, num_inputs={source_of(k)}, num_workers={source_of(n)}{args})"]
    if n == 1 and not isinstance(n, bool) and options.get("beta", "'chebyshev2'") == "'chebyshev2'":
        invalid.append("num_workers")  # chebyshev2 (the default worker points) needs two
    for option, count in (("alpha", k), ("beta", n)):
        if options.get(option) == "[0.0]" and count == 1 and not isinstance(count, bool):
            invalid.remove(option)

    def oracle(ns: dict) -> Optional[str]:
        code = ns["code"]
        if code.encoder.matrix.shape != (code.num_workers, code.num_inputs):
            return f"encoder matrix shape {tuple(code.encoder.matrix.shape)}"
        if not torch.isfinite(code.encoder.matrix).all():
            return "non-finite encoder matrix"
        rows = code.encoder.matrix.sum(-1)
        if (rows - 1).abs().max() > 64 * code.num_inputs * 2.2e-16 * code.encoder.matrix.abs().sum(-1).max():
            return "the encoder does not reproduce constants (rows do not sum to 1)"
        return None

    return Case("make_code", [], call, invalid, oracle)


# --- CodedModule ---------------------------------------------------------------------------------------------------

#: name -> (source of ``model``, container kind, leaves: [(float64 function of the coded inputs, majorant of its
#: absolute value given the coded inputs' absolute envelope)], error tokens if the output is invalid, elementwise:
#: works for any feature shape).
MODELS: dict[str, tuple[str, Optional[list], list[str]]] = {
    "identity": ("model = lambda t: t", [(lambda t: t, lambda a: a)], []),
    "affine": ("model = lambda t: 2.5 * t - 1.0", [(lambda t: 2.5 * t - 1.0, lambda a: 2.5 * a + 1.0)], []),
    "square": ("model = lambda t: t * t", [(lambda t: t * t, lambda a: a * a)], []),
    "cube": ("model = lambda t: t ** 3", [(lambda t: t**3, lambda a: a**3)], []),
    "dict": (
        'model = lambda t: {"a": t, "b": 3.0 * t}',
        [(lambda t: t, lambda a: a), (lambda t: 3 * t, lambda a: 3 * a)],
        [],
    ),
    "tuple": ("model = lambda t: (t * t, t)", [(lambda t: t * t, lambda a: a * a), (lambda t: t, lambda a: a)], []),
    "list": (
        "model = lambda t: [t.reshape(len(t), -1).sum(-1)]",
        [(lambda t: t.reshape(len(t), -1).sum(-1), lambda a: a.reshape(len(a), -1).sum(-1))],
        [],
    ),
    "scalar": ("model = lambda t: t.sum()", None, ["model output"]),
    "empty_tuple": ("model = lambda t: ()", None, ["model returned an empty"]),
    "int": ("model = lambda t: 3", None, ["model output", "got int"]),
    "none": ("model = lambda t: None", None, ["model output", "NoneType"]),
    "float": ("model = lambda t: 1.5", None, ["model output", "got float"]),
    "int_tensor": ("model = lambda t: (t > 0).long()", None, ["model output"]),
    "rows": ("model = lambda t: t[1:]", None, ["model output"]),
    "nested": ('model = lambda t: {"a": (t, t)}', None, ["model output"]),
    "mixed": ('model = lambda t: {"a": t, "n": 1}', None, ["model output"]),
}


#: The polynomial degree of each model of :data:`MODELS` (and ``"linear"``) in its input.
MODEL_DEGREES = {"identity": 1, "affine": 1, "square": 2, "cube": 3, "dict": 1, "tuple": 2, "list": 1, "linear": 1}


def draw_coded_module(rng: random.Random, seed: int) -> Case:
    source, name = draw_code(rng)
    ns: dict[str, Any] = {"torch": torch, "torchgcc": torchgcc}
    exec(source, ns)
    code = ns["code"]
    k, n = code.num_inputs, code.num_workers
    groups = rng.choice([1, 2, 4])
    samples = groups * k - (rng.choice([0, 0, 1]) if k > 1 else 0)
    feat = draw_feat(rng)
    dtype = draw_dtype(rng)
    valid_models = [name for name, (_, leaves, _) in MODELS.items() if leaves is not None] + ["linear"]
    model_name = rng.choice(list(MODELS) + 2 * valid_models + ["linear"] * 2)
    if name == "lcc" and rng.random() < 0.6:
        model_name = rng.choice(["identity", "square", "cube", "linear"])
    if model_name == "linear" and len(feat) != 1:
        feat = (rng.choice([1, 3, 5]),)
    setup = [source, f"torch.manual_seed({seed})"]
    invalid: list[str] = backend_tokens(code)
    if model_name == "linear":
        outputs = rng.choice([1, 2])
        setup.append(
            f"model = torch.nn.Linear({feat[0]}, {outputs}, dtype=torch.{'float64' if dtype == 'int64' else dtype})"
        )
        leaves = None
        tokens: list[str] = []
    else:
        model_source, leaves, tokens = MODELS[model_name]
        setup.append(model_source)
    x_kind = rng.choice(["ok"] * 20 + ["zero_dim", "empty", "list", "meta", "meta"])
    shape = (samples, *feat)
    if x_kind == "zero_dim":
        shape, invalid = (), ["x must be"]
    elif x_kind == "empty":
        shape, invalid = (0, *feat), ["x must be"]
    elif not feat:  # (M,): one sample's features or M scalars, ambiguous
        invalid = invalid + ["1-D x"]
    setup.append(data_source(rng, "x", repr(shape), dtype, seed, allow_special=rng.random() < 0.5)[0])
    if dtype == "int64":
        invalid += ["x must be floating point"]
    if x_kind == "list":
        setup.append("x = x.tolist()")
        invalid += ["x must be a torch.Tensor"]
    meta = x_kind == "meta"
    if meta:
        setup.append("x = x.to('meta')")
        invalid = without_backend(invalid)
        if model_name == "linear":
            setup.append("model = model.to('meta')")
    invalid += tokens
    options = []
    chunk = rng.choice([None] * 10 + [1, 3, 3, 1000, 0, -2, 2.0, 2.5, True, "4"])
    if chunk is not None:
        options.append(f"chunk_size={chunk!r}")
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            invalid += ["chunk_size"]
    straggler_kind = rng.choice(["none"] * 3 + ["fixed"] * 2 + ["bernoulli"] * 2 + ["mask"] * 4 + ["bad"])
    stragglers = "None"
    mask_arg = ""
    if straggler_kind == "fixed":
        stragglers = f"torchgcc.stragglers.FixedStragglers({rng.randrange(0, n)}, seed={seed})"
    elif straggler_kind == "bernoulli":
        stragglers = f"torchgcc.stragglers.BernoulliStragglers({rng.choice([0.1, 0.5])}, seed={seed})"
    elif straggler_kind == "bad":
        stragglers = rng.choice(["3", "'fixed'"])
        invalid += ["stragglers"]
    else:
        if straggler_kind == "mask":
            mask_line, mask_invalid = mask_source(rng, groups, n, seed + 1)
            setup.append(mask_line)
            mask_arg = ", mask=mask"
            if "device='meta'" in mask_line and not meta:
                mask_invalid += ["mask", "meta"]
            invalid += mask_invalid
    call = [
        f"coded = torchgcc.CodedModule(model, code, {stragglers}{''.join(', ' + o for o in options)})",
        f"out = coded(x{mask_arg})",
    ]
    check = code.decoder.check

    def oracle(ns: dict) -> Optional[str]:
        x, out, model, coded = ns["x"], ns.get("out"), ns["model"], ns["coded"]
        mask = coded.last_mask
        if meta:
            got = [out] if isinstance(out, torch.Tensor) else list(out.values() if isinstance(out, dict) else out)
            return None if got[0].is_meta and got[0].shape[0] == x.shape[0] else "meta input: wrong output"
        grouped = group_samples(x, k)
        actual = model(code.encoder(grouped).reshape((groups * n,) + tuple(x.shape[1:])))  # by hand, x's dtype
        actual = (
            [actual]
            if isinstance(actual, torch.Tensor)
            else list(actual.values() if isinstance(actual, dict) else actual)
        )
        flat_x = grouped.reshape(groups, k, -1).to(F64)
        coded64 = (code.encoder.matrix @ flat_x).reshape((groups * n,) + tuple(x.shape[1:]))
        envelope = (code.encoder.matrix.abs() @ flat_x.abs()).reshape(coded64.shape)
        if model_name == "linear":
            weight, bias = model.weight.detach().to(F64), model.bias.detach().to(F64)
            pairs, terms = [(coded64 @ weight.T + bias, envelope @ weight.abs().T + bias.abs())], n + k + feat[0]
        else:
            pairs, terms = [(fn(coded64), bound(envelope)) for fn, bound in leaves], 3 * (n + k)
        widths = [a.reshape(groups, n, -1).shape[-1] for a in actual]
        joined = torch.cat([a.reshape(groups, n, -1) for a in actual], -1)  # decoded together, in one call
        exact = torch.cat([v.reshape(groups, n, -1) for v, _ in pairs], -1)
        bounds = torch.cat([e.reshape(groups, n, -1) for _, e in pairs], -1)
        # the decoder as the forward left it: a calibrating default chose its smoothing there (validated against the
        # model's outputs: tests/test_coded_module.py checks that choice)
        ref, env, nan_ok = decode_reference(coded.code, joined, mask, check, exact, bounds)  # may raise Expected
        got = [out] if isinstance(out, torch.Tensor) else list(out.values() if isinstance(out, dict) else out)
        kind = {"dict": dict, "tuple": tuple, "list": list}.get(model_name, torch.Tensor)
        if not isinstance(out, kind) or len(got) != len(pairs):
            return f"output container {type(out).__name__} of {len(got)}, expected {kind.__name__} of {len(pairs)}"
        parts = list(zip(ref.split(widths, -1), env.split(widths, -1), nan_ok.expand(ref.shape).split(widths, -1)))
        for index, (leaf, (r, e, bad)) in enumerate(zip(got, parts)):
            shape = (groups, k) + tuple(actual[index].shape[1:])
            CHECKED["coded_module: closed form D f(E X)"] += 1
            problem = compare(
                leaf,
                *(ungroup_samples(t.reshape(shape), x.shape[0]) for t in (r, e)),
                terms,
                x.dtype,
                nan_ok=ungroup_samples(bad.reshape(shape), x.shape[0]),
                overflow_ok=not check,
            )
            if problem:
                return f"output leaf {index} vs the closed form D f(E X): {problem}"
        degree = MODEL_DEGREES.get(model_name)
        recovered = name == "lcc" and degree is not None and degree <= code.degree and not nan_ok.any()
        if recovered and (mask.sum(-1) >= code.threshold).all():  # LCC's promise: f(x) itself
            x64 = x.to(F64)
            truths = [x64 @ weight.T + bias] if model_name == "linear" else [fn(x64) for fn, _ in leaves]
            build = solve_terms(code, mask).repeat_interleave(k)[: x.shape[0]]
            for index, (leaf, truth, (_, e, _)) in enumerate(zip(got, truths, parts)):
                shape = (groups, k) + tuple(actual[index].shape[1:])
                size = ungroup_samples(e.reshape(shape), x.shape[0])
                CHECKED["coded_module: LCC recovers f(x)"] += 1
                problem = compare(leaf, truth, size, terms, x.dtype, build_terms=build)
                if problem:
                    return f"LCC did not recover f(x) (output leaf {index}) from {code.threshold}+ results: {problem}"
        return None

    return Case("coded_module", setup, call, invalid, oracle)


DRAWS: dict[str, Callable[[random.Random, int], Case]] = {
    "make_code": draw_make_code,
    "encoder": draw_encoder,
    "decoder": draw_decoder,
    "decode_matrix": draw_decode_matrix,
    "calibrate": draw_calibrate,
    "coded_module": draw_coded_module,
}
#: How often each entry point is drawn.
WEIGHTS = {"make_code": 1, "encoder": 1, "decoder": 3, "decode_matrix": 2, "calibrate": 1, "coded_module": 3}


def draw(seed: int, index: int) -> Case:
    """The ``index``-th call of the sequence seeded by ``seed`` (each call has its own generator)."""
    rng = random.Random(f"{seed}:{index}")
    entry = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
    return DRAWS[entry](rng, rng.randrange(2**31))


def fuzz(
    calls: int,
    seed: int,
    *,
    progress: bool = True,
    draw: Callable[[int, int], Case] = draw,
    entry_points: tuple[str, ...] = ENTRY_POINTS,
) -> dict[str, Any]:
    """Run the first ``calls`` draws of the sequence ``seed`` (of ``draw``: this module's, or the probes' of
    ``api_probes``) and count their outcomes by category and entry point, with examples."""
    counts = {category: 0 for category in CATEGORIES}
    by_entry = {entry: {category: 0 for category in CATEGORIES} for entry in entry_points}
    examples: dict[str, list] = {category: [] for category in CATEGORIES if category != "ok"}
    signatures: dict[str, dict[str, int]] = {category: {} for category in examples}
    warned: dict[str, int] = {}  # warnings raised during the calls, by entry point and message
    flags = {"clear_error_on_valid_call": 0, "clear_error_not_naming_the_argument": 0}
    CHECKED.clear()
    start = time.perf_counter()
    for index in range(calls):
        case = draw(seed, index)
        outcome = run_case(case)
        category = outcome["category"]
        if category == "clear_error" and not case.invalid and outcome.get("on_valid"):
            flags["clear_error_on_valid_call"] += 1
        if category == "clear_error" and outcome.get("named") is False:
            flags["clear_error_not_naming_the_argument"] += 1
        counts[category] += 1
        by_entry[case.entry][category] += 1
        for message in outcome.get("warnings", []):
            key = f"{case.entry}: {NUMBER.sub('#', message)[:160]}"
            warned[key] = warned.get(key, 0) + 1
        interesting = category in ("silent_wrong", "raw_error") or (
            category == "clear_error" and (outcome.get("on_valid") or outcome.get("named") is False)
        )
        if category != "ok" and interesting:
            signature = f"{case.entry}: {NUMBER.sub('#', outcome['error'])[:120]}"
            signatures[category][signature] = signatures[category].get(signature, 0) + 1
            if len(examples[category]) < MAX_EXAMPLES and signatures[category][signature] <= 2:  # varied examples
                examples[category].append(
                    {"index": index, "entry": case.entry, "invalid": case.invalid, **outcome, "snippet": case.snippet}
                )
        if progress and (index + 1) % 100 == 0:
            print(
                f"[fuzz_api] {index + 1}/{calls} calls, {time.perf_counter() - start:.0f}s: {counts}",
                file=sys.stderr,
                flush=True,
            )
    return {
        "counts": counts,
        "by_entry_point": by_entry,
        "flags": flags,
        "oracle_checks": dict(sorted(CHECKED.items())),
        "signatures": signatures,
        "warnings": warned,
        "examples": examples,
    }
