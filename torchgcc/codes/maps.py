"""The encoder and decoder modules shared by every code.

An encoder is a fixed linear map from the K inputs to the N coded inputs. A decoder maps the results of the workers
that arrived to estimates of the K outputs; its matrix depends on which workers arrived, so it is built per straggler
pattern (float64) and applied in float32 to float16/bfloat16 results, in the results' own dtype otherwise (see
:func:`apply_linear`), the result cast to the results' dtype: on the banded backend by the code's ``fit_matrix``
on the distinct masks, cached per mask; on the triton backend by the code's fused kernel, for every mask of the batch
in one launch (see :data:`BACKENDS`).
"""

from __future__ import annotations

import importlib.util
from collections import OrderedDict
from functools import lru_cache, wraps

import numpy as np
import torch
from torch import nn

__all__ = [
    "Encoder",
    "Decoder",
    "NONFINITE_POLICIES",
    "BACKENDS",
    "CACHE_BYTES",
    "triton_available",
    "apply_linear",
    "compute_dtype",
]

#: What a decoder does with a non-finite value from a worker whose result arrived.
NONFINITE_POLICIES = ("error", "straggle")

#: Default byte budget of a decoder's cache of per-mask matrices (256 MiB).
CACHE_BYTES = 256 * 2**20

#: How a decoder builds its matrices: ``"banded"`` (batched torch recurrences, deduplicated and cached per mask),
#: ``"triton"`` (one fused kernel launch for every mask of the batch, no cache) or ``"auto"`` (triton for CUDA data
#: when the decoder has a kernel and triton is installed, banded otherwise).
BACKENDS = ("auto", "banded", "triton")


def eager_under_compile(fn):
    """Run ``fn`` eagerly under ``torch.compile`` (a graph break, as ``torch.compiler.disable``), for code Dynamo cannot
    trace (host-side caches, numpy, kernel launches). Applied at call time, so importing torchgcc imports neither
    Dynamo nor triton."""

    @wraps(fn)
    def wrapper(*args, **kwargs):
        if torch.compiler.is_compiling():
            return torch.compiler.disable(fn)(*args, **kwargs)
        return fn(*args, **kwargs)

    return wrapper


@lru_cache(maxsize=None)
def triton_available() -> bool:
    """Whether the ``triton`` package can be imported (it is not imported here)."""
    return importlib.util.find_spec("triton") is not None


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
    return (matrix.to(device=flat.device, dtype=dtype) @ flat.to(dtype)).to(flat.dtype)


#: Dtypes whose product in :func:`compute_dtype` can overflow although the exact result fits (float16 data, applied
#: in float32, cannot; float64 results near 1e308 are out of scope).
_MAY_OVERFLOW = (torch.float32, torch.bfloat16)


def all_finite(values: torch.Tensor) -> torch.Tensor:
    """A 0-dim bool tensor, True iff every entry of ``values`` is finite (True for an empty tensor).

    One min/max reduction in the values' own dtype: NaN propagates to both and an Inf shows at an end, and unlike a
    sum it cannot overflow (a float64 sum of float32 values, also overflow-free, cost 2-4x the decode's
    batched product on the CPU).
    """
    if values.numel() == 0:
        return torch.ones((), dtype=torch.bool, device=values.device)
    low, high = torch.aminmax(values)
    return torch.isfinite(low) & torch.isfinite(high)


