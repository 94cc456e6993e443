"""General Coded Computing (GCC; Moradi, Tahmasebi and Maddah-Ali): smoothing-spline encoder and decoder."""

from __future__ import annotations

import functools
import logging
import threading
import warnings
from types import ModuleType
from typing import Any, Callable, Optional, Sequence, Union

import torch

from torchgcc.call_site import user_stacklevel
from torchgcc.checks import check_integer
from torchgcc.codes.base import Code
from torchgcc.codes.maps import Decoder, Encoder
from torchgcc.functional.decoder_smoothing import (
    VALIDATION_DRAWS,
    VALIDATION_SEED,
    drawn_masks,
    informative_groups,
    pooled_gcv_ratio,
    validated_ratio,
)
from torchgcc.functional.gcv import gcv_scores
from torchgcc.functional.spline import padded_spline_matrices, smoothing_spline_matrix, spline_plan
from torchgcc.functional.survivors import Survivors
from torchgcc.tracing import graph_break

logger = logging.getLogger(__name__)

__all__ = [
    "BANDWIDTH_RATIO",
    "CalibrationWarning",
    "GCC",
    "GCVSplineDecoder",
    "GCV_POOL",
    "GCV_RATIOS",
    "LAMBDA_RULES",
    "SplineDecoder",
    "UNCALIBRATED_UNDER_COMPILE",
    "spacing_lambda",
]

#: The ``"spacing"`` rule smooths at this fraction of the mean spacing of the points it fits.
BANDWIDTH_RATIO = 0.2

#: Bandwidth ratios among which the GCV rules choose (:func:`spacing_lambda`; 0 is interpolation).
GCV_RATIOS = (0.0, 0.05, 0.07, 0.1, 0.14, 0.2, 0.28, 0.4, 0.57, 0.8, 1.13, 1.6, 2.26, 3.2, 4.5, 6.4)

#: Groups of a batch whose GCV scores the default rule pools (evenly spaced over the batch) ...
GCV_POOL = 16
#: ... and at most about this many results in all (fewer, larger groups carry as much information for the choice).
GCV_POOL_RESULTS = 1024

#: What to do with an uncalibrated default decoder under ``torch.compile`` or ``torch.jit.trace`` (the one wording:
#: the explanation ``fullgraph=True`` stops with, the error a trace raises).
UNCALIBRATED_UNDER_COMPILE = (
    "torchgcc: GCC's default decoder (lambda_dec='adaptive') is not calibrated yet: its first call chooses the "
    "smoothing from the results, which torch.compile (fullgraph=True) and torch.jit.trace cannot record. Call the "
    "decoder once eagerly (or decoder.calibrate(y, mask)) before compiling or tracing it, or use lambda_dec='spacing'"
)


class CalibrationWarning(UserWarning):
    """GCC's default decoder chose its smoothing from fewer groups of results than it pools (a noisy choice:
    docs/family.md measures it). Silence it with ``warnings.filterwarnings("ignore", category=CalibrationWarning)``
    where a small first batch is intended."""


#: Named decoder smoothing rules accepted by ``GCC(lambda_dec=...)`` besides explicit numbers.
LAMBDA_RULES = ("adaptive", "gcv", "spacing")

#: Serialises the first (calibrating) calls of the calibrating decoders: concurrent first calls on one decoder
#: calibrate it once, and every call decodes with that choice.
CALIBRATION_LOCK = threading.RLock()


