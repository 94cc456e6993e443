"""Probes of the API beside :mod:`api_fuzzer`: the classes of silent wrong answers and unclear errors that an
independent fuzzer found (issue 26), drawn at random with their own oracles, against independent references.

Each call is a :class:`api_fuzzer.Case` (a snippet that reproduces it, the tokens a clear error should contain for
an invalid draw, an oracle for a valid one) and is judged as the API fuzzer judges (``ok``, ``clear_error``,
``silent_wrong``, ``raw_error``). The entry points:

- ``points``: codes with point sets inside [-1, 1], beyond it, unsorted or not finite, on every backend; a valid
  draw's decode against Green and Silverman's spline in 40-digit arithmetic (GCC with a number, ``"spacing"`` and
  the adversarial lambda, all by hand), Berrut's formula or exact-rational Lagrange, within the bounds of
  tests/references.py; an invalid one must be refused naming the points;
- ``state_dict``: a code loading the state dict of a differently built one decodes as a code built with its own
  rule and the loaded points, or refuses (other K or N, another rule's buffers);
- ``chunks``: ``CodedModule`` with ``chunk_size`` and a model whose output's dict keys change order, or whose
  structure changes, between calls: equal to the unchunked result, or refused naming the chunk;
- ``threads``: concurrent calls on one decoder (per-call GCV, the default rule, Huber, spacing) equal sequential ones;
- ``trace``: ``torch.jit.trace`` of a decoder on one mask decodes others as the decoder does, or is refused;
- ``odd``: zero-size features in every dtype, numbers given as strings or NaN, 0-d and 1-D masks, copies after a
  decode of results that require grad, ``torch.jit.script``, a gradient code's ``decode`` of a non-sequence, and
  ``FixedStragglers(0, ...)`` on one worker.
"""

from __future__ import annotations

import copy
import math
import random
from typing import Callable, Optional

import numpy as np
import torch
from api_fuzzer import Case
from properties import decode_tolerance
from references import (
    berrut_error,
    berrut_reference,
    exact_lagrange,
    green_silverman_reference,
    spline_error,
)

import torchgcc

ENTRY_POINTS = ("points", "state_dict", "chunks", "threads", "trace", "odd")
WEIGHTS = {"points": 4, "state_dict": 2, "chunks": 2, "threads": 1, "trace": 2, "odd": 4}
EPS = 2.0**-53


def points_source(rng: random.Random, count: int, name: str) -> tuple[str, list[str]]:
    """Source of ``count`` points for ``name`` and the tokens of the error it must raise (none if valid)."""
    kind = rng.choice(["rule", "rule", "inside", "inside", "inside", "edges", "wide", "wide", "unsorted", "nan"])
    if kind == "rule":
        return repr(rng.choice(["chebyshev1", "chebyshev2", "equispaced"] if count > 1 else ["chebyshev1"])), []
    if kind == "edges" and count > 1:
        return repr(np.linspace(-1, 1, count).tolist()), []
    if kind in ("inside", "edges"):
        while True:
            values = sorted(rng.uniform(-1, 1) for _ in range(count))
            if count == 1 or min(np.diff(values)) >= 1e-2:
                return repr(values), []
    if kind == "wide":
        low = rng.uniform(-20, 0.5)
        values = np.linspace(low, low + rng.uniform(1.6, 20), count)  # one point may still fall inside
        outside = values.min() < -1 or values.max() > 1
        return repr(values.tolist()), [name, "[-1, 1]"] if outside else []
    if kind == "unsorted" and count > 1:
        return repr(np.linspace(1, -1, count).tolist()), [name, "increasing"]
    return f"[float('nan')] * {count}", [name, "finite"]


def random_mask(rng: random.Random, groups: int, workers: int, arrived: int) -> torch.Tensor:
    """``(groups, workers)`` masks with exactly ``arrived`` results per group."""
    rows = []
    for _ in range(groups):
        chosen = set(rng.sample(range(workers), arrived))
        rows.append([j in chosen for j in range(workers)])
    return torch.tensor(rows)


def mask_literal(mask: torch.Tensor) -> str:
    return f"torch.tensor({mask.tolist()})"


