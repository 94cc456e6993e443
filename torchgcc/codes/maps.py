"""The encoder and decoder modules shared by every code.

An encoder is a fixed linear map from the K inputs to the N coded inputs. A decoder maps the results of the workers
that arrived to estimates of the K outputs; its matrix depends on which workers arrived, so it is built per group
(float64, from the survivors compacted by :func:`torchgcc.functional.compact_survivors`: static shapes, no host
reads, the same launches for any batch) and applied in float32 to float16/bfloat16 results, in the results' own dtype
otherwise (see :func:`apply_linear`), the result cast to the results' dtype. The spline and Berrut decoders build
every group's matrix in one kernel call: a Triton launch on CUDA, a compiled numba kernel on CPU, each a registered
torch operator that ``torch.compile`` keeps in its graph (see :data:`BACKENDS`).
"""

from __future__ import annotations

import importlib.util
import math
from types import ModuleType
from typing import Callable, Optional

import torch
from torch import nn

from torchgcc.checks import check_arrived, check_mask, check_tensor
from torchgcc.functional.survivors import SurvivorLayout, Survivors, compact_survivors, survivor_layout
from torchgcc.points import check_points
from torchgcc.tracing import graph_break

__all__ = [
    "BACKENDS",
    "CHECK_UNDER_COMPILE",
    "NONFINITE_POLICIES",
    "Decoder",
    "Encoder",
    "apply_linear",
    "compute_dtype",
    "numba_available",
    "triton_available",
]

#: What a decoder does with a non-finite value from a worker whose result arrived.
NONFINITE_POLICIES = ("error", "straggle")

#: How a decoder builds its matrices: ``"torch"`` (batched torch operations, any device: the reference, and the
#: fallback where no kernel runs), ``"triton"`` (one kernel launch for every group of the batch, CUDA;
#: :mod:`torchgcc.functional.fused_decode`), ``"numba"`` (one compiled kernel call for every group, CPU;
#: :mod:`torchgcc.functional.numba_decode`) or ``"auto"``: for a decoder with kernels, triton for CUDA data and numba
#: for CPU data where the package is installed; torch otherwise. The kernels are registered torch operators: eager
#: calls, ``torch.compile`` (``fullgraph=True`` too) and CUDA-graph capture run the same kernel.
BACKENDS = ("auto", "torch", "triton", "numba")

#: Why a decoder with ``check=True`` cannot be one compiled graph (the explanation ``torch.compile(fullgraph=True)``
#: stops with; without ``fullgraph`` the check runs after a graph break).
CHECK_UNDER_COMPILE = (
    "torchgcc: check=True reads one flag back from the device after each decode, which ends the compiled graph; "
    "to compile with fullgraph=True, build the code with check=False (every mask must then have at least "
    "min_arrived results)"
)


_TRITON = importlib.util.find_spec("triton") is not None
_NUMBA = importlib.util.find_spec("numba") is not None


def triton_available() -> bool:
    """Whether the ``triton`` package can be imported (it is not imported here)."""
    return _TRITON


def numba_available() -> bool:
    """Whether the ``numba`` package can be imported (it is not imported here)."""
    return _NUMBA


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a code's float64 matrices are applied in for data of ``dtype``: float32 for float16 and bfloat16
    (whose 8 or 11 significant bits cannot hold decode weights of ~300 and the cancellation between them), the
    data's own dtype otherwise."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def apply_linear(matrix: torch.Tensor, flat: torch.Tensor, *, exact: bool = False) -> torch.Tensor:
    """``matrix @ flat`` in :func:`compute_dtype` (float64 with ``exact=True``), rounded once to ``flat``'s dtype.

    ``matrix`` ``(..., M, N)`` float64, ``flat`` ``(B, N, d)``; returns ``(B, M, d)`` in ``flat.dtype``. ``exact``
    is the fallback for an intermediate overflow: products of float32 results near 3e38 with weights above 1
    overflow float32 although the estimate (a weighted average) fits.
    """
    dtype = torch.float64 if exact else compute_dtype(flat.dtype)
    if matrix.dtype != dtype or matrix.device != flat.device:
        matrix = matrix.to(device=flat.device, dtype=dtype)
    data = flat if flat.dtype == dtype else flat.to(dtype)
    out = torch.bmm(matrix, data) if matrix.ndim == 3 and matrix.shape[0] == data.shape[0] else matrix @ data
    return out if out.dtype == flat.dtype else out.to(flat.dtype)