def check_tensor(value: object, name: str, shape: str) -> torch.Tensor:
    """``value`` if it is a floating-point tensor with a non-empty leading (batch) dimension, else a one-line error
    naming ``name`` and the fix (``shape`` describes the expected shape)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of shape {shape}, got {type(value).__name__}; "
            "convert it with torch.as_tensor(...)"
        )
    if not value.is_floating_point():
        raise TypeError(f"{name} must be floating point, got {value.dtype}; cast it with .float()")
    if value.ndim >= 1 and value.shape[0] == 0:
        raise ValueError(f"{name} is an empty batch (B = 0, shape {tuple(value.shape)}); pass at least one group")
    return value


class _Float64Buffers(nn.Module):
    """Keeps float64 buffers (points, matrices) in float64 through ``.to(dtype)``, ``.half()`` and the like.

    Device moves apply as usual; casting a code along with a bf16 model must not round its points.
    """

    def _apply(self, fn, recurse=True):
        def keep_float64(t: torch.Tensor) -> torch.Tensor:
            return t.to(fn(t).device) if t.dtype == torch.float64 else fn(t)

        return super()._apply(keep_float64, recurse)


class Encoder(_Float64Buffers):
    """Linear encoder ``x~ = E x``: ``(B, K, *feat) -> (B, N, *feat)``.

    ``matrix`` is the ``(N, K)`` float64 map, applied by :func:`apply_linear` (float32 for float16/bfloat16 inputs)
    and the output cast to the input's dtype. For float32 and bfloat16 inputs (whose range the float32 product shares)
    a non-finite output is recomputed in float64 (not under ``torch.compile``), so inputs near 3e38 whose codes fit do
    not overflow on the way; that check reads one flag back from the device per call, and ``check=False`` (the code's
    shared option, as for the :class:`Decoder`) skips it, so the encoder never synchronises with the host.
    """

    matrix: torch.Tensor

    def __init__(self, matrix: torch.Tensor, *, check: bool = True) -> None:
        super().__init__()
        self.register_buffer("matrix", matrix.detach().to(torch.float64))
        self.check = check

    @property
    def num_inputs(self) -> int:
        return self.matrix.shape[1]

    @property
    def num_workers(self) -> int:
        return self.matrix.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = check_tensor(x, "encoder input x", f"(B, K={self.num_inputs}, *feat)")
        if x.ndim < 2 or x.shape[1] != self.num_inputs:
            raise ValueError(f"encoder expects inputs of shape (B, K={self.num_inputs}, *feat), got {tuple(x.shape)}")
        flat = x.reshape(x.shape[0], self.num_inputs, -1)
        coded = apply_linear(self.matrix, flat)
        if self.check and flat.dtype in _MAY_OVERFLOW and not torch.compiler.is_compiling():
            if not all_finite(coded):
                coded = apply_linear(self.matrix, flat, exact=True)  # overflow on the way, or non-finite inputs
        return coded.reshape((x.shape[0], self.num_workers) + x.shape[2:])


class Decoder(_Float64Buffers):
    """Decoder ``(B, N, *out), mask (B, N) -> (B, K, *out)`` from the results of the workers that arrived.

    Subclasses define :meth:`fit_matrix`, the code's map from results at the surviving points to the K estimates.

    Args:
        alpha: ``(K,)`` regression points, where the estimates are evaluated.
        beta: ``(N,)`` worker points.
        min_arrived: the fewest arrived results this decoder accepts.
        nonfinite: ``"error"`` raises on a NaN/Inf result from a worker that arrived, naming group and worker;
            ``"straggle"`` treats such a worker as a straggler.
        cache_size: how many per-mask decode matrices to keep (least recently used are evicted; 0 disables).
        cache_bytes: the most bytes the cached matrices may hold together (default :data:`CACHE_BYTES`, 256 MiB;
            least recently used are evicted past either bound). The cache is not pickled or deep-copied.
        backend: one of :data:`BACKENDS`. ``"triton"`` needs a decoder with a fused kernel
            (``has_fused_kernel``: the spline decoders with a fixed lambda or the spacing rule, and Berrut).
        check: ``True`` validates every call: too few arrived results raise ``ValueError``, and so does a
            non-finite result from a worker that arrived (``nonfinite="error"``); this reads one flag back from the
            device per call on the triton path. ``False`` skips both checks and never synchronises with the host:
            masks must have at least ``min_arrived`` survivors, and a NaN/Inf anywhere in a group's results (also
            at a straggler position, unless ``nonfinite="straggle"``) makes that group's estimates NaN.

    ``mask`` is bool with True where the result arrived. With ``check=True``, values at straggler positions are
    never read into the estimate, so NaN or Inf there cannot reach the output. On the banded backend distinct masks
    in a batch are solved together, grouped by their number of survivors, and cached; the triton backend builds
    one matrix per group in one launch, without deduplication (which would need the masks on the host).
    """

    #: Whether :meth:`fused_matrices` is implemented (a Triton kernel for this decoder).
    has_fused_kernel = False

    #: Whether the matrices depend on the results too (then :meth:`decode_matrix` raises ``TypeError``; call
    #: :meth:`matrices` with the results).
    depends_on_results = False

    alpha: torch.Tensor
    beta: torch.Tensor

    def __init__(
        self,
        alpha: torch.Tensor,
        beta: torch.Tensor,
        *,
        min_arrived: int,
        nonfinite: str = "error",
        cache_size: int = 4096,
        cache_bytes: int = CACHE_BYTES,
        backend: str = "auto",
        check: bool = True,
    ) -> None:
        super().__init__()
        if nonfinite not in NONFINITE_POLICIES:
            raise ValueError(f"nonfinite must be one of {NONFINITE_POLICIES}, got {nonfinite!r}")
        for name, value in (("cache_size", cache_size), ("cache_bytes", cache_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if backend == "triton" and not self.has_fused_kernel:
            raise ValueError(f"backend='triton' is not available for {type(self).__name__}; use 'auto' or 'banded'")
        if not isinstance(check, bool):
            raise TypeError(f"check must be True or False, got {check!r}")
        self.backend = backend
        self.check = check
        self.register_buffer("alpha", alpha.detach().to(torch.float64))
        self.register_buffer("beta", beta.detach().to(torch.float64))
        self.min_arrived = min_arrived
        self.nonfinite = nonfinite
        self.cache_size, self.cache_bytes = cache_size, cache_bytes
        self.clear_cache()

    @property
    def num_inputs(self) -> int:
        return self.alpha.shape[0]

    @property
    def num_workers(self) -> int:
        return self.beta.shape[0]

    def clear_cache(self) -> None:
        """Forget every cached decode matrix."""
        self._cache: OrderedDict[tuple, torch.Tensor] = OrderedDict()
        self._cached_bytes = 0

    @property
    def cached_bytes(self) -> int:
        """Bytes held by the cached matrices (at most ``cache_bytes``)."""
        return self._cached_bytes

    def __getstate__(self) -> dict:
        return dict(self.__dict__, _cache=OrderedDict(), _cached_bytes=0)  # pickles and deep copies drop the cache

    def _apply(self, fn, recurse=True):
        self.clear_cache()  # cached matrices live on the old device
        return super()._apply(fn, recurse)

    def fit_matrix(self, knots: torch.Tensor) -> torch.Tensor:
        """``(G, K, n)`` float64 decode matrices for ``G`` patterns of ``n`` surviving points ``(G, n)`` (ascending).

        Data-adaptive decoders may return more leading dimensions, ``(G, ..., n)``.
        """
        raise NotImplementedError

    def fused_matrices(self, mask: torch.Tensor) -> torch.Tensor:
        """``(B, K, N)`` float64 decode matrices of every row of ``mask`` from one fused kernel launch (no cache)."""
        raise NotImplementedError(f"{type(self).__name__} has no fused kernel")

    def uses_fused_kernel(self, device: torch.device) -> bool:
        """Whether matrices for data on ``device`` come from :meth:`fused_matrices` (see :data:`BACKENDS`)."""
        if self.backend == "auto":
            return self.has_fused_kernel and device.type == "cuda" and triton_available()
        return self.backend == "triton"

    def forward(self, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        mask = self._check(y, mask)
        flat = y.reshape(y.shape[0], self.num_workers, -1)
        fused = self.uses_fused_kernel(flat.device)
        if self.check and not fused:  # the banded path reads the masks on the host anyway
            self._check_counts(mask)
        if self.nonfinite == "straggle":
            mask = mask & torch.isfinite(flat).all(dim=-1)
            if self.check and not fused:
                self._check_counts(mask)
        matrices = self.matrices(flat, mask)
        if not self.check:
            if self.nonfinite == "straggle":  # zero the non-finite results now treated as stragglers
                flat = _zero_stragglers(flat, mask)
            return self._unflatten(self.apply_matrices(matrices, flat), y)
        out = self.apply_matrices(matrices, flat)
        # A NaN or Inf anywhere in a worker's column (straggler or not) reaches every row of the product, since
        # 0 * NaN and 0 * Inf are NaN; an intermediate overflow (float32 results near 3e38) may reach one row only,
        # so the whole output is checked: one min/max pass over (B, K, d), a few % of the product.
        finite = all_finite(out)
        if fused:  # one read-back for both checks
            short, finite = torch.stack([(mask.count_nonzero(dim=1) < self.min_arrived).any(), finite]).tolist()
            if short:
                self._check_counts(mask)
        if not finite:
            # Either a straggler slot holds NaN/Inf (0 * NaN is NaN) or an arrived result is non-finite.
            bad = mask & ~torch.isfinite(flat).all(dim=-1)
            if bad.any():
                group, worker = (int(i) for i in bad.nonzero()[0])
                raise ValueError(
                    f"non-finite result from worker {worker} in group {group} (and {int(bad.sum()) - 1} more); "
                    "pass nonfinite='straggle' to treat such workers as stragglers"
                )
            flat = _zero_stragglers(flat, mask)
            out = self.apply_matrices(matrices, flat)
            if not all_finite(out):  # an overflow on the way: recompute in float64
                out = apply_linear(matrices, flat, exact=True)
        return self._unflatten(out, y)

    def apply_matrices(self, matrices: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
        """``(B, K, N) @ (B, N, d) -> (B, K, d)`` by :func:`apply_linear`: in float32 for float16/bfloat16 results,
        in the results' dtype otherwise, rounded once to the results' dtype."""
        return apply_linear(matrices, flat)

    def _unflatten(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return out.reshape((y.shape[0], self.num_inputs) + y.shape[2:])

    def matrices(self, flat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``(B, K, N)`` float64 decode matrices for ``mask`` (zero in straggler columns).

        ``flat`` ``(B, N, d)`` are the results; the base decoder ignores them (its matrices depend on the mask
        only), data-adaptive decoders override this.
        """
        return self.decode_matrix(mask)

    @eager_under_compile
    def decode_matrix(self, mask: torch.Tensor) -> torch.Tensor:
        """``(B, K, N)`` float64 decode matrices for a ``(B, N)`` bool mask: one fused launch on the triton backend,
        else from the cache where possible. Raises ``TypeError`` for a decoder whose matrices depend on the results
        (``depends_on_results``)."""
        if self.depends_on_results:
            raise TypeError(
                f"{type(self).__name__}'s matrices depend on the results: call matrices(results, mask) "
                "or the decoder itself, or pick a mask-only rule (lambda_dec='spacing' or a number)"
            )
        if self.uses_fused_kernel(mask.device):
            return self.fused_matrices(mask)
        matrices, inverse = self.unique_matrices(mask)
        return matrices if len(matrices) == len(mask) else matrices[inverse]

    @eager_under_compile
    def unique_matrices(self, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Matrices of the distinct rows of ``mask`` ``(U, ...)``, in order of first appearance, and each group's
        row index ``(B,)``.

        Matrices come from the cache where possible; the missing ones are built by :meth:`solve` in one call.
        """
        # Deduplicate on packed bytes in numpy: cheaper than torch.unique(dim=0), and the bytes are the cache keys.
        # Distinct rows are kept in order of first appearance, so a batch of distinct masks needs no reordering.
        packed = np.packbits(mask.cpu().numpy(), axis=1)
        _, first, inverse = np.unique(
            packed.view(f"V{packed.shape[1]}").ravel(), return_index=True, return_inverse=True
        )
        order = np.argsort(first)
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        first = first[order]
        unique = mask[torch.from_numpy(first).to(mask.device)]
        inverse = torch.from_numpy(rank[inverse.reshape(-1)]).to(mask.device)
        width, device = packed.shape[1], str(mask.device)
        rows = packed[first].tobytes()
        keys = [(device, rows[i * width : (i + 1) * width]) for i in range(len(first))]
        cached = [i for i, key in enumerate(keys) if key in self._cache]
        missing = [i for i, key in enumerate(keys) if key not in self._cache]
        for i in cached:
            self._cache.move_to_end(keys[i])
        if not missing:
            matrices = torch.stack([self._cache[key] for key in keys])
        else:
            solved = self.solve(unique if not cached else unique[missing])
            fresh = dict(zip(missing, solved.unbind()))
            for i, matrix in fresh.items():
                self._cache[keys[i]] = matrix
                self._cached_bytes += matrix.numel() * matrix.element_size()
            if cached:
                solved = torch.stack([fresh[i] if i in fresh else self._cache[key] for i, key in enumerate(keys)])
            matrices = solved
        while self._cache and (len(self._cache) > self.cache_size or self._cached_bytes > self.cache_bytes):
            _, evicted = self._cache.popitem(last=False)
            self._cached_bytes -= evicted.numel() * evicted.element_size()
        return matrices, inverse

    def solve(self, masks: torch.Tensor) -> torch.Tensor:
        """Matrices for ``U`` masks, ``(U, ..., N)`` (zero in straggler columns); masks with equal survivor counts
        are solved together in one :meth:`fit_matrix` call."""
        counts = masks.count_nonzero(dim=1)
        distinct = counts.unique().tolist()
        out = None
        for count in distinct:
            rows = (counts == count).nonzero().squeeze(1)
            group = masks if len(distinct) == 1 else masks[rows]
            survivors = group.nonzero()[:, 1].view(len(rows), count)  # sorted ascending per row
            fitted = self.fit_matrix(self.beta[survivors])  # (G, ..., count)
            columns = survivors.view((len(rows),) + (1,) * (fitted.ndim - 2) + (count,)).expand(fitted.shape)
            block = fitted.new_zeros(fitted.shape[:-1] + (self.num_workers,)).scatter(-1, columns, fitted)
            if len(distinct) == 1:  # every mask has the same number of survivors (fixed S): no reassembly
                return block
            if out is None:
                out = block.new_zeros((len(masks),) + block.shape[1:])
            out[rows] = block
        return out

    def _check(self, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        y = check_tensor(y, "decoder results y", f"(B, N={self.num_workers}, *out)")
        if not isinstance(mask, torch.Tensor):
            raise TypeError(
                f"mask must be a bool torch.Tensor of shape (B, N) (True = result arrived), got "
                f"{type(mask).__name__}; convert it with torch.as_tensor(mask, dtype=torch.bool)"
            )
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be a bool tensor (True = result arrived), got {mask.dtype}; use mask.bool()")
        if y.ndim < 2 or y.shape[1] != self.num_workers:
            raise ValueError(f"decoder expects results of shape (B, N={self.num_workers}, *out), got {tuple(y.shape)}")
        if mask.shape != y.shape[:2]:
            raise ValueError(f"mask must have shape (B, N) = {tuple(y.shape[:2])}, got {tuple(mask.shape)}")
        return mask.to(y.device)

    def _check_counts(self, mask: torch.Tensor) -> None:
        counts = mask.count_nonzero(dim=1)
        short = (counts < self.min_arrived).nonzero()
        if len(short):
            group = int(short[0])
            raise ValueError(
                f"group {group} has {int(counts[group])} arrived results but this decoder needs at least "
                f"{self.min_arrived} ({len(short)} group(s) short)"
            )


def _zero_stragglers(flat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``flat`` ``(B, N, d)`` with the rows of the workers that did not arrive set to zero."""
    return torch.where(mask.unsqueeze(-1), flat, torch.zeros((), dtype=flat.dtype, device=flat.device))
