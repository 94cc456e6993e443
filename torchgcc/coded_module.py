"""``CodedModule``: run any model through a code, in this process with a straggler mask per step, or on an engine's
workers (local processes, Ray actors, the ranks of a torchrun job) decoding from the results that arrived."""

from __future__ import annotations

import collections
import dataclasses
import math
import warnings
from functools import wraps
from typing import Callable, Iterator, NamedTuple, Optional

import torch
from torch import nn

from torchgcc.call_site import user_stacklevel
from torchgcc.codes import Code
from torchgcc.codes.gcc import UNCALIBRATED_UNDER_COMPILE, GCVSplineDecoder
from torchgcc.model_output import ModelOutput, OutputSpec, flatten_output
from torchgcc.stragglers import StragglerModel
from torchgcc.tracing import graph_break
from torchgcc.workers import Round, WaitPolicy, Workers, run_round

__all__ = ["CodedBatch", "CodedModule", "ModelOutput", "group_samples", "ungroup_samples"]


#: Why a ``CodedModule`` that draws its masks cannot be one compiled graph (the explanation of the error that
#: ``torch.compile(fullgraph=True)`` stops with; without ``fullgraph`` the draw runs eagerly).
MASK_UNDER_COMPILE = (
    "torchgcc: CodedModule draws its straggler mask from the straggler model's generator, which torch.compile "
    "cannot trace; to compile with fullgraph=True pass mask= to the call (draw it outside the compiled call, e.g. "
    "coded.stragglers.sample(B, N))"
)


#: Why a ``CodedModule`` with a ``grouping`` and a code built with ``check=True`` cannot be one compiled graph: the
#: explanation of the error that ``torch.compile(fullgraph=True)`` stops with.
GROUPING_UNDER_COMPILE = (
    "torchgcc: with check=True, CodedModule reads back whether grouping(x) is a permutation, which ends the compiled "
    "graph; to compile with fullgraph=True build the code with check=False (a grouping that returns no permutation "
    "then gives NaN outputs)"
)


def eager_under_compile(reason: str):
    """A decorator: run the function eagerly under ``torch.compile`` (a graph break with ``reason``, then
    ``torch.compiler.disable``), for code Dynamo cannot trace (a straggler model's generator, the first call's
    calibration). Applied at call time, so importing torchgcc does not import Dynamo."""

    def decorator(fn):
        @wraps(fn)
        def wrapper(*args, **kwargs):
            if torch.compiler.is_compiling():
                graph_break(reason)
                return torch.compiler.disable(fn)(*args, **kwargs)
            return fn(*args, **kwargs)

        return wrapper

    return decorator


def _is_permutation(perm: torch.Tensor) -> torch.Tensor:
    """A 0-d bool tensor on ``perm``'s device: whether the ``(M,)`` integers ``perm`` hold each of ``0..M-1`` once
    (computed there, nothing read back)."""
    return (torch.sort(perm).values == torch.arange(perm.shape[0], device=perm.device)).all()


def group_samples(x: torch.Tensor, num_inputs: int) -> torch.Tensor:
    """``(M, *in) -> (ceil(M / K), K, *in)``; the last group is padded by repeating the last sample.

    Repeating a real sample keeps the padded coded inputs on the data's own path (zeros would be an outlier input).
    """
    if x.ndim < 1 or x.shape[0] == 0:
        raise ValueError(f"expected a non-empty batch of samples, got shape {tuple(x.shape)}")
    groups = math.ceil(x.shape[0] / num_inputs)
    pad = groups * num_inputs - x.shape[0]
    if pad:
        x = torch.cat([x, x[-1:].expand((pad,) + x.shape[1:])])
    return x.reshape((groups, num_inputs) + x.shape[1:])


def ungroup_samples(y: torch.Tensor, num_samples: int) -> torch.Tensor:
    """``(B, K, *out) -> (num_samples, *out)``, dropping the padding of :func:`group_samples`."""
    return y.reshape((-1,) + y.shape[2:])[:num_samples]