def _map_tensors(value, fn):
    """``value`` (a tensor, or a tuple or NamedTuple of tensors, nested) with ``fn`` applied to every tensor in it."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple):
        mapped = (_map_tensors(field, fn) for field in value)
        return type(value)(*mapped) if hasattr(value, "_fields") else tuple(mapped)
    return value


class _Float64Buffers(nn.Module):
    """Keeps float64 buffers (points, matrices) in float64 through ``.to(dtype)``, ``.half()`` and the like.

    Device moves apply as usual; casting a code along with a bf16 model must not round its points. The attributes
    named in ``_tensor_tuples`` (NamedTuples of index and constant tensors: survivor layouts, solve plans) follow the
    same moves.
    """

    _tensor_tuples: tuple[str, ...] = ()

    def __prepare_scriptable__(self):
        """``torch.jit.script`` calls this first: torchgcc's modules are Python (kernels, data-dependent checks), so
        refuse with what works instead."""
        raise TypeError(
            f"torch.jit.script cannot compile {type(self).__name__} (torchgcc's modules are Python code); use "
            "torch.compile, or torch.jit.trace of a code built with check=False"
        )

    def _apply(self, fn, recurse=True):
        def keep_float64(t: torch.Tensor) -> torch.Tensor:
            return t.to(fn(t).device) if t.dtype == torch.float64 else fn(t)

        for name in self._tensor_tuples:
            setattr(self, name, _map_tensors(getattr(self, name), keep_float64))
        return super()._apply(keep_float64, recurse)


#: Dtypes whose product in :func:`compute_dtype` can overflow although the exact result fits (float16 data, applied
#: in float32, cannot).
_MAY_OVERFLOW = (torch.float32, torch.bfloat16)


class Encoder(_Float64Buffers):
    """Linear encoder ``x~ = E x``: ``(B, K, *feat) -> (B, N, *feat)``.

    ``matrix`` is the ``(N, K)`` float64 map, applied by :func:`apply_linear` (float32 for float16/bfloat16 inputs)
    and the output cast to the input's dtype. For float32 and bfloat16 inputs (whose range the float32 product shares)
    a product can overflow although the codes fit: its partial sums reach ``L max|x|`` (``L`` the largest row sum of
    ``|E|``). Unless the inputs are known to be small enough, each group is scaled by a power of two that brings its
    largest input to [0.5, 1) before the product and back after it: exact, and no intermediate overflow for inputs
    near 3e38 whose codes fit, but three more passes over the data. On CPU in eager mode the encoder first looks:
    one pass over the inputs and one number read (free there), and the plain product runs where ``L max|x|`` is below
    ``2^127``. On other devices, where a read is a synchronisation, under ``torch.compile``, and under
    ``torch.jit.trace`` (a trace would keep its example input's branch for every input) it always scales and never
    reads back from the device.
    """

    matrix: torch.Tensor

    def __init__(self, matrix: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("matrix", matrix.detach().to(torch.float64))
        self._row_sum_of: Optional[tuple[torch.Tensor, tuple[int, int], float]] = None

    @property
    def num_inputs(self) -> int:
        return self.matrix.shape[1]

    @property
    def num_workers(self) -> int:
        return self.matrix.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = check_tensor(x, "encoder input x", "K", self.num_inputs, "feat")
        if x.numel() == 0:  # zero-size features: nothing to encode (and no largest value to scale by)
            return x.new_zeros((x.shape[0], self.num_workers) + x.shape[2:])
        flat = x.reshape(x.shape[0], self.num_inputs, -1)
        if flat.dtype in _MAY_OVERFLOW and not self._surely_fits(flat):
            largest = flat.detach().abs().amax(dim=(1, 2), keepdim=True).float()
            exponent = torch.frexp(torch.nan_to_num(largest, nan=1.0, posinf=1.0)).exponent
            coded = torch.ldexp(apply_linear(self.matrix, torch.ldexp(flat, -exponent)), exponent)
        else:
            coded = apply_linear(self.matrix, flat)
        return coded.reshape((x.shape[0], self.num_workers) + x.shape[2:])

    def _surely_fits(self, flat: torch.Tensor) -> bool:
        """Whether the plain float32 product of ``flat`` cannot overflow: ``L max|x| < 2^127`` (half the float32
        range: room for the rounding of the partial sums), decided by one read on CPU in eager mode; False elsewhere
        (a NaN or an Inf input is never sure either: the scaled product treats it as before), also under
        ``torch.jit.trace``, which would freeze the branch the example input took for every later input."""
        if flat.device.type != "cpu" or torch.compiler.is_compiling() or torch.jit.is_tracing() or flat.numel() == 0:
            return False
        low, high = torch.aminmax(flat.detach())
        largest = float(torch.maximum(-low, high))  # the one read; NaN where flat has a NaN
        return largest * self._row_sum() < 2.0**127  # False for NaN and Inf

    def _row_sum(self) -> float:
        """``L = max_n sum_k |E_nk|``, kept while the matrix is the same tensor on the same memory, not written to
        since (a new buffer, ``load_state_dict``'s copy and any in-place change compute it again)."""
        matrix = self.matrix
        cached = getattr(self, "_row_sum_of", None)  # None also in an encoder pickled before it existed
        if cached is None or cached[0] is not matrix or cached[1] != (matrix.data_ptr(), matrix._version):
            cached = self._row_sum_of = (
                matrix,
                (matrix.data_ptr(), matrix._version),
                float(matrix.abs().sum(1).amax()),
            )
        return cached[2]


class Decoder(_Float64Buffers):
    """Decoder ``(B, N, *out), mask (B, N) -> (B, K, *out)`` from the results of the workers that arrived.

    A mask-only decoder defines :meth:`fit_matrix`, its map from the compacted survivors to the K estimates; a decoder
    whose matrices depend on the results too (``depends_on_results``) overrides :meth:`matrices` instead.

    Args:
        alpha: ``(K,)`` regression points, where the estimates are evaluated.
        beta: ``(N,)`` worker points.
        min_arrived: the fewest arrived results this decoder accepts.
        nonfinite: ``"error"`` raises on a NaN/Inf result from a worker that arrived, naming group and worker;
            ``"straggle"`` treats such a worker as a straggler.
        backend: one of :data:`BACKENDS`. ``"triton"`` and ``"numba"`` need a decoder with kernels
            (``has_fused_kernel``: the spline decoders and Berrut).
        check: ``True`` validates every call with one read back from the device (a combined flag): too few arrived
            results raise ``ValueError``, a non-finite result from a worker that arrived raises too
            (``nonfinite="error"``), a NaN/Inf at a straggler position is kept out of the estimate and an
            intermediate overflow is recomputed in float64. ``False`` skips all of it and never synchronises with
            the host: masks must have at least ``min_arrived`` survivors, and a NaN/Inf anywhere in a group's
            results (also at a straggler position, unless ``nonfinite="straggle"``) makes that group's estimates NaN.

    ``mask`` is bool with True where the result arrived.
    """

    #: Whether :meth:`kernel_rows` is implemented (a Triton and a numba kernel for this decoder).
    has_fused_kernel = False

    #: Whether the matrices depend on the results too (then :meth:`decode_matrix` raises ``TypeError``; call
    #: :meth:`matrices` with the results).
    depends_on_results = False

    _tensor_tuples: tuple[str, ...] = ("layout",)

    alpha: torch.Tensor
    beta: torch.Tensor
    #: The sort keys that compact the survivors (:func:`~torchgcc.functional.survivors.survivor_layout`), in rows of
    #: ``N`` slots or, for decoders that need padding slots (the splines), more.
    layout: SurvivorLayout

    def __init__(
        self,
        alpha: torch.Tensor,
        beta: torch.Tensor,
        *,
        min_arrived: int,
        nonfinite: str = "error",
        backend: str = "auto",
        check: bool = True,
    ) -> None:
        super().__init__()
        if nonfinite not in NONFINITE_POLICIES:
            raise ValueError(f"nonfinite must be one of {NONFINITE_POLICIES}, got {nonfinite!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if backend in ("triton", "numba") and not self.has_fused_kernel:
            raise ValueError(f"backend={backend!r} is not available for {type(self).__name__}; use 'auto' or 'torch'")
        if not isinstance(check, bool):
            raise TypeError(f"check must be True or False, got {check!r}")
        if isinstance(min_arrived, bool) or not isinstance(min_arrived, int) or min_arrived < 1:
            raise ValueError(f"min_arrived must be a positive integer, got {min_arrived!r}")
        self.backend = backend
        self.check = check
        self.register_buffer("alpha", check_points(alpha.detach().to(torch.float64), "alpha"))
        self.register_buffer("beta", check_points(beta.detach().to(torch.float64), "beta"))
        self.min_arrived = min_arrived
        self.nonfinite = nonfinite
        # the sizes as plain attributes: read on every call, and a buffer's read goes through nn.Module.__getattr__
        # (loading a state dict cannot change them: a buffer of another shape is refused)
        self._sizes = (self.alpha.shape[0], self.beta.shape[0])
        self.refresh_layout()

    @property
    def num_inputs(self) -> int:
        return self._sizes[0]

    @property
    def num_workers(self) -> int:
        return self._sizes[1]

    #: Slots per row of :attr:`layout` (``None``: ``N``; the splines need padding slots).
    layout_width: Optional[int] = None

    def refresh_layout(self) -> None:
        """Derive :attr:`layout` from the worker points ``beta`` (at construction and after loading a state dict),
        and forget the bound kernel call (:meth:`_bound_kernel`)."""
        self.layout = survivor_layout(self.beta, self.layout_width)
        self._bound: Optional[tuple[tuple, Optional[Callable[..., torch.Tensor]]]] = None

    def _apply(self, fn, recurse=True):
        self._bound = None  # the bound call holds the buffers, which a move replaces
        return super()._apply(fn, recurse)

    def __getstate__(self):
        """Pickles and deep copies leave the bound kernel call out (bound again on first use)."""
        return {**super().__getstate__(), "_bound": None}

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors):
        """Loads the points only if they are valid (finite, increasing, on [-1, 1]), then derives from them what
        depends on them: the decoder decodes the loaded code, not the one it was built as."""
        for name in ("alpha", "beta"):
            points = state_dict.get(prefix + name)
            if isinstance(points, torch.Tensor) and not points.is_meta:  # meta tensors hold no values to check
                check_points(points.detach().to(torch.float64), prefix + name)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors)
        self.refresh_layout()

    def fit_matrix(self, survivors: Survivors) -> torch.Tensor:
        """``(B, K, W)`` float64 decode matrices in the survivors' compacted order (column ``j`` for the ``j``-th
        survivor, zero in the padding columns ``j >= counts``; ``W = layout.width``): the subclass's map."""
        raise NotImplementedError

    def kernel_call(self, kernels: ModuleType) -> Callable[..., torch.Tensor]:
        """The kernel of ``kernels`` (:mod:`torchgcc.functional.fused_decode` or
        :mod:`torchgcc.functional.numba_decode`: the same functions) with this decoder's points, tables and
        ``min_arrived`` bound: ``call(mask, dtype=dtype)`` is :meth:`kernel_rows`."""
        raise NotImplementedError(f"{type(self).__name__} has no kernel")

    def kernel_rows(self, mask: torch.Tensor, kernels: ModuleType, dtype: torch.dtype) -> torch.Tensor:
        """``(B, N, K)`` decode matrices, transposed, in ``dtype`` (solved in float64), of every row of a ``(B, N)``
        contiguous ``mask`` on the kernel's device from one call of a kernel of ``kernels`` (:meth:`kernel_call`);
        NaN in the groups of fewer than ``min_arrived`` survivors."""
        return self.kernel_call(kernels)(mask, dtype=dtype)

    def _bound_kernel(self, device: torch.device) -> Optional[Callable[..., torch.Tensor]]:
        """:meth:`kernel_call` for data on ``device`` (None: the torch path). Outside ``torch.compile`` and
        ``torch.jit.trace`` it is resolved once per device, backend and ``min_arrived`` and kept until the buffers
        move or are reloaded (:meth:`refresh_layout`): right after a bmm the Python layers between the call and the
        kernel cost about three times their isolated time (some 15 us at B = 8, N = 64), a tenth of a small decode."""
        if torch.compiler.is_compiling() or torch.jit.is_tracing():
            kernels = self.kernels(device)
            return None if kernels is None else self.kernel_call(kernels)
        key = (device, self.backend, self.min_arrived)
        bound = self._bound
        if bound is None or bound[0] != key:
            kernels = self.kernels(device)
            bound = self._bound = (key, None if kernels is None else self.kernel_call(kernels))
        return bound[1]

    def kernel_backend(self, device: torch.device) -> str:
        """The backend that builds the matrices for data on ``device``: ``"torch"``, ``"triton"`` or ``"numba"``
        (``backend`` resolved as :data:`BACKENDS` says; the torch path under ``torch.jit.trace``, the only one a trace
        records: a kernel's matrices would be frozen into it as constants)."""
        if torch.jit.is_tracing():
            return "torch"
        if self.backend != "auto":
            return self.backend
        if not self.has_fused_kernel:
            return "torch"
        if device.type == "cuda" and triton_available():
            return "triton"
        if device.type == "cpu" and numba_available():
            return "numba"
        return "torch"

    def kernels(self, device: torch.device) -> Optional[ModuleType]:
        """The kernel module for data on ``device``, or None for the torch path. Imported on first use (also while
        ``torch.compile`` traces: its tracer runs import statements)."""
        backend = self.kernel_backend(device)
        if backend == "numba":
            if device.type != "cpu":
                raise ValueError(f"backend='numba' runs on CPU tensors, got data on {device}; use 'auto' or 'torch'")
            from torchgcc.functional import numba_decode  # imports numba

            return numba_decode
        if backend == "triton":
            from torchgcc.functional import fused_decode  # imports triton

            if device.type != "cuda" and not fused_decode.interpreted():
                raise ValueError(
                    f"backend='triton' runs on CUDA tensors (or on CPU with TRITON_INTERPRET=1 set before import), "
                    f"got data on {device}; use 'auto' or 'torch'"
                )
            return fused_decode
        return None

    def warm_up(self) -> None:
        """Import and compile the kernel this decoder uses for data on its own device, so that no timed call pays
        for it (numba: about a second in a fresh process, a few more before its disk cache exists; triton: its
        compile; both dtypes the kernel writes). Reads no data and changes nothing (the default decoder stays
        uncalibrated); nothing to do on the torch path."""
        kernels = self.kernels(self.beta.device)
        if kernels is not None:
            mask = torch.ones(1, self.num_workers, dtype=torch.bool, device=self.beta.device)
            for dtype in (torch.float32, torch.float64):
                self.kernel_rows(mask, kernels, dtype)

    def survivors(self, mask: torch.Tensor) -> Survivors:
        """The compacted survivors of ``mask`` over the worker points, in the rows of :attr:`layout`."""
        return compact_survivors(mask, self.layout)

    def scatter(self, compacted: torch.Tensor, survivors: Survivors) -> torch.Tensor:
        """``(B, K, N)`` matrices in worker order from ``compacted`` ``(B, K, W)`` ones (``survivors.order`` is a
        permutation of the ``W`` slots: their padding columns, zero, land on the stragglers and the slots past N).
        The matrices of groups with fewer than ``min_arrived`` survivors are NaN, so that their estimates are too
        (and the check of the decoder's output catches them)."""
        batch = compacted.shape[0]
        index = survivors.order.view(batch, 1, -1).expand(compacted.shape)
        out = self.unusable_to_nan(
            compacted.new_empty(compacted.shape).scatter_(-1, index, compacted), survivors.counts
        )
        return out if out.shape[-1] == self.num_workers else out[..., : self.num_workers]

    def unusable_to_nan(self, matrices: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """``matrices`` ``(B, K, W)`` with the rows of groups of fewer than ``min_arrived`` survivors (``counts``
        ``(B,)``) set to NaN, in place."""
        return matrices.masked_fill_((counts < self.min_arrived).view(-1, 1, 1), float("nan"))

    def check_inputs(self, y: object, mask: object) -> tuple[torch.Tensor, torch.Tensor]:
        """``(y, mask)`` if ``y`` is a floating-point ``(B, N, *out)`` tensor and ``mask`` a ``(B, N)`` bool one (moved
        to ``y``'s device), else a one-line error naming the argument. Reads nothing from the device."""
        num_workers = self.num_workers
        y = check_tensor(y, "decoder results y", "N", num_workers, "out")
        mask = check_mask(mask, num_workers, y.shape[0])
        if mask.is_meta and not y.is_meta:
            raise ValueError(
                f"mask is a meta tensor (no values) but the results y are on {y.device}; pass the mask on y's device"
            )
        return y, (mask if mask.device == y.device else mask.to(y.device))

    def forward(self, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        y, mask = self.check_inputs(y, mask)
        if torch.jit.is_tracing():
            self.check_traceable()
        if y.is_meta:  # shape inference: nothing to compute
            return y.new_empty((y.shape[0], self.num_inputs) + y.shape[2:])
        flat = y if y.ndim == 3 else y.reshape(y.shape[0], self.num_workers, -1)
        if self.nonfinite == "straggle":
            mask = mask & torch.isfinite(flat).all(dim=-1)
        matrices = self._matrices(flat, mask, compute_dtype(flat.dtype))
        if self.nonfinite == "straggle":  # the non-finite results now treated as stragglers must not be read
            flat = torch.where(mask.unsqueeze(-1), flat, 0.0)
        out, flag = self._product(matrices, flat)
        if self.check:
            graph_break(CHECK_UNDER_COMPILE)
            if not self._all_good(mask, out, flag):  # the one read back from the device
                out = self._repair(flat, mask, matrices)
        return out if y.ndim == 3 else out.reshape((y.shape[0], self.num_inputs) + y.shape[2:])

    def check_traceable(self, check: Optional[bool] = None) -> None:
        """Raise ``ValueError`` if ``torch.jit.trace`` cannot record this decoder's calls for every mask: a trace
        freezes the branches a call takes, and a check (``check``, default the decoder's) branches on the data
        (subclasses add their own reasons)."""
        if self.check if check is None else check:
            raise ValueError(
                "torch.jit.trace would freeze the branch of check=True's read back (a mask with too few results "
                "would then pass unchecked); build the code with check=False to trace it"
            )

    def _product(self, matrices: torch.Tensor, flat: torch.Tensor) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """``(matrices @ flat, flag)``: the estimates by :func:`apply_linear` and, with ``check``, a one-element tensor
        that says whether all of them are finite (one pass over them; :meth:`_all_good` reads it). With the Triton
        backend and a float32 product, one kernel does both (:func:`torchgcc.functional.fused_decode.apply_rows`): an
        integer flag, the count of non-finite estimates.

        Elsewhere the flag is their sum, floating point: a NaN or an Inf among them makes it NaN or infinite. A sum of
        finite estimates that overflows (their total beyond the dtype's range) is infinite too: that call takes
        :meth:`_repair`'s path, which finds nothing wrong and returns the same estimates. A sum rather than
        ``aminmax``, slower on CPU for small outputs (``benchmarks/decode.py`` times the checked and the unchecked
        decode), except for float16 estimates, whose sum would overflow at 65504: ``(lo - lo) + (hi - hi)`` of their
        extremes instead (zero, or NaN where NaN reaches both or an Inf one)."""
        if (
            (flat.is_cuda or self.backend == "triton")  # cheap tests first: this runs on every call
            and compute_dtype(flat.dtype) == torch.float32
            and self.kernel_backend(flat.device) == "triton"
        ):
            from torchgcc.functional import fused_decode  # imports triton

            return fused_decode.apply_rows(matrices.to(flat.device), flat, self.check)
        out = apply_linear(matrices, flat)
        if not self.check or out.numel() == 0:
            return out, None
        values = out.detach() if out.requires_grad else out  # a check, not part of the graph (no_grad costs more)
        if out.dtype == torch.float16:
            low, high = torch.aminmax(values)
            return out, (low - low) + (high - high)  # x - x is 0 for finite x, NaN for NaN and +-Inf
        return out, torch.sum(values)

    def _all_good(self, mask: torch.Tensor, out: torch.Tensor, flag: Optional[torch.Tensor]) -> bool:
        """Whether every estimate is finite, from :meth:`_product`'s ``flag`` read back as one number (a finite float,
        a zero count; a group with too few results has NaN estimates); where there are no estimates, whether every
        group has enough results."""
        if out.numel() == 0:
            return bool((mask.sum(dim=-1) >= self.min_arrived).all())
        assert flag is not None  # _product makes one whenever there are estimates to check
        value = flag.item()
        return math.isfinite(value) if flag.is_floating_point() else value == 0

    def _repair(self, flat: torch.Tensor, mask: torch.Tensor, matrices: torch.Tensor) -> torch.Tensor:
        """The slow path after a failed check: raise for too few or non-finite arrived results, else keep NaN/Inf
        at straggler positions out of the product and recompute an overflow in float64."""
        self._check_counts(mask)
        bad = mask & ~torch.isfinite(flat).all(dim=-1)
        if bad.any():
            group, worker = (int(i) for i in bad.nonzero()[0])
            raise ValueError(
                f"non-finite result from worker {worker} in group {group} (and {int(bad.sum()) - 1} more); "
                "pass nonfinite='straggle' to treat such workers as stragglers"
            )
        flat = torch.where(mask.unsqueeze(-1), flat, 0.0)  # 0 * NaN is NaN: stragglers' values must not enter
        out = apply_linear(matrices, flat)
        if not torch.isfinite(out).all():  # an overflow on the way: recompute in float64, float64 matrices too
            out = apply_linear(self._matrices(flat, mask, torch.float64), flat, exact=True)
        return out

    def matrices(self, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``(B, K, N)`` float64 decode matrices for results ``y`` ``(B, N, *out)`` under ``mask`` (zero in straggler
        columns), validated as :meth:`forward` validates them (meta results: meta matrices, as :meth:`forward`)."""
        y, mask = self.check_inputs(y, mask)
        if y.is_meta:  # shape inference: nothing to compute
            return torch.empty(len(mask), self.num_inputs, self.num_workers, dtype=torch.float64, device="meta")
        flat = y if y.ndim == 3 else y.reshape(y.shape[0], self.num_workers, -1)
        return self._matrices(flat, mask, torch.float64)

    def _matrices(self, flat: torch.Tensor, mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """:meth:`matrices` of checked ``(B, N, d)`` results, in ``dtype`` where a kernel builds them (the product's
        dtype: no conversion pass), else float64; the base decoder ignores the results (its matrices depend on the
        mask only), data-adaptive decoders override this."""
        return self._mask_matrices(mask, dtype)

    def decode_matrix(self, mask: torch.Tensor, *, check: bool | None = None) -> torch.Tensor:
        """``(B, K, N)`` float64 decode matrices for a ``(B, N)`` bool mask, zero in the straggler columns.

        With ``check`` (default: the decoder's), a mask with fewer than ``min_arrived`` survivors in a group raises
        ``ValueError``, as the decoder does. Raises ``TypeError`` for a decoder whose matrices depend on the results
        (``depends_on_results``).
        """
        if self.depends_on_results:
            raise TypeError(
                f"{type(self).__name__}'s matrices depend on the results: call matrices(results, mask) or the decoder "
                "itself, or pick a mask-only rule (lambda_dec='spacing' or a number)"
            )
        mask = check_mask(mask, self.num_workers)
        if torch.jit.is_tracing():
            self.check_traceable(check)
        if mask.is_meta:  # shape inference: nothing to compute
            return torch.empty(len(mask), self.num_inputs, self.num_workers, dtype=torch.float64, device="meta")
        if self.check if check is None else check:
            self._check_counts(mask)
        return self._mask_matrices(mask, torch.float64)

    def _mask_matrices(self, mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """:meth:`decode_matrix` of a checked mask (NaN matrices for groups of too few survivors), on the decoder's
        device: the kernel's rows in ``dtype``, transposed (a view), or the torch path's float64 matrices."""
        if mask.device != self.beta.device:
            mask = mask.to(self.beta.device)
        call = self._bound_kernel(mask.device)
        if call is not None:
            return call(mask.contiguous(), dtype=dtype).transpose(1, 2)
        survivors = self.survivors(mask)
        return self.scatter(self.fit_matrix(survivors), survivors)

    def _check_counts(self, mask: torch.Tensor) -> None:
        check_arrived(mask, self.min_arrived)