def pooled_groups(num_workers: int, pool: int = GCV_POOL) -> int:
    """The groups of a batch whose GCV scores a pooled choice reads when the batch has them: ``pool`` (default
    :data:`GCV_POOL`), fewer when ``N = num_workers`` is large, at most about :data:`GCV_POOL_RESULTS` results in
    all and at least one group: ``min(pool, max(1, GCV_POOL_RESULTS // N))``."""
    return min(pool, max(1, GCV_POOL_RESULTS // num_workers))


def spacing_lambda(num_points: Union[int, torch.Tensor], bandwidth_ratio: Union[float, torch.Tensor] = BANDWIDTH_RATIO):
    """The smoothing of a fit to ``n = num_points`` results at bandwidth ratio ``r``: ``lambda = (2 r / (n - 1))^4``.

    A smoothing spline with parameter ``lambda`` averages data over a length scale of about ``lambda^(1/4)`` (its
    equivalent kernel); the rule puts that scale at ``r`` times the mean spacing ``2 / (n - 1)`` of the surviving
    worker points, so a fit to fewer, sparser results smooths more, and its bias, ``O(lambda) = O(h^4)``, shrinks
    faster than the ``O((S / N)^3)`` straggler error. ``n`` and ``r`` may be tensors (broadcast).
    """
    spacing: Union[float, torch.Tensor]
    if isinstance(num_points, torch.Tensor):
        spacing = 2.0 / (num_points.to(torch.float64) - 1).clamp(min=1)
    else:
        spacing = 2.0 / max(num_points - 1, 1)
    return (bandwidth_ratio * spacing) ** 4


class SplineDecoder(Decoder):
    """The cubic smoothing spline through the surviving ``(beta_n, y_n)``, evaluated at ``alpha``.

    ``lam`` fixes the smoothing; ``lam=None`` applies :func:`spacing_lambda` at ``bandwidth_ratio`` to each group's
    number of results. The matrices depend on the mask only and are built per call for the whole batch: by one
    kernel call (numba on CPU, Triton on CUDA; see :data:`~torchgcc.codes.maps.BACKENDS`), or on the torch path with
    the survivors compacted by one sort, each group's ``mu = n lam(n)`` read from a table (``mu_table`` ``(N + 1,)``,
    float64), and every group's system solved in one batched plan
    (:func:`~torchgcc.functional.spline.padded_spline_matrices`).
    """

    has_fused_kernel = True
    _tensor_tuples = ("layout", "plan")

    mu_table: torch.Tensor

    def __init__(
        self,
        alpha: torch.Tensor,
        beta: torch.Tensor,
        *,
        lam: Optional[float],
        bandwidth_ratio: Union[float, torch.Tensor] = BANDWIDTH_RATIO,
        **kwargs: Any,
    ) -> None:
        #: The :func:`~torchgcc.functional.spline.spline_plan` of this decoder's systems; the survivors are compacted
        #: into its ``plan.width`` knot slots (:attr:`layout_width`).
        self.plan = spline_plan(beta.shape[-1], beta.device)
        super().__init__(alpha, beta, **kwargs)
        self.lam, self.bandwidth_ratio = lam, bandwidth_ratio
        self.register_buffer("mu_table", torch.zeros(self.num_workers + 1, dtype=torch.float64), persistent=False)
        self.refresh_smoothing()

    @property
    def layout_width(self) -> int:  # type: ignore[override]
        return self.plan.width

    def lam_for(self, num_points: Union[int, torch.Tensor]) -> Union[float, torch.Tensor]:
        """The smoothing parameter of a fit to ``num_points`` results (an int, or a float64 tensor of counts)."""
        if self.lam is None:
            return spacing_lambda(num_points, self.bandwidth_ratio)
        if isinstance(num_points, torch.Tensor):
            return torch.full(num_points.shape, self.lam, dtype=torch.float64, device=num_points.device)
        return self.lam

    def refresh_smoothing(self) -> None:
        """Recompute ``mu_table`` from :meth:`lam_for` (after a change of the rule's parameters)."""
        counts = torch.arange(self.num_workers + 1, dtype=torch.float64, device=self.mu_table.device)
        self.mu_table.copy_(counts * self.lam_for(counts))  # float64 throughout: the table is the decode's lambda

    def fit_matrix(self, survivors: Survivors) -> torch.Tensor:
        return self.spline(survivors, self.mu_table.index_select(0, survivors.counts))

    def spline(self, survivors: Survivors, mu: torch.Tensor) -> torch.Tensor:
        """``(B, K, W)`` compacted matrices of the smoothing splines with ``mu = n lam`` ``(B,)`` through the
        survivors."""
        return padded_spline_matrices(survivors.knots, survivors.counts, self.alpha, mu, self.plan)

    def kernel_call(self, kernels: ModuleType) -> Callable[..., torch.Tensor]:
        return functools.partial(
            kernels.spline_rows, beta=self.beta, alpha=self.alpha, mu=self.mu_table, min_arrived=self.min_arrived
        )


class GCVSplineDecoder(SplineDecoder):
    """The smoothing spline whose bandwidth ratio generalized cross-validation chooses from the results.

    ``lam = spacing_lambda(n, r)`` for each group's ``n`` results, with ``r`` among ``ratios`` (0: interpolation)
    minimising the GCV score (:func:`torchgcc.functional.gcv.gcv_scores`, computed on normalised results, so the
    choice is invariant to their scale):

    - ``pool=None`` (``lambda_dec="gcv"``): every group its own ``r``, from its own score, every call;
    - ``pool=P``: one ``r`` per batch, half the minimiser of the mean score of ``min(B, P, max(1, 1024 // N))``
      groups evenly spaced over the batch (:func:`~torchgcc.functional.decoder_smoothing.pooled_gcv_ratio`: GCV
      predicts across a gap of two worker spacings, the decoder within one). A group's results alone (``n`` close to
      K values) are a noisy basis for the choice; the groups of a batch are coded the same way and share the model,
      so pooling them is a stabler estimate of the smoothing the model's outputs need;
    - ``pool=P, calibrate=True`` (``lambda_dec="adaptive"``, the default, ``P = 16``): that pooled choice made once,
      on the first batch decoded, and then kept (the ``ratio`` buffer, saved in the state dict): every later call is
      mask-only, as cheap as the ``"spacing"`` rule and capturable (no data-dependent branch). Like BatchNorm's
      statistics the choice belongs to the model it was made for: call :meth:`recalibrate` when the model changes
      materially (during training, say once an epoch), or :meth:`calibrate` on chosen results. A choice from fewer
      groups than the pool (:meth:`full_pool`) is noisy and warns (:class:`CalibrationWarning`).

    Only groups whose scores depend on ``lam`` count (at least four results, not on a line:
    :func:`~torchgcc.functional.decoder_smoothing.informative_groups`); a group (``pool=None``) or a pool without any
    interpolates (``r = 0``).

    Until calibrated (and always without ``calibrate``) the matrices depend on the results: :meth:`decode_matrix`
    raises ``TypeError`` and :meth:`matrices` takes the results. ``last_lambda`` ``(B,)`` and ``last_ratio`` report
    the choice of the last call that scored (whichever thread finished last); no call reads them.

    Concurrent calls are safe: scoring keeps its choice in local variables, and the first calls of a calibrating
    decoder are serialised by :data:`CALIBRATION_LOCK` (one of them calibrates, the others decode with its choice).
    Changing the decoder (:meth:`recalibrate`, :meth:`calibrate`, ``load_state_dict``) while other threads decode
    is not synchronised with them. Results without values (``(B, N, 0)``) decode to an empty estimate and never
    calibrate.
    """

    ratio: torch.Tensor
    ratios: torch.Tensor

    def __init__(
        self,
        alpha: torch.Tensor,
        beta: torch.Tensor,
        *,
        pool: Optional[int] = GCV_POOL,
        calibrate: bool = False,
        ratios: Sequence[float] = GCV_RATIOS,
        **kwargs: Any,
    ) -> None:
        if pool is not None:
            pool = check_integer("pool (groups scored together; None: every group its own)", pool, minimum=1)
        if calibrate and pool is None:
            raise ValueError("calibrate=True needs a pooled choice (pool=P): one ratio for every later batch")
        table = torch.as_tensor(ratios, dtype=torch.float64)
        if table.ndim != 1 or not len(table) or not (table >= 0).all() or not torch.isfinite(table).all():
            raise ValueError(f"ratios must be a non-empty list of finite bandwidth ratios >= 0, got {table.tolist()}")
        super().__init__(alpha, beta, lam=None, **kwargs)
        self.pool, self.calibrates = pool, calibrate
        self.register_buffer("ratios", table.sort().values)  # ascending: a step down is less smoothing
        self.register_buffer("ratio", torch.tensor(float("nan"), dtype=torch.float64))
        self.calibrated = False
        self.last_lambda: Optional[torch.Tensor] = None
        self.last_ratio: Optional[torch.Tensor] = None

    @property
    def depends_on_results(self) -> bool:  # type: ignore[override]
        return not self.calibrated

    def lam_for(self, num_points: Union[int, torch.Tensor]) -> Union[float, torch.Tensor]:
        """The calibrated smoothing of a fit to ``num_points`` results (NaN before calibration)."""
        return spacing_lambda(num_points, self.ratio)

    def refresh_smoothing(self) -> None:
        if "ratio" in self._buffers:  # not yet while the base class initialises
            super().refresh_smoothing()

    def _load_from_state_dict(self, *args, **kwargs) -> None:
        """A loaded finite ratio is a calibration: keep it (one read, at load time)."""
        super()._load_from_state_dict(*args, **kwargs)
        self.calibrated = self.calibrates and bool(torch.isfinite(self.ratio))
        self.refresh_smoothing()

    def calibrate(self, y: torch.Tensor, mask: torch.Tensor, reference: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Choose the ratio from results ``y`` ``(B, N, *out)`` under ``mask`` (pooled GCV) and keep it for every later
        call; returns it (a float64 0-d tensor). With ``reference`` ``(B, K, *out)``, the uncoded outputs of the same
        groups, the choice is validated against the decode error itself
        (:func:`~torchgcc.functional.decoder_smoothing.validated_ratio`: the candidate of ``ratios``, or GCV's
        choice, that decodes these groups best under their masks and under
        :data:`~torchgcc.functional.decoder_smoothing.VALIDATION_DRAWS` straggler sets drawn like each): then ``y``
        must hold every worker's result, those outside ``mask`` too (all of ``y`` must be finite)."""
        if not self.calibrates:
            raise TypeError("this decoder scores every call (calibrate=False); build it with calibrate=True")
        y, mask = self.check_inputs(y, mask)
        if y.is_meta:
            raise ValueError("calibrate needs results with values to choose from, got meta tensors (shapes only)")
        self._check_counts(mask)
        flat = y.reshape(y.shape[0], self.num_workers, -1)
        if flat.shape[-1] == 0:
            raise ValueError(f"calibrate needs results with values to choose from, got y of shape {tuple(y.shape)}")
        if not torch.isfinite(flat[mask]).all():
            raise ValueError("calibrate: non-finite result from an arrived worker; calibrate on finite results")
        outputs = None if reference is None else self._check_reference(reference, y)
        if outputs is not None and not torch.isfinite(flat).all():
            raise ValueError(
                "calibrate with reference= decodes every group under drawn straggler sets too, so y must hold every "
                "worker's result (the stragglers' too), finite; got a non-finite result outside mask"
            )
        with CALIBRATION_LOCK:
            return self._calibrate(flat, mask, outputs)

    def calibrate_validated(
        self,
        y: torch.Tensor,
        mask: torch.Tensor,
        outputs: Callable[[torch.Tensor], torch.Tensor],
        results: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
    ) -> bool:
        """The first call's calibration when the model is at hand (a :class:`torchgcc.CodedModule`'s first forward):
        :meth:`calibrate` on the groups of ``y`` ``(B, N, *out)`` that the pooled choice reads (:meth:`pooled_index`)
        and that have enough results under ``mask`` to decode, validated against ``outputs(index)``, the model's
        ``(G, K, *out)`` outputs on the samples of the groups ``index`` ``(G,)``, computed only for them. The
        validation reads every worker's result of those groups: ``results(index)`` ``(G, N, *out)`` when given (the
        stragglers' results computed for them), else ``y[index]`` (``y`` then holds every worker's result).

        Returns whether it calibrated. It does not, and reads nothing, for a decoder that does not calibrate
        (``pool=None``) or is calibrated already (another thread's first call); it does not (and the decoder's own first
        call then chooses by GCV alone) when no pooled group can be decoded, or when
        the results or the outputs are not all finite (a ``check=False`` decoder decodes those without a read; logged):
        a batch the decoder alone decodes is never refused here. ``y`` and ``mask`` go through the decoder's checks
        first."""
        with CALIBRATION_LOCK:
            if not self.calibrates or self.calibrated:
                return False
            y, mask = self.check_inputs(y, mask)
            index = self.pooled_index(len(mask), y.device)
            index = index[mask[index].sum(-1) >= self.min_arrived]  # check=False lets short groups through
            if not len(index):
                return False
            complete = y[index] if results is None else results(index).to(y.device)
            if complete.shape != (len(index),) + tuple(y.shape[1:]):
                raise ValueError(
                    f"results(index) must be every worker's results (G, N, *out) = "
                    f"{(len(index),) + tuple(y.shape[1:])} of the groups index, got {tuple(complete.shape)}"
                )
            reference = outputs(index).to(y.device)
            if not bool(torch.isfinite(reference).all() & torch.isfinite(complete).all()):
                logger.warning("non-finite results or outputs on the calibration groups: GCV's choice alone")
                return False
            self.calibrate(complete, mask[index], reference)
            return True

    def _check_reference(self, reference: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``reference`` as ``(B, K, d)``, after checking it is ``(B, K, *out)`` for results ``y`` ``(B, N, *out)``,
        finite and on ``y``'s device."""
        if not isinstance(reference, torch.Tensor) or not reference.is_floating_point():
            got = type(reference).__name__ if not isinstance(reference, torch.Tensor) else f"a {reference.dtype} tensor"
            raise TypeError(f"reference must be a floating-point torch.Tensor (B, K, *out), got {got}")
        expected = (y.shape[0], self.num_inputs) + tuple(y.shape[2:])
        if tuple(reference.shape) != expected:
            raise ValueError(
                f"reference must be the uncoded outputs (B, K, *out) = {expected} of the groups whose results y "
                f"{tuple(y.shape)} are, got {tuple(reference.shape)}"
            )
        if reference.device != y.device:
            raise ValueError(f"reference must be on y's device {y.device}, got {reference.device}")
        if not torch.isfinite(reference).all():
            raise ValueError("reference has non-finite values; calibrate against finite outputs")
        return reference.reshape(expected[:2] + (-1,))

    def _calibrate(
        self, flat: torch.Tensor, mask: torch.Tensor, reference: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        if torch.compiler.is_compiling():  # the choice reads the results once: no graph holds it
            raise RuntimeError(UNCALIBRATED_UNDER_COMPILE)
        full = self.full_pool()
        if len(mask) < full:
            warnings.warn(  # the user can fix it: a warning, not a log record (logging HOWTO)
                f"GCC's default decoder chooses its smoothing from {len(mask)} group(s) of results; it pools {full} "
                "when the batch has them, and a choice from fewer is noisy (docs/family.md measures it). Decode a "
                f"first batch of at least {full} groups, or call code.decoder.calibrate(y, mask) on that many "
                f"groups (through a CodedModule: coded.calibrate(x) or a first forward, on at least "
                f"{full * self.num_inputs} samples)",
                CalibrationWarning,
                stacklevel=user_stacklevel(),
            )
        survivors = self.survivors(mask)
        ratio, lam = self._choose(flat, mask, survivors)
        if reference is not None:
            ratio = self._validated(flat, mask, reference, ratio)
            lam = spacing_lambda(survivors.counts, ratio)
        self.last_ratio, self.last_lambda = ratio, lam
        self.ratio.copy_(ratio)
        self.refresh_smoothing()
        self.calibrated = True
        return self.ratio.clone()

    def _validated(
        self, flat: torch.Tensor, mask: torch.Tensor, reference: torch.Tensor, proposed: torch.Tensor
    ) -> torch.Tensor:
        """:func:`validated_ratio` of GCV's ``proposed`` ratio among :attr:`ratios`: every candidate decodes, in
        float64, each group of the ``(B, N, d)`` results ``flat`` (every worker's) under its ``(B, N)`` ``mask`` and
        under :data:`VALIDATION_DRAWS` drawn sets (:func:`drawn_masks`), scored against ``reference`` ``(B, K, d)``.

        The results and outputs are first divided by the power of two at their largest magnitude (the choice does not
        depend on their scale, and no squared error overflows), and where ``d > N + K`` each group's are reduced to
        ``N + K`` columns by an orthogonal transform of the feature axis (the R factor of their QR decomposition),
        which keeps every decode's squared error and bounds the work by the code's size, not the model's output
        size."""
        candidates = torch.cat([self.ratios, proposed.reshape(1).to(self.ratios)])
        joined = torch.cat([flat.detach().to(torch.float64), reference.detach().to(torch.float64)], dim=1)
        # to a largest magnitude in [1/2, 1) by a power of two (exact: every error scales alike, to the last bit)
        joined = torch.ldexp(joined, -torch.frexp(joined.abs().amax()).exponent)
        if joined.shape[-1] > joined.shape[1]:
            joined = torch.linalg.qr(joined.transpose(1, 2), mode="r").R.transpose(1, 2)
        sets = 1 + VALIDATION_DRAWS
        results = joined[:, : self.num_workers].repeat(sets, 1, 1)  # (sets B, N, d')
        outputs = joined[:, self.num_workers :].repeat(sets, 1, 1)  # (sets B, K, d')
        generator = torch.Generator().manual_seed(VALIDATION_SEED)
        masks = torch.cat([mask, drawn_masks(mask, VALIDATION_DRAWS, generator)])  # (sets B, N)
        every = masks.repeat(len(candidates), 1)  # candidate-major: candidate l's sets are rows l * len(masks) ...
        lam = spacing_lambda(every.sum(dim=-1), candidates.repeat_interleave(len(masks)))
        rows = self._per_group_matrices(every, lam, torch.float64)
        errors = torch.stack(  # (B, L): one product per candidate bounds the memory by one candidate's estimates
            [
                (matrices @ results - outputs).pow(2).sum(dim=(1, 2)).view(sets, len(mask)).sum(dim=0)
                for matrices in rows.view(len(candidates), len(masks), *rows.shape[1:])
            ],
            dim=1,
        )
        return validated_ratio(errors, candidates, len(candidates) - 1)

    def forward(self, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.calibrates and not self.calibrated:
            graph_break(UNCALIBRATED_UNDER_COMPILE)
            with CALIBRATION_LOCK:
                if not self.calibrated:  # still the first call (no other thread calibrated meanwhile)
                    return self._calibrating_forward(y, mask)
        return super().forward(y, mask)

    def _calibrating_forward(self, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The first call: it calibrates, and keeps the choice only if the call succeeds (a batch the checks reject
        must not set the smoothing of every later call)."""
        try:
            return super().forward(y, mask)
        except BaseException:
            self.recalibrate()
            raise

    def recalibrate(self) -> None:
        """Forget the calibrated ratio: the next call chooses again."""
        with CALIBRATION_LOCK:
            self.ratio.fill_(float("nan"))
            self.calibrated = False

    def check_traceable(self, check: Optional[bool] = None) -> None:
        if self.calibrates and not self.calibrated:
            raise ValueError(UNCALIBRATED_UNDER_COMPILE)
        super().check_traceable(check)

    def _matrices(self, flat: torch.Tensor, mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        if self.calibrated:
            return super()._matrices(flat, mask, dtype)
        if self.calibrates and flat.shape[-1] > 0:
            self._calibrate(flat, mask)
            return super()._matrices(flat, mask, dtype)
        survivors = self.survivors(mask)
        ratio, lam = self._choose(flat, mask, survivors)
        self.last_ratio, self.last_lambda = ratio, lam
        return self._per_group_matrices(mask, lam, dtype, survivors)

    def _per_group_matrices(
        self, mask: torch.Tensor, lam: torch.Tensor, dtype: torch.dtype, survivors: Optional[Survivors] = None
    ) -> torch.Tensor:
        """``(B, K, N)`` decode matrices of the ``(B, N)`` ``mask``, group ``b`` smoothed at ``lam[b]`` (float64
        ``(B,)``), in one call: the kernel's rows in ``dtype`` (a ``mu`` table per group, ``mu[b, n] = n lam_b``) or
        the torch path's, in float64 (``survivors``: the mask's, when the caller has them)."""
        kernels = self.kernels(mask.device)
        if kernels is not None:
            mu = torch.arange(self.num_workers + 1, device=mask.device) * lam.unsqueeze(-1)
            rows = kernels.spline_rows(mask.contiguous(), self.beta, self.alpha, mu, self.min_arrived, dtype)
            return rows.transpose(1, 2)
        survivors = self.survivors(mask) if survivors is None else survivors
        return self.scatter(self.spline(survivors, survivors.counts * lam), survivors)

    def full_pool(self) -> int:
        """:func:`pooled_groups` of this decoder; 1 for a per-group decoder (``pool=None``). A method, not a property:
        ``torch.jit.trace`` evaluates a module's properties."""
        return 1 if self.pool is None else pooled_groups(self.num_workers, self.pool)

    def pooled_index(self, num_groups: int, device: Optional[torch.device] = None) -> torch.Tensor:
        """``(min(num_groups, full_pool()),)`` int64: the groups of a batch of ``num_groups`` whose scores a pooled
        choice reads, evenly spaced over the batch (a function of the sizes only)."""
        pooled = min(num_groups, self.full_pool())
        return torch.linspace(0, num_groups - 1, pooled, device=device).round().long()

    def _choose(
        self, flat: torch.Tensor, mask: torch.Tensor, survivors: Survivors
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The ratio the GCV scores of the results choose (``(B,)`` with ``pool=None``, else 0-d) and each group's
        lambda ``(B,)``. Reads and writes no state of the decoder (concurrent calls are independent). The choice is
        not differentiated: the scores are computed from the results detached from autograd."""
        flat = flat.detach()
        if flat.shape[-1] == 0:  # no values: nothing to choose from (nor to decode)
            ratio = self.ratios.new_tensor(BANDWIDTH_RATIO)
            ratio = ratio.expand(len(mask)) if self.pool is None else ratio
            return ratio, spacing_lambda(survivors.counts, ratio)
        if self.pool is None:
            scored, picked = survivors, flat
        else:
            index = self.pooled_index(len(mask), mask.device)
            scored, picked = Survivors(*(field[index] for field in survivors)), flat[index]
        width = min(self.num_workers, scored.order.shape[-1])
        compacted = picked.gather(
            1, scored.order[:, :width].clamp(max=self.num_workers - 1).unsqueeze(-1).expand(-1, -1, picked.shape[-1])
        )
        candidates = spacing_lambda(scored.counts.unsqueeze(-1), self.ratios)  # (G, L)
        scores = gcv_scores(scored.knots[:, :width], scored.counts, compacted, scored.counts.unsqueeze(-1) * candidates)
        if self.pool is None:  # every group its own minimiser; interpolation where the scores cannot tell
            informative = informative_groups(scores)
            best = torch.where(informative.unsqueeze(-1), scores, 0.0).argmin(dim=-1)
            ratio = torch.where(informative, self.ratios.index_select(0, best), 0.0)
        else:
            ratio = pooled_gcv_ratio(scores, self.ratios)
        return ratio, spacing_lambda(survivors.counts, ratio)

    def extra_repr(self) -> str:
        return f"pool={self.pool}, calibrate={self.calibrates}, ratios={len(self.ratios)}"


class GCC(Code):
    """General Coded Computing with cubic smoothing splines (the optimum in the second-order Sobolev space).

    Encoder: the smoothing spline through ``(alpha_k, x_k)`` with ``lambda_enc``, evaluated at ``beta``.
    Decoder: the smoothing spline through the surviving ``(beta_n, y_n)`` with ``lambda_dec``, evaluated at ``alpha``.
    Both minimise ``(1/n) sum_i ||y_i - u(t_i)||^2 + lambda int_{-1}^{1} ||u''||^2`` (n = points fitted).
    Needs at least two arrived results.

    ``lambda_dec``: a number, or a rule of :data:`LAMBDA_RULES`:

    - ``"adaptive"`` (default): generalized cross-validation pooled over up to :data:`GCV_POOL` groups of the first
      batch decoded chooses one bandwidth ratio among :data:`GCV_RATIOS`, interpolation included, and the decoder
      takes half of it (GCV predicts across two worker spacings, the decoder within one:
      :mod:`torchgcc.functional.decoder_smoothing`), kept for every later batch (:class:`GCVSplineDecoder` with
      ``calibrate=True``; ``code.decoder.recalibrate()`` chooses again). A :class:`torchgcc.CodedModule` has the
      model and validates that first choice against the model's own outputs on the pooled groups' samples
      (``validate_calibration``);
    - ``"gcv"``: the same criterion per group, every call;
    - ``"spacing"``: :func:`spacing_lambda` at :data:`BANDWIDTH_RATIO`, a fixed rule of the mask only.

    ``lambda_enc = lambda_dec = 0`` is natural-spline GCC (the registered code ``"natural"``). ``lambda_enc``
    defaults to 0, so the encoder passes exactly through the inputs and ``f(u_e(alpha_k)) = f(x_k)`` (encoder
    smoothing adds a bias that does not shrink with N). ``options`` are those of :class:`Code`.
    """

    def __init__(
        self,
        num_inputs: int,
        num_workers: int,
        *,
        lambda_enc: float = 0.0,
        lambda_dec: Union[float, str] = "adaptive",
        **options: Any,
    ) -> None:
        super().__init__(num_inputs, num_workers, **options)
        _check_lambda("lambda_enc", lambda_enc)
        if lambda_dec not in LAMBDA_RULES:
            _check_lambda("lambda_dec", lambda_dec)
        self.lambda_enc = float(lambda_enc)
        self.lambda_dec = lambda_dec if lambda_dec in LAMBDA_RULES else float(lambda_dec)
        alpha, beta = self._points
        if num_inputs >= 2:
            self.encoder = Encoder(smoothing_spline_matrix(alpha, beta, self.lambda_enc))
        else:  # one input: the spline through one point is the constant
            self.encoder = Encoder(torch.ones(num_workers, 1, dtype=torch.float64))
        if self.lambda_dec == "adaptive":
            self.decoder = GCVSplineDecoder(
                alpha, beta, pool=GCV_POOL, calibrate=True, min_arrived=2, **self._decoder_options
            )
        elif self.lambda_dec == "gcv":
            self.decoder = GCVSplineDecoder(alpha, beta, pool=None, min_arrived=2, **self._decoder_options)
        else:
            lam = None if self.lambda_dec == "spacing" else float(self.lambda_dec)
            self.decoder = SplineDecoder(alpha, beta, lam=lam, min_arrived=2, **self._decoder_options)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, lambda_enc={self.lambda_enc:g}, lambda_dec={self.lambda_dec}"


def _check_lambda(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value < float("inf")):
        raise ValueError(
            f"{name} must be a finite number >= 0 (or one of {LAMBDA_RULES} for lambda_dec), got {value!r}"
        )