class CodedBatch(NamedTuple):
    """A batch of samples grouped and encoded by :meth:`CodedModule.encode`.

    Attributes:
        coded: ``(B, N, *in)`` the coded inputs, worker ``n``'s in ``coded[:, n]``.
        num_samples: M, the samples of the batch (the last group is padded).
        perm: ``(M,)`` the grouping's order of the samples, or None.
        inputs: ``(B, K, *in)`` the samples as grouped (in the grouping's order, the last group padded): what a
            validated calibration runs the model on.
    """

    coded: torch.Tensor
    num_samples: int
    perm: Optional[torch.Tensor]
    inputs: torch.Tensor


class CodedModule(nn.Module):
    """Coded computing around ``model``: ``forward(x)`` with ``x`` ``(M, *in)`` returns ``(M, *out)``.

    The batch is grouped by ``K = code.num_inputs`` (the last group padded), each group is encoded into
    ``N = code.num_workers`` coded inputs ``(B, N, *in)``, the model runs on them, and the decoder estimates the
    outputs of the original samples from the ``(B, N)`` mask of the results it may use. Where the model runs:

    - ``workers=None`` (default): in this process, once on all ``B * N`` coded inputs (in chunks of ``chunk_size``
      if given); the mask is ``mask=``, else drawn from ``stragglers``, else all True. Gradients flow through encoder
      and decoder into ``model``.
    - ``workers=`` an engine (:class:`torchgcc.workers.Workers`: :class:`~torchgcc.workers.ProcessWorkers`,
      :class:`~torchgcc.distributed.RayWorkers`, :class:`~torchgcc.distributed.ProcessGroupWorkers`,
      :class:`~torchgcc.workers.VirtualWorkers`), each of whose N workers holds the model: worker ``n`` computes
      ``coded[:, n]`` and the round ends as ``wait`` says (default ``WaitPolicy(num_stragglers=0)``: every live
      worker; ``WaitPolicy(num_stragglers=S)``: the fastest ``N - S``, or what arrived by its ``deadline_s``). The
      mask is the results that arrived; with ``mask=`` (or ``stragglers``) the round waits for those results and
      decodes from them (simulated stragglers). :attr:`last_round` keeps the arrival times. No gradients (the
      workers run the model under ``torch.inference_mode``).

    Both paths share everything after the results are in: ``noise``, ``attack`` and the decoder see the ``(B, N,
    *out)`` results of the workers that arrived (zeros elsewhere), so a run on workers equals the in-process
    module given the same mask.

    ``model`` may return a tensor ``(B * N, *out)`` or a tuple, list or dict of such tensors (one level), returned in
    the same container. All of them are decoded in ONE decoder call (their outputs side by side, per dtype), so the
    per-group work of the decoder is done once and a data-adaptive smoothing is chosen from all outputs together.
    A ``BatchNorm`` layer of ``model`` in train mode computes its statistics over the coded inputs, not the samples:
    ``CodedModule`` warns once (call ``model.eval()`` for inference, or train without coding).

    Options for the settings of the GCC family (all off by default), applied once per forward to all outputs:

    - ``noise``: ``noise(results, mask) -> results`` applied to the workers' results (:mod:`torchgcc.noise`);
    - ``attack``: ``attack(results, mask) -> results`` after the noise, corrupting arrived results as adversarial
      workers would (:mod:`torchgcc.attacks`); pair it with a robust code (:class:`torchgcc.codes.robust.RobustGCC`);
    - ``grouping``: ``grouping(x) -> permutation (M,)`` choosing which samples are coded together and in which order
      (:class:`torchgcc.manifold.ManifoldGrouping`); outputs come back in the caller's order. Anything but an int64
      or int32 tensor of shape ``(M,)`` is a ``TypeError`` or ``ValueError``; one that does not hold each of
      ``0..M-1`` once is a ``ValueError`` with the code's ``check=True`` (one more read back from the device) and
      gives NaN outputs with ``check=False``.

    GCC's default decoder (``lambda_dec="adaptive"``) chooses its smoothing once, on the first batch it decodes
    (:class:`~torchgcc.codes.gcc.GCVSplineDecoder`). With ``validate_calibration=True`` (the default) that first
    decode also runs the model, here, without gradients and in its current mode, on the samples and the coded inputs
    of the groups the choice reads (up to :data:`~torchgcc.codes.gcc.GCV_POOL` groups, ``K + N`` inputs each:
    :meth:`~torchgcc.codes.gcc.GCVSplineDecoder.pooled_index`), and chooses the smoothing that decodes those
    samples' outputs best under their straggler sets and under drawn ones
    (:func:`torchgcc.functional.decoder_smoothing.validated_ratio`; :meth:`calibrate` does the same on samples of
    your choice). That run applies ``noise`` and ``attack`` as if every worker had arrived and draws from their
    generators. ``validate_calibration=False`` leaves the choice to GCV on the results alone, as
    the decoder does without a model (docs/family.md measures both).

    With the code's ``check=False`` the in-process forward never reads back from the device (capturable in a CUDA
    graph and by ``torch.compile(fullgraph=True)`` with an explicit ``mask=``); with the default ``check=True`` it
    reads one flag (two with a ``grouping``).

    Attributes:
        last_mask: the ``(B, N)`` mask the decoder used in the last forward (or :meth:`decode`): on workers the
            results that arrived and were used; with the code's ``nonfinite="straggle"`` without the NaN/Inf
            results it dropped.
        last_round: on workers, the :class:`~torchgcc.workers.Round` of the last forward (arrival and compute
            times, the S it waited with; its ``mask`` is :attr:`last_mask`); None in process.
    """

    def __init__(
        self,
        model: nn.Module,
        code: Code,
        stragglers: Optional[StragglerModel] = None,
        *,
        workers: Optional[Workers] = None,
        wait: Optional[WaitPolicy] = None,
        chunk_size: Optional[int] = None,
        noise: Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = None,
        attack: Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = None,
        grouping: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
        validate_calibration: bool = True,
    ) -> None:
        super().__init__()
        if not callable(model):
            raise TypeError(f"model must be a torch.nn.Module (or callable), got {type(model).__name__}")
        if not isinstance(code, Code):
            raise TypeError(f"code must be a torchgcc.Code (e.g. torchgcc.GCC(K, N)), got {type(code).__name__}")
        if stragglers is not None and not isinstance(stragglers, StragglerModel):
            raise TypeError(
                f"stragglers must be a torchgcc.stragglers.StragglerModel (e.g. FixedStragglers(2)), got "
                f"{type(stragglers).__name__}"
            )
        if chunk_size is not None and (
            isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1
        ):
            raise ValueError(f"chunk_size must be a positive integer (coded inputs per model call), got {chunk_size!r}")
        if workers is not None and getattr(workers, "num_workers", None) != code.num_workers:
            raise ValueError(
                f"workers must be an engine of N = code.num_workers = {code.num_workers} workers (e.g. "
                f"torchgcc.workers.ProcessWorkers(model, {code.num_workers})), got {type(workers).__name__} with "
                f"num_workers={getattr(workers, 'num_workers', None)!r}"
            )
        for name, value, kind in (
            ("noise", noise, "a noise model (e.g. torchgcc.noise.GaussianNoise(0.01))"),
            ("attack", attack, "an attack (e.g. torchgcc.attacks.RandomAttack(1, 10.0))"),
            ("grouping", grouping, "a callable x -> permutation (e.g. torchgcc.manifold.ManifoldGrouping())"),
        ):
            if value is not None and not callable(value):
                raise TypeError(f"{name} must be {kind} or None, got {type(value).__name__}")
        if not isinstance(validate_calibration, bool):
            raise TypeError(f"validate_calibration must be True or False, got {type(validate_calibration).__name__}")
        if wait is not None and not isinstance(wait, WaitPolicy):
            raise TypeError(f"wait must be a torchgcc.workers.WaitPolicy, got {type(wait).__name__}")
        if wait is not None and workers is None:
            raise ValueError("wait applies to rounds on workers: pass workers=... too, or leave wait out")
        self.model = model
        self.code = code
        self.stragglers = stragglers
        self.workers = workers
        self.wait = WaitPolicy() if wait is None else wait
        self.chunk_size = chunk_size
        self.last_mask: Optional[torch.Tensor] = None
        self.last_round: Optional[Round] = None
        self.noise, self.attack, self.grouping = noise, attack, grouping
        self.validate_calibration = validate_calibration
        self._warned_batchnorm = False

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> ModelOutput:
        batch = self.encode(x)
        groups = batch.coded.shape[0]
        self._check_mask(mask, batch)
        if self.workers is None:
            self._warn_train_batchnorm()
            spec, leaves = self._results_here(batch.coded)
            results = spec.build(leaves)
            if mask is None:
                mask = self.draw_mask(groups, leaves[0].device)
        else:
            if mask is None and self.stragglers is not None:
                mask = self.draw_mask(groups)
            self.last_round = run_round(self.workers, batch.coded, code=self.code, wait=self.wait, required=mask)
            results, mask = self.last_round.results, self.last_round.mask
        outputs = self.decode(results, mask, batch)  # sets last_mask: the results it used
        used = self.last_mask
        if self.last_round is not None and self.workers is not None and used is not None and used is not mask:
            self.last_round = dataclasses.replace(self.last_round, mask=used)  # less the non-finite results
        return outputs

    def encode(self, x: torch.Tensor) -> CodedBatch:
        """Group ``x`` ``(M, *in)`` (in the ``grouping``'s order) and encode it: the :class:`CodedBatch`."""
        if not isinstance(x, torch.Tensor):
            raise TypeError(
                f"x must be a torch.Tensor of shape (M, *in), got {type(x).__name__}; "
                "convert it with torch.as_tensor(...)"
            )
        if x.ndim == 0 or x.shape[0] == 0:
            raise ValueError(f"x must be a non-empty batch of samples (M, *in), got shape {tuple(x.shape)}")
        if x.ndim == 1:
            raise ValueError(
                f"x must be a batch of samples (M, *in) with the samples' own dimensions after M, got a 1-D x of shape "
                f"{tuple(x.shape)}: pass x.unsqueeze(0) for one sample, or x.unsqueeze(-1) for {x.shape[0]} scalars"
            )
        if not x.is_floating_point():
            raise TypeError(
                f"x must be floating point (the encoder mixes samples), got {x.dtype}; cast it with .float()"
            )
        perm = None if self.grouping is None else self._grouping_order(x)
        if perm is not None:
            x = self._in_grouping_order(x, perm)
        grouped = group_samples(x, self.code.num_inputs)
        return CodedBatch(self.code.encoder(grouped), x.shape[0], perm, grouped)

    def _checks_grouping(self) -> bool:
        """Whether :meth:`encode` reads back that ``grouping(x)`` is a permutation: on workers (a round reads its
        results back anyway) and with the code's ``check=True``; else the forward never synchronises and a
        non-permutation gives NaN outputs (:meth:`decode`)."""
        return self.workers is not None or getattr(self.code.decoder, "check", True)

    def _grouping_order(self, x: torch.Tensor) -> torch.Tensor:
        """``grouping(x)``, checked: an int64 or int32 tensor of shape ``(M,)`` (else ``TypeError`` or ``ValueError``,
        reading nothing) holding each of ``0..M-1`` once (with :meth:`_checks_grouping`, one read back; else
        ``ValueError``)."""
        assert self.grouping is not None  # encode calls this only with a grouping
        perm = self.grouping(x)
        size = x.shape[0]
        what = f"grouping(x) must return a permutation of 0..M-1 (an int64 or int32 tensor of shape (M,) = ({size},))"
        if not isinstance(perm, torch.Tensor) or perm.dtype not in (torch.int64, torch.int32):
            got = f"a {perm.dtype} tensor" if isinstance(perm, torch.Tensor) else type(perm).__name__
            raise TypeError(f"{what}, got {got}")
        if perm.shape != (size,):
            raise ValueError(f"{what}, got shape {tuple(perm.shape)}")
        if perm.is_meta or not self._checks_grouping():  # meta: no values to check
            return perm
        graph_break(GROUPING_UNDER_COMPILE)
        if not bool(_is_permutation(perm)):  # the one read back
            counts = collections.Counter(perm.tolist())
            outside = [v for v in counts if not 0 <= v < size]
            twice = [v for v, count in counts.items() if count > 1]  # some index is, when none is outside
            detail = f"index {outside[0]} is outside 0..{size - 1}" if outside else f"index {twice[0]} is repeated"
            raise ValueError(f"{what}, got one where {detail}")
        return perm

    def _in_grouping_order(self, x: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
        """``x[perm]``; unchecked (:meth:`_checks_grouping`), with ``perm`` clamped to ``0..M-1`` (an index past the
        end would be a device-side assert on CUDA; :meth:`decode` makes those outputs NaN)."""
        return x[perm] if self._checks_grouping() else x[perm.clamp(0, x.shape[0] - 1)]

    def decode(self, results: ModelOutput, mask: torch.Tensor, batch: CodedBatch) -> ModelOutput:
        """The outputs ``(M, *out)`` of ``batch``'s samples (in the caller's order, in the results' container) from
        the workers' ``(B, N, *out)`` ``results`` under the ``(B, N)`` ``mask``: noise, attack and the decoder on
        every output at once (one decoder call per dtype).

        The results of workers outside ``mask`` are set to zero first when there is noise or an attack (neither may
        read them: they did not arrive). With the code's ``nonfinite="straggle"`` a worker with a NaN or Inf in any
        output (after noise and attack) is dropped from every output of its group; :attr:`last_mask` is set to the
        mask the decoder used (``mask`` itself otherwise)."""
        spec, leaves = flatten_output(results, batch.coded.shape[0])
        inputs = list(self._decoder_inputs(leaves, mask))
        mask = self.last_mask = self._used_mask(mask, [joined for _, _, joined in inputs])
        calibrated = self._validates_first_calibration(inputs[0][2]) and self._calibrate_validated(
            inputs[0][0], inputs[0][2], mask, batch
        )
        estimates: list[Optional[torch.Tensor]] = [None] * len(leaves)
        try:
            for members, widths, joined in inputs:
                parts = self.code.decoder(joined, mask).split(widths, 2)
                for i, part in zip(members, parts):
                    estimates[i] = part.reshape(part.shape[:2] + leaves[i].shape[2:])
        except BaseException:
            if calibrated:  # a batch the decoder rejects must not set the smoothing of every later call
                decoder = self.code.decoder
                assert isinstance(decoder, GCVSplineDecoder)
                decoder.recalibrate()
            raise
        outputs = [ungroup_samples(estimate, batch.num_samples) for estimate in estimates if estimate is not None]
        if batch.perm is not None:
            inverse = torch.argsort(batch.perm)
            outputs = [out[inverse] for out in outputs]
            if not self._checks_grouping() and not batch.perm.is_meta:  # on the device: NaN unless a permutation
                valid = _is_permutation(batch.perm).to(outputs[0].device)
                outputs = [torch.where(valid, out, math.nan) for out in outputs]
        return spec.build(outputs)

    def _validates_first_calibration(self, joined: torch.Tensor) -> bool:
        """Whether this decode is the first of a calibrating decoder (GCC's default) that ``validate_calibration``
        validates, on results ``joined`` with values (under ``torch.compile`` it runs eagerly)."""
        decoder = self.code.decoder
        return (
            self.validate_calibration
            and isinstance(decoder, GCVSplineDecoder)
            and decoder.calibrates
            and not decoder.calibrated
            and not joined.is_meta
            and joined.shape[-1] > 0
        )

    @eager_under_compile(UNCALIBRATED_UNDER_COMPILE)  # as the decoder's own first call: eagerly, also under compile
    def _calibrate_validated(
        self, members: list[int], joined: torch.Tensor, mask: torch.Tensor, batch: CodedBatch
    ) -> bool:
        """:meth:`~torchgcc.codes.gcc.GCVSplineDecoder.calibrate_validated` on the results ``joined`` ``(B, N, d)``
        (the first dtype's outputs ``members``), the model run here, once, without gradients, on the samples of the
        groups it asks for and on those groups' coded inputs (every worker's result, the stragglers' too, after
        ``noise`` and ``attack`` as if every worker had arrived). Returns whether it calibrated."""
        decoder = self.code.decoder
        assert isinstance(decoder, GCVSplineDecoder)  # _validates_first_calibration checked it

        def outputs(index: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                return self._uncoded_outputs(batch.inputs[index.to(batch.inputs.device)], members)

        def results(index: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                return self._every_result(batch.coded[index.to(batch.coded.device)])

        return decoder.calibrate_validated(joined, mask, outputs, results)

    def _every_result(self, coded: torch.Tensor) -> torch.Tensor:
        """``(G, N, d)``: the decoder's inputs of the first output dtype for the coded inputs ``coded`` ``(G, N, *in)``
        with every worker arrived (the model run here; ``noise`` and ``attack`` under an all-True mask)."""
        _, leaves = self._results_here(coded)
        every = torch.ones(coded.shape[:2], dtype=torch.bool, device=leaves[0].device)
        return next(self._decoder_inputs(leaves, every))[2]

    def _used_mask(self, mask: torch.Tensor, joined: list[torch.Tensor]) -> torch.Tensor:
        """``mask`` less the results a ``nonfinite="straggle"`` decoder drops: those with a NaN or Inf in any of the
        ``(B, N, d)`` decoder inputs ``joined`` (one per dtype), on the first one's device, computed there. ``mask``
        itself for any other decoder."""
        decoder = self.code.decoder
        if getattr(decoder, "nonfinite", None) != "straggle":
            return mask
        used = mask
        for part in joined:
            part, used = decoder.check_inputs(part, used)  # the decoder's own checks: one error for a bad mask
            used = used & torch.isfinite(part).all(dim=-1)
        return used

    def _results_here(self, coded: torch.Tensor) -> tuple[OutputSpec, list[torch.Tensor]]:
        """The model's results on the coded inputs ``coded`` ``(B, N, *in)``, run in this process (:meth:`run_model`):
        the model's container and its ``(B, N, *out)`` tensors."""
        groups, workers = coded.shape[:2]
        output = self.run_model(coded.reshape((groups * workers,) + coded.shape[2:]))
        spec, leaves = flatten_output(output, groups * workers)
        return spec, [leaf.reshape((groups, workers) + leaf.shape[1:]) for leaf in leaves]

    def _check_mask(self, mask: Optional[torch.Tensor], batch: CodedBatch) -> None:
        """Raise unless ``mask`` is None or a ``(B, N)`` bool tensor for ``batch``'s ``B`` groups."""
        if mask is None:
            return
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            got = type(mask).__name__ if not isinstance(mask, torch.Tensor) else f"a {mask.dtype} tensor"
            raise TypeError(
                f"mask must be a bool torch.Tensor of shape (B, N) (True = result arrived), got {got}; "
                "convert it with torch.as_tensor(mask, dtype=torch.bool)"
            )
        groups, workers = batch.coded.shape[:2]
        if mask.shape != (groups, workers):
            raise ValueError(
                f"mask must have shape (B, N) = {(groups, workers)} for {batch.num_samples} samples, got "
                f"{tuple(mask.shape)}"
            )

    def _decoder_inputs(
        self, leaves: list[torch.Tensor], mask: torch.Tensor
    ) -> Iterator[tuple[list[int], list[int], torch.Tensor]]:
        """What the decoder reads, per dtype of the ``(B, N, *out)`` result ``leaves`` (in order of first appearance):
        the indices of that dtype's leaves, their widths ``prod(out)``, and their ``(B, N, d)`` results side by side
        after ``noise`` and ``attack`` (the results of workers outside ``mask`` zero first when there is either)."""
        for dtype in dict.fromkeys(leaf.dtype for leaf in leaves):
            members = [i for i, leaf in enumerate(leaves) if leaf.dtype == dtype]
            flats = [leaves[i].reshape(leaves[i].shape[:2] + (-1,)) for i in members]
            joined = torch.cat(flats, 2) if len(flats) > 1 else flats[0]
            if self.noise is not None or self.attack is not None:
                joined = torch.where(mask.to(joined.device).unsqueeze(-1), joined, 0.0)
            if self.noise is not None:
                joined = self.noise(joined, mask)
            if self.attack is not None:
                joined = self.attack(joined, mask.to(joined.device))
            yield members, [f.shape[2] for f in flats], joined

    def calibrate(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None, *, validate: bool = True) -> torch.Tensor:
        """Choose the smoothing of a calibrating decoder (GCC's default) from the model's results on samples ``x``
        ``(M, *in)`` and keep it; returns the chosen bandwidth ratio (a float64 0-d tensor).

        ``x`` is grouped and encoded, the model runs on the coded inputs in this process (also for a module on
        ``workers``; no gradients), ``noise`` and ``attack`` apply, and the decoder calibrates on the ``(B, N, d)``
        results under ``mask`` (default: drawn from ``stragglers``, else every result) with
        :meth:`torchgcc.codes.gcc.GCVSplineDecoder.calibrate`, from every output of the first output dtype side by
        side. With ``validate`` (the default) the model also runs on the samples themselves (``M`` more samples,
        once) and the choice is validated against those uncoded outputs: the candidate, GCV's choice among them,
        that decodes the batch best under its mask and under drawn straggler sets
        (:func:`torchgcc.functional.decoder_smoothing.validated_ratio`; ``noise`` and ``attack`` then apply to every
        worker's result), as a first :meth:`forward` does on its pooled groups. ``validate=False`` makes GCV's choice
        alone (a first forward with ``validate_calibration=False``). Pass ``decoder.full_pool() * K`` samples or
        more for the pooled choice (16 groups up to N = 64, fewer above: :func:`torchgcc.codes.gcc.pooled_groups`;
        fewer samples: a ``CalibrationWarning``). A decoder that is already calibrated chooses again. Raises
        ``TypeError`` for a code whose decoder does not calibrate."""
        decoder = self.code.decoder
        if not isinstance(decoder, GCVSplineDecoder) or not decoder.calibrates:
            raise TypeError(
                f"{type(self.code).__name__}'s decoder ({type(decoder).__name__}) does not calibrate: only GCC's "
                "default (lambda_dec='adaptive') chooses its smoothing from results"
            )
        with torch.no_grad():
            batch = self.encode(x)
            self._check_mask(mask, batch)
            groups = batch.coded.shape[0]
            _, leaves = self._results_here(batch.coded)
            if mask is None:
                mask = self.draw_mask(groups, leaves[0].device)
            if not validate:
                return decoder.calibrate(next(self._decoder_inputs(leaves, mask))[2], mask)
            every = torch.ones_like(mask)  # validation decodes under drawn straggler sets too: every result
            members, _, joined = next(self._decoder_inputs(leaves, every))
            return decoder.calibrate(joined, mask, self._uncoded_outputs(batch.inputs, members))

    def _uncoded_outputs(self, grouped: torch.Tensor, members: list[int]) -> torch.Tensor:
        """``(B, K, d)``: the model's outputs on the grouped samples ``grouped`` ``(B, K, *in)`` themselves, the output
        leaves ``members`` side by side (as the decoder reads their results)."""
        groups, inputs = grouped.shape[:2]
        _, leaves = flatten_output(
            self.run_model(grouped.reshape((groups * inputs,) + grouped.shape[2:])), groups * inputs
        )
        return torch.cat([leaves[i].reshape(groups, inputs, -1) for i in members], 2)

    def _warn_train_batchnorm(self) -> None:
        if self._warned_batchnorm or torch.compiler.is_compiling() or not isinstance(self.model, nn.Module):
            return
        if any(isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training for m in self.model.modules()):
            self._warned_batchnorm = True
            warnings.warn(
                "a BatchNorm layer of the model is in train mode: its batch statistics are computed over "
                "the coded inputs, not the samples; call model.eval() to use its running statistics",
                stacklevel=user_stacklevel(),
            )

    def draw_mask(self, num_groups: int, device: Optional[torch.device] = None) -> torch.Tensor:
        """A ``(B, N)`` mask on ``device`` (the results' device in :meth:`forward`) from the straggler model (all
        True without one, also in a compiled graph). Meta tensors (shape inference) get a mask drawn on the CPU,
        moved to ``meta``."""
        device = torch.device("cpu" if device is None else device)
        if self.stragglers is None:
            return torch.ones(num_groups, self.code.num_workers, dtype=torch.bool, device=device)
        return self._sample(num_groups, device)

    @eager_under_compile(MASK_UNDER_COMPILE)  # the straggler model's generator advances eagerly, also under compile
    def _sample(self, num_groups: int, device: torch.device) -> torch.Tensor:
        assert self.stragglers is not None  # draw_mask's caller checked
        if device.type == "meta":
            return self.stragglers.sample(num_groups, self.code.num_workers).to(device)
        return self.stragglers.sample(num_groups, self.code.num_workers, device=device)

    def run_model(self, inputs: torch.Tensor) -> ModelOutput:
        """``model`` on ``(B * N, *in)`` coded inputs, in chunks of ``chunk_size``, the chunks' outputs joined per key
        (a dict's by name, whatever its order; a tuple's or list's by position). Every chunk must return the
        structure of the first: the same container, keys or length, and per key the same dtype and trailing shape;
        else ``ValueError`` naming the chunk and what changed (joining by position would mix or drop outputs)."""
        if self.chunk_size is None or inputs.shape[0] <= self.chunk_size:
            return self.model(inputs)
        parts = inputs.split(self.chunk_size)
        outputs = [self.model(part) for part in parts]
        spec, first = flatten_output(outputs[0], len(parts[0]))
        columns: dict = {key: [] for key in spec.keys}
        for index, (output, part) in enumerate(zip(outputs, parts)):
            chunk, tensors = flatten_output(output, len(part))
            same_keys = set(chunk.keys) == set(spec.keys) if isinstance(output, dict) else chunk.keys == spec.keys
            if chunk.container is not spec.container or not same_keys:
                raise ValueError(
                    f"the model's output changed structure between chunks (chunk_size={self.chunk_size}): chunk 0 "
                    f"returned {spec.describe()}, chunk {index} {chunk.describe()}; CodedModule joins the chunks' "
                    "outputs, so the model must return the same keys every call"
                )
            for key, tensor in zip(chunk.keys, tensors):
                like = first[spec.keys.index(key)]
                if tensor.dtype != like.dtype or tensor.shape[1:] != like.shape[1:]:
                    name = "model output" if key is None else f"model output [{key!r}]"
                    raise ValueError(
                        f"{name} changed between chunks (chunk_size={self.chunk_size}): chunk 0 gave "
                        f"{like.dtype} rows of shape {tuple(like.shape[1:])}, chunk {index} {tensor.dtype} rows of "
                        f"shape {tuple(tensor.shape[1:])}; the model must return the same shapes every call"
                    )
                columns[key].append(tensor)
        return spec.build([torch.cat(columns[key]) for key in spec.keys])