def compare_groups(out: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, reference_of) -> Optional[str]:
    """``out`` against ``D y`` per group, ``(D, bound on D's error) = reference_of(arrived)``, float64 data."""
    for group in range(y.shape[0]):
        arrived = mask[group].numpy()
        data = y[group].reshape(y.shape[1], -1).numpy()[arrived]
        matrix, error = reference_of(arrived)
        got = out[group].reshape(out.shape[1], -1).numpy()
        gap = np.abs(got - matrix @ data)
        bound = decode_tolerance(matrix, data, torch.float64, error)
        if not (gap <= bound).all():
            return f"group {group}: decode off the reference by {gap.max():.3g} (bound {bound[gap > bound].min():.3g})"
    return None


# --- points ----------------------------------------------------------------------------------------------------------


def draw_points(rng: random.Random, seed: int) -> Case:
    name = rng.choice(["gcc", "spacing", "natural", "bacc", "lcc", "robust"])
    workers = rng.randint(2, 12)
    inputs = rng.randint(1, min(workers, 4))
    alpha, alpha_bad = points_source(rng, inputs, "alpha")
    beta, beta_bad = points_source(rng, workers, "beta")
    backend = rng.choice(["torch", "numba", "auto"])
    lam = rng.choice([0.0, 1e-6, 1e-3, 0.1, 10.0])
    degree, q = 1, rng.randint(0, workers - 2)
    points = f"alpha={alpha}, beta={beta}"
    if name == "lcc":
        degree = rng.randint(1, max(1, (workers - 1) // max(inputs - 1, 1)))
        source = f"code = torchgcc.LCC({inputs}, {workers}, degree={degree}, {points})"
    elif name == "bacc":
        source = f"code = torchgcc.BACC({inputs}, {workers}, {points}, backend={backend!r})"
    elif name == "robust":
        source = f"code = torchgcc.codes.RobustGCC({inputs}, {workers}, q={q}, {points}, backend={backend!r})"
    else:
        rule = {"gcc": lam, "spacing": "spacing", "natural": 0.0}[name]
        source = f"code = torchgcc.GCC({inputs}, {workers}, lambda_dec={rule!r}, {points}, backend={backend!r})"
    invalid = alpha_bad or beta_bad
    threshold = (inputs - 1) * degree + 1
    fewest = {"bacc": 1, "lcc": threshold}.get(name, 2)
    groups = rng.randint(1, 3)
    mask = random_mask(rng, groups, workers, threshold if name == "lcc" else rng.randint(fewest, workers))
    setup = [
        f"y = torch.randn({groups}, {workers}, {rng.choice([1, 3])}, generator=torch.Generator().manual_seed({seed}), "
        "dtype=torch.float64)",
        f"mask = {mask_literal(mask)}",
    ]

    def oracle(ns: dict) -> Optional[str]:
        code, y, out = ns["code"], ns["y"], ns["out"]
        knots, points = code.beta.numpy(), code.alpha.numpy()

        def reference(arrived):
            n = int(arrived.sum())
            if name == "bacc":
                matrix = berrut_reference(knots[arrived], points)
                return matrix, berrut_error(knots[arrived], points, matrix)
            if name == "lcc":
                matrix = exact_lagrange(knots[arrived], points)
                return matrix, 4 * n * EPS * np.abs(matrix)
            smoothing = {
                "gcc": lam,
                "natural": 0.0,
                "spacing": (2 * 0.2 / max(n - 1, 1)) ** 4,  # the spacing rule by hand
                "robust": 0.1 * (q / max(n, 1)) ** 1.6,  # the seed's adversarial lambda by hand
            }[name]
            return green_silverman_reference(knots[arrived], points, smoothing), spline_error(
                knots[arrived], points, smoothing
            )

        return compare_groups(out, y, ns["mask"], reference)

    return Case("points", setup, [source, "out = code.decoder(y, mask)"], invalid, oracle)


# --- state dicts -----------------------------------------------------------------------------------------------------


def gcc_source(rng: random.Random, inputs: int, workers: int) -> tuple[str, str]:
    rule = rng.choice(["'adaptive'", "'gcv'", "'spacing'", "0.0", "0.001"])
    points = rng.choice(
        ["", ", beta='equispaced'", ", alpha='equispaced'", f", beta={np.linspace(-1, 1, workers).tolist()}"]
    )
    backend = rng.choice(["torch", "numba"])
    return f"torchgcc.GCC({inputs}, {workers}, lambda_dec={rule}{points}, backend={backend!r})", rule


def draw_state_dict(rng: random.Random, seed: int) -> Case:
    workers = rng.randint(4, 12)
    inputs = rng.randint(1, 4)
    target_inputs = rng.choice([inputs, inputs, min(inputs + 1, workers)])
    target_workers = rng.choice([workers, workers, workers, workers + 1])
    source, source_rule = gcc_source(rng, inputs, workers)
    target, target_rule = gcc_source(rng, target_inputs, target_workers)
    scored = ("'adaptive'", "'gcv'")
    invalid = []
    if (target_inputs, target_workers) != (inputs, workers) or (source_rule in scored) != (target_rule in scored):
        invalid = ["state_dict does not fit"]
    setup = [
        f"source = {source}",
        f"code = {target}",
        f"y = torch.randn(3, {workers}, 2, generator=torch.Generator().manual_seed({seed}), dtype=torch.float64)",
        f"mask = {mask_literal(random_mask(rng, 3, workers, rng.randint(2, workers)))}",
        "source.decoder(y, mask)",  # the adaptive rule calibrates: its choice is in the state dict
    ]
    call = ["code.load_state_dict(source.state_dict())", "out = code.decoder(y, mask)"]

    def oracle(ns: dict) -> Optional[str]:
        code, source, y, mask = ns["code"], ns["source"], ns["y"], ns["mask"]
        twin = torchgcc.GCC(
            inputs,
            workers,
            lambda_dec=code.lambda_dec,
            backend=code.decoder.backend,
            alpha=source.alpha,
            beta=source.beta,
        )
        twin.load_state_dict(source.state_dict())
        expected = twin.decoder(y, mask)
        if not torch.equal(ns["out"], expected):
            gap = (ns["out"] - expected).abs().max()
            return f"after loading, the decode differs from a code built with the loaded points by {gap:.3g}"
        if code.lambda_dec == source.lambda_dec and not torch.allclose(
            ns["out"], source.decoder(y, mask), rtol=1e-12, atol=1e-12
        ):
            return "the same code with the loaded state dict decodes otherwise than its source"
        return None

    return Case("state_dict", setup, call, invalid, oracle)


# --- CodedModule chunks ----------------------------------------------------------------------------------------------

#: A model whose output's structure is drawn per call: ``kind`` container of ``leaves`` tensors, a dict's keys in a
#: drawn order each call, and at call ``change`` one leaf fewer (``None``: never).
CHUNK_MODEL = """
class Model:
    def __init__(self, kind, leaves, seed, change):
        self.kind, self.leaves, self.change, self.calls = kind, leaves, change, 0
        self.rng = __import__('random').Random(seed)
    def __call__(self, t):
        count = self.leaves - 1 if self.calls == self.change else self.leaves
        self.calls += 1
        values = [((i + 1) * t).unsqueeze(-1).expand(*t.shape, i + 1) for i in range(count)]
        if self.kind == 'tensor':
            return values[0]
        if self.kind == 'dict':
            order = list(range(count))
            self.rng.shuffle(order)
            return {f'out{i}': values[i] for i in order}
        return tuple(values) if self.kind == 'tuple' else list(values)
""".strip().splitlines()


def draw_chunks(rng: random.Random, seed: int) -> Case:
    inputs, workers = rng.randint(1, 3), rng.randint(3, 8)
    kind = rng.choice(["tensor", "tuple", "list", "dict", "dict"])
    leaves = 1 if kind == "tensor" else rng.randint(1, 3)
    samples = rng.randint(1, 9)
    groups = -(-samples // inputs)
    chunk = rng.randint(1, groups * workers)
    calls = -(-groups * workers // chunk)
    change = rng.choice([None, None, None, rng.randrange(calls)]) if leaves > 1 and calls > 1 else None
    invalid = ["changed structure between chunks"] if change not in (None, 0) else []
    if change == 0:
        change = None  # the first chunk sets the structure
    setup = [
        *CHUNK_MODEL,
        f"code = torchgcc.GCC({inputs}, {workers}, lambda_dec='spacing')",
        f"x = torch.randn({samples}, 2, generator=torch.Generator().manual_seed({seed}), dtype=torch.float64)",
        f"mask = {mask_literal(random_mask(rng, groups, workers, rng.randint(2, workers)))}",
    ]
    call = [
        f"model = Model({kind!r}, {leaves}, {seed}, {change})",
        f"out = torchgcc.CodedModule(model, code, chunk_size={chunk})(x, mask=mask)",
    ]

    def oracle(ns: dict) -> Optional[str]:
        whole = torchgcc.CodedModule(ns["Model"](kind, leaves, seed + 1, None), ns["code"])(ns["x"], mask=ns["mask"])
        out = ns["out"]
        if type(out) is not type(whole):
            return f"chunked output is a {type(out).__name__}, unchunked a {type(whole).__name__}"
        pairs = (
            [(out, whole)]
            if kind == "tensor"
            else [(out[key], whole[key]) for key in whole]
            if kind == "dict"
            else list(zip(out, whole))
        )
        if (kind == "dict" and sorted(out) != sorted(whole)) or len(pairs) != (1 if kind == "tensor" else len(whole)):
            return "chunked output has other keys than the unchunked one"
        if not all(torch.equal(a, b) for a, b in pairs):
            return "chunked output differs from the unchunked one"
        return None

    return Case("chunks", setup, call, invalid, oracle)


# --- threads ---------------------------------------------------------------------------------------------------------

THREADS = """
import sys, threading
def run_concurrently(decoder, batches, threads=4):
    results, errors = [None] * len(batches), []
    def work(first):
        try:
            for index in range(first, len(batches), threads):
                results[index] = decoder(*batches[index])
        except Exception as error:
            errors.append(error)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    [w.start() for w in workers]
    [w.join() for w in workers]
    sys.setswitchinterval(interval)
    if errors:
        raise errors[0]
    return results
""".strip().splitlines()


def draw_threads(rng: random.Random, seed: int) -> Case:
    workers = rng.randint(4, 12)
    rule = rng.choice(["gcv", "adaptive", "huber", "spacing"])
    code = (
        f"torchgcc.codes.RobustGCC(2, {workers}, q=1, decoder='huber')"
        if rule == "huber"
        else f"torchgcc.GCC(2, {workers}, lambda_dec={rule!r})"
    )
    batches = []
    for index in range(12):
        groups = 1 + index % 4
        batches.append(
            f"(torch.randn({groups}, {workers}, 2, generator=torch.Generator().manual_seed({seed + index}), "
            f"dtype=torch.float64), {mask_literal(random_mask(rng, groups, workers, rng.randint(3, workers)))})"
        )
    setup = [*THREADS, f"code = {code}", f"batches = [{', '.join(batches)}]"]
    if rule == "adaptive":
        setup.append("code.decoder(*batches[0])")
    call = ["out = run_concurrently(code.decoder, batches)"]

    def oracle(ns: dict) -> Optional[str]:
        for index, (got, batch) in enumerate(zip(ns["out"], ns["batches"])):
            if not torch.equal(got, ns["code"].decoder(*batch)):
                return f"concurrent call {index} differs from the sequential one"
        return None

    return Case("threads", setup, call, [], oracle)


# --- jit.trace -------------------------------------------------------------------------------------------------------


def draw_trace(rng: random.Random, seed: int) -> Case:
    workers = rng.randint(4, 12)
    name = rng.choice(["spacing", "number", "gcv", "adaptive", "calibrated", "bacc", "lcc", "huber", "smoothing"])
    check = rng.random() < 0.3
    backend = rng.choice(["auto", "torch", "numba"]) if name not in ("lcc", "huber") else "auto"
    source = {
        "spacing": f"torchgcc.GCC(2, {workers}, lambda_dec='spacing', check={check}, backend={backend!r})",
        "number": f"torchgcc.GCC(2, {workers}, lambda_dec=1e-3, check={check}, backend={backend!r})",
        "gcv": f"torchgcc.GCC(2, {workers}, lambda_dec='gcv', check={check}, backend={backend!r})",
        "adaptive": f"torchgcc.GCC(2, {workers}, check={check}, backend={backend!r})",
        "calibrated": f"torchgcc.GCC(2, {workers}, check={check}, backend={backend!r})",
        "bacc": f"torchgcc.BACC(2, {workers}, check={check}, backend={backend!r})",
        "lcc": f"torchgcc.LCC(2, {workers}, degree=1, check={check})",
        "huber": f"torchgcc.codes.RobustGCC(2, {workers}, q=1, decoder='huber', check={check})",
        "smoothing": f"torchgcc.codes.RobustGCC(2, {workers}, q=1, check={check}, backend={backend!r})",
    }[name]
    setup = [
        "import warnings",
        "warnings.filterwarnings('ignore', category=torch.jit.TracerWarning)",
        f"code = {source}",
        f"y = torch.randn(3, {workers}, 2, generator=torch.Generator().manual_seed({seed}), dtype=torch.float64)",
        f"first = {mask_literal(random_mask(rng, 3, workers, rng.randint(3, workers)))}",
        f"other = {mask_literal(random_mask(rng, 3, workers, rng.randint(3, workers)))}",
    ]
    if name == "calibrated":
        setup.append("code.decoder(y, first)")
    invalid = (["check=False"] if check else []) + {"adaptive": ["calibrated"], "huber": ["cannot record"]}.get(
        name, []
    )
    call = ["traced = torch.jit.trace(code.decoder, (y, first), check_trace=False)", "out = traced(y, other)"]

    def oracle(ns: dict) -> Optional[str]:
        expected = copy.deepcopy(ns["code"]).decoder(ns["y"], ns["other"])  # a copy: the default rule calibrates
        if not torch.allclose(ns["out"], expected, rtol=1e-12, atol=1e-12, equal_nan=True):
            return f"the trace decodes another mask off by {(ns['out'] - expected).abs().max():.3g}"
        return None

    return Case("trace", setup, call, invalid, oracle)


# --- odd inputs ------------------------------------------------------------------------------------------------------

#: Constructors and the arguments the ``odd`` probe breaks: ``(source with {value}, argument name)``.
NUMBERS = [
    ("torchgcc.GCC(3, {value})", "num_workers"),
    ("torchgcc.GCC({value}, 8)", "num_inputs"),
    ("torchgcc.codes.RobustGCC(3, 8, q={value})", "q"),
    ("torchgcc.codes.RobustGCC({value}, -1, q=1)", "num_inputs"),
    ("torchgcc.LCC(2, 8, degree={value})", "degree"),
    ("torchgcc.stragglers.BernoulliStragglers({value})", "p"),
    ("torchgcc.stragglers.FixedStragglers({value})", "num_stragglers"),
    ("torchgcc.stragglers.LatencyStragglers(deadline={value})", "deadline"),
    ("torchgcc.stragglers.FixedStragglers(1).sample({value}, 4)", "num_groups"),
    ("torchgcc.GCC(2, 6, lambda_dec={value})", "lambda_dec"),
]
BAD_NUMBERS = ["'8'", "'0.1'", "float('nan')", "None", "[3]", "True", "-1", "2.5"]
ODD_KINDS = ["zero_features", "numbers", "mask_shape", "copies", "script", "gradient_code", "no_stragglers"]


def draw_odd(rng: random.Random, seed: int) -> Case:
    kind = rng.choice(ODD_KINDS)
    workers = rng.randint(3, 10)
    if kind == "zero_features":
        dtype = rng.choice(["float16", "bfloat16", "float32", "float64"])
        code = rng.choice(
            [
                f"torchgcc.GCC(2, {workers})",
                f"torchgcc.GCC(2, {workers}, lambda_dec='gcv')",
                f"torchgcc.BACC(2, {workers})",
                f"torchgcc.LCC(2, {workers}, degree=1)",
                f"torchgcc.codes.RobustGCC(2, {workers}, q=1, decoder={rng.choice(['huber', 'trim', 'smoothing'])!r})",
            ]
        )
        feat = rng.choice(["0", "3, 0", "0, 2"])
        side = rng.choice(["encoder", "decoder"])
        setup = [f"code = {code}", f"mask = torch.ones(2, {workers}, dtype=torch.bool)"]
        call = (
            [f"out = code.encoder(torch.zeros(2, 2, {feat}, dtype=torch.{dtype}))"]
            if side == "encoder"
            else [f"out = code.decoder(torch.zeros(2, {workers}, {feat}, dtype=torch.{dtype}), mask)"]
        )
        rows = workers if side == "encoder" else 2
        expected = (2, rows, *(int(v) for v in feat.split(", ")))

        def oracle(ns: dict) -> Optional[str]:
            out = ns["out"]
            if tuple(out.shape) != expected or out.dtype != getattr(torch, dtype):
                return f"zero-size features gave {tuple(out.shape)} {out.dtype}, expected {expected} {dtype}"
            if getattr(ns["code"].decoder, "calibrated", False):
                return "the default rule calibrated on results without values"
            return None

        return Case("odd", setup, call, [], oracle)
    if kind == "numbers":
        template, name = rng.choice(NUMBERS)
        value = rng.choice(BAD_NUMBERS)
        if name == "num_inputs" and "RobustGCC" in template:
            value = rng.choice(["float('nan')", "'3'", "None"])  # with N = -1: the error must name num_inputs
        valid = _number_is_valid(name, value, template)
        return Case("odd", [], [f"out = {template.format(value=value)}"], [] if valid else [name], None)
    if kind == "mask_shape":
        mask = rng.choice(
            ["torch.tensor(True)", f"torch.ones({workers}, dtype=torch.bool)", "torch.ones(2, 1, dtype=torch.bool)"]
        )
        setup = [f"code = torchgcc.GCC(2, {workers}, lambda_dec='spacing')"]
        return Case("odd", setup, [f"out = code.decoder.decode_matrix({mask})"], ["mask must have shape"], None)
    if kind == "copies":
        method = rng.choice(["huber", "trim", "smoothing"])
        setup = [
            f"code = torchgcc.codes.RobustGCC(2, {workers}, q=1, decoder={method!r})",
            f"y = torch.randn(2, {workers}, 3, generator=torch.Generator().manual_seed({seed}), dtype=torch.float64)",
            f"mask = torch.ones(2, {workers}, dtype=torch.bool)",
            "code.decoder(y.clone().requires_grad_(True), mask).sum().backward()",
        ]
        call = ["copied = copy.deepcopy(code)", "out = copied.decoder(y, mask)"]

        def oracle(ns: dict) -> Optional[str]:
            same = torch.equal(ns["out"], ns["code"].decoder(ns["y"], ns["mask"]))
            return None if same else "a copy decodes otherwise than the original"

        return Case("odd", setup, call, [], oracle)
    if kind == "script":
        code = rng.choice(
            [f"torchgcc.GCC(2, {workers})", f"torchgcc.BACC(2, {workers})", f"torchgcc.LCC(2, {workers}, degree=1)"]
        )
        setup = ["import warnings", "warnings.filterwarnings('ignore', category=FutureWarning)"]
        return Case("odd", setup, [f"out = torch.jit.script({code})"], ["torch.jit.script"], None)
    if kind == "gradient_code":
        arrived = rng.choice(["None", "3", "'01'", "1.5"])
        setup = [
            "from torchgcc.gradient_coding.codes import CyclicRepetitionCode",
            "code_ = CyclicRepetitionCode(4, 1)",
        ]
        return Case("odd", setup, [f"out = code_.decode({arrived})"], ["arrived", "worker indices"], None)
    placement = rng.choice(["random", "contiguous", "widest_gap"])
    groups = rng.randint(0, 3)
    call = [f"out = torchgcc.stragglers.FixedStragglers(0, {placement!r}).sample({groups}, {rng.randint(1, 3)})"]

    def all_arrive(ns: dict) -> Optional[str]:
        return None if ns["out"].all() else "FixedStragglers(0) left a worker out"

    return Case("odd", [], call, [], all_arrive)


def _number_is_valid(name: str, value: str, template: str) -> bool:
    """Whether ``value`` (source) is a valid ``name`` in ``template`` (an independent predicate)."""
    number = eval(value)  # noqa: S307 - our own literals
    if number is None:
        return name == "deadline"  # LatencyStragglers(deadline=None): no deadline, as documented
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
        return False
    integral = isinstance(number, int)
    if name == "num_workers":
        return integral and number >= 3
    if name == "num_inputs":
        return integral and 1 <= number <= (8 if "GCC(" in template and "Robust" not in template else -1)
    if name == "q":
        return integral and 0 <= number <= 7
    if name == "degree":
        return integral and 1 <= number <= 7
    if name == "p":
        return 0 <= number < 1
    if name in ("num_stragglers", "num_groups"):
        return integral and number >= 0
    if name == "deadline":
        return number > 0
    return number >= 0  # lambda_dec


DRAWS: dict[str, Callable[[random.Random, int], Case]] = {
    "points": draw_points,
    "state_dict": draw_state_dict,
    "chunks": draw_chunks,
    "threads": draw_threads,
    "trace": draw_trace,
    "odd": draw_odd,
}


def draw(seed: int, index: int) -> Case:
    """The ``index``-th probe of the sequence seeded by ``seed`` (each with its own generator)."""
    rng = random.Random(f"probes:{seed}:{index}")
    entry = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
    return DRAWS[entry](rng, rng.randrange(2**31))
