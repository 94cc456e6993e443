"""``SAGCGRPOTrainer``: TRL's ``GRPOTrainer`` with the group size ``G`` chosen per generation step by a controller.

Each generation step (TRL generates once every ``steps_per_generation * num_iterations`` micro-steps):

1. ``G = controller.choose()``;
2. the step's ``P`` distinct prompts (``args.generation_batch_size``, which must equal the controller's
   ``prompts_per_step``) are repeated ``G`` times each, so the batch holds ``P * G`` completions in ``P`` groups;
3. TRL generates and scores them; each completion's **rollout time** is its share of the measured generation
   time (a completion of ``n`` tokens finished after ``n`` of the batch's ``n_max`` decoding steps:
   ``t_gen * n / n_max``) plus, optionally, ``n`` times a seconds-per-token delay drawn from ``rollout_delay``
   (a :class:`torchgcc.stragglers.LatencyModel`, for experiments on one CPU where nothing straggles);
4. the durations go to ``controller.observe`` (a step waits for all its rollouts: one late rollout is a straggler
   event), and the advantages are recomputed by group id (:func:`~.advantages.group_advantages`), never by a stride;
5. ``G``, the event, the event rate, the dual variable and the rollout time are logged through the trainer's own
   metrics (``sagc/...`` keys, averaged over each logging window like TRL's).

Two variants, both off by default:

- **Deadline** (``deadline=`` seconds): completions slower than the deadline are *erasures*: they leave their
  group's statistics and the batch (so they are out of the loss and its normaliser, whatever the ``loss_type``);
  groups left with fewer than ``min_group_size`` completions are dropped; the step's rollout time stops at the
  deadline. TRL still generates every completion, so the controller sees every duration (with
  ``group_size_controller(deadline=D)``, an event is a step that erased something). Erasing the slow completions
  favours short ones: the logged ``sagc/completion_length`` (all generated) against
  ``sagc/kept_completion_length`` (trained on) measures that length bias, and ``sagc/reward`` against
  ``sagc/kept_reward`` what it does to the rewards trained on.
- **Dynamic sampling** (``dynamic_sampling=True``, DAPO): groups whose usable rewards are all equal are dropped
  and new prompts (drawn from ``train_dataset`` with a generator seeded from ``args.seed``) are generated, ``G``
  each, until ``P`` groups remain or ``max_refill_rounds`` extra rounds ran. Each round is a synchronous barrier:
  the controller observes each round, and the step's rollout time is the sum of the rounds'.

Both variants change the number of rows of a batch, which TRL splits into ``steps_per_generation`` equal parts
(dropping a remainder), so they need ``steps_per_generation == 1``. Multi-process runs (rewards, durations and
group ids are gathered so every process makes the same choices) and vLLM have not been run.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import torch
import torch.nn.functional as F
from datasets import IterableDataset
from trl import GRPOTrainer
from trl.trainer.utils import RepeatSampler

from torchgcc.checks import check_integer, check_real
from torchgcc.control.controller import StragglerAwareController
from torchgcc.control.event_models import AllMustFinish
from torchgcc.integrations.trl.advantages import SCALES, group_advantages, usable_groups
from torchgcc.stragglers import LatencyModel

__all__ = ["SAGCGRPOTrainer"]


class SAGCGRPOTrainer(GRPOTrainer):
    """A ``GRPOTrainer`` whose group size comes from ``controller`` at every generation step.

    Args:
        controller: a :class:`~torchgcc.control.StragglerAwareController` from
            :func:`~torchgcc.control.group_size_controller`, whose ``prompts_per_step`` equals
            ``args.generation_batch_size`` (distinct prompts per generation step, all processes together) and
            whose sizes are at least 2. ``args.num_generations`` only sizes evaluation groups.
        rollout_delay: a :class:`~torchgcc.stragglers.LatencyModel` of the seconds per completion token added to
            each measured rollout time (``None``: none).
        deadline: seconds (a positive number) after which a completion is an erasure (``None``: no deadline).
        min_group_size: with ``deadline`` or ``dynamic_sampling``, groups with fewer usable completions are dropped
            (an integer from 2 to the smallest controller size: a smaller size could keep no group).
        dynamic_sampling: drop groups whose usable rewards are all equal and refill from new prompts (DAPO).
        max_refill_rounds: at most this many extra generation rounds per step with ``dynamic_sampling``.
        *args, **kwargs: ``GRPOTrainer``'s (``model``, ``reward_funcs``, ``args``, ``train_dataset``, ...).

    Raises:
        TypeError / ValueError: at construction, one line naming the argument, for a ``controller``,
            ``rollout_delay``, ``deadline``, ``min_group_size``, ``dynamic_sampling`` or ``max_refill_rounds`` of the
            wrong kind or out of range (numpy integers are integers), and for a controller that does not match
            ``args`` or a setting TRL would split (see above).

    Attributes:
        controller: the controller (save its ``state_dict()`` with checkpoints to resume identically).
    """

    def __init__(
        self,
        *args: Any,
        controller: StragglerAwareController,
        rollout_delay: Optional[LatencyModel] = None,
        deadline: Optional[float] = None,
        min_group_size: int = 2,
        dynamic_sampling: bool = False,
        max_refill_rounds: int = 4,
        **kwargs: Any,
    ) -> None:
        if not isinstance(controller, StragglerAwareController):
            raise TypeError(
                "controller must be a StragglerAwareController (torchgcc.control.group_size_controller(...)), "
                f"got {type(controller).__name__}"
            )
        sizes = controller.sizes.tolist()
        if sizes[0] < 2:
            raise ValueError(f"controller sizes must be at least 2 (a group of 1 has no baseline), got {sizes}")
        if rollout_delay is not None and not isinstance(rollout_delay, LatencyModel):
            raise TypeError(
                "rollout_delay must be a torchgcc.stragglers.LatencyModel (seconds per token, e.g. Pareto(1.0, 2.0)) "
                f"or None, got {rollout_delay!r} ({type(rollout_delay).__name__})"
            )
        if deadline is not None:
            deadline = check_real("deadline", deadline, low=0, low_open=True)
        min_group_size = check_integer("min_group_size", min_group_size, minimum=2)
        if min_group_size > sizes[0]:
            dead = [size for size in sizes if size < min_group_size]
            raise ValueError(
                f"min_group_size={min_group_size} is larger than the controller sizes {dead} (of {sizes}): with a "
                "deadline or dynamic sampling every group of a step at such a size would be dropped (a step that "
                "trains on nothing); leave them out of the controller's sizes or lower min_group_size"
            )
        if not isinstance(dynamic_sampling, bool):
            raise TypeError(f"dynamic_sampling must be True or False, got {dynamic_sampling!r}")
        max_refill_rounds = check_integer("max_refill_rounds", max_refill_rounds, minimum=0)
        super().__init__(*args, **kwargs)
        model = controller.event_model
        if not isinstance(model, AllMustFinish) or model.units_per_size != self.args.generation_batch_size:
            raise ValueError(
                f"controller must count args.generation_batch_size = {self.args.generation_batch_size} prompts per "
                f"step (group_size_controller(..., prompts_per_step={self.args.generation_batch_size})), got "
                f"{model!r}"
            )
        self.filters_rows = deadline is not None or dynamic_sampling
        if self.filters_rows and self.args.steps_per_generation != 1:
            raise ValueError(
                "deadline= and dynamic_sampling= change the rows of a batch, which TRL splits into "
                f"args.steps_per_generation = {self.args.steps_per_generation} equal parts: set it to 1"
            )
        if isinstance(self.train_dataset, IterableDataset):
            raise ValueError("train_dataset must be a map-style datasets.Dataset (prompts are drawn by index)")
        if self.multi_objective_aggregation != "sum_then_normalize" or self.scale_rewards not in SCALES:
            raise ValueError(
                "SAGCGRPOTrainer supports args.multi_objective_aggregation='sum_then_normalize' and "
                f"args.scale_rewards in {SCALES}, got {self.multi_objective_aggregation!r}, {self.scale_rewards!r}"
            )
        self.controller = controller
        self.rollout_delay, self.deadline = rollout_delay, deadline
        self.min_group_size, self.dynamic_sampling, self.max_refill_rounds = (
            min_group_size,
            dynamic_sampling,
            max_refill_rounds,
        )
        self.delay_generator = torch.Generator().manual_seed(self.args.seed)
        self.refill_generator = torch.Generator().manual_seed(self.args.seed + 1)
        self._round: dict[str, Any] = {}

    def _get_train_sampler(self, dataset=None):
        """Distinct prompts, ``generation_batch_size`` per generation step: the groups are formed after sampling."""
        return RepeatSampler(
            data_source=self.train_dataset if dataset is None else dataset,
            mini_repeat_count=1,
            batch_size=self.args.generation_batch_size,
            repeat_count=self.num_iterations * self.args.steps_per_generation,
            shuffle=self.shuffle_dataset,
            seed=self.args.seed,
        )

    def _generate(self, prompts):
        start = time.perf_counter()
        result = super()._generate(prompts)
        self._round["generate_seconds"] = time.perf_counter() - start
        self._round["lengths"] = torch.tensor([len(ids) for ids in result[1]])  # tokens decoded per completion
        return result

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._round["rewards_per_func"] = rewards_per_func  # (rows of all processes, reward functions)
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        if not self.model.training:
            return super()._generate_and_score_completions(inputs)
        size = self.controller.choose()
        self.num_generations = size  # TRL's vLLM server path takes one prompt in every num_generations
        prompts = self.args.generation_batch_size
        rounds = [self._rollout_round(inputs, size, first_group=0)]
        while (
            self.dynamic_sampling
            and len(rounds) <= self.max_refill_rounds
            and len(torch.unique(_cat(rounds, "group_ids")[self._keep(rounds)])) < prompts
        ):
            rounds.append(self._rollout_round(self._refill_prompts(), size, first_group=len(rounds) * prompts))
        return self._assemble(rounds, size)

    def _rollout_round(self, inputs: list[dict[str, Any]], size: int, *, first_group: int) -> dict[str, Any]:
        """Generate and score ``size`` completions for each of this process's ``inputs`` (one synchronous round)
        and show the round to the controller: TRL's batch plus the rewards, group ids, durations and the usable
        mask of all processes' rows."""
        self._round = {}
        output = super()._generate_and_score_completions([dict(row) for row in inputs for _ in range(size)])
        rewards_per_func, seconds, lengths = (
            self._round[key] for key in ("rewards_per_func", "generate_seconds", "lengths")
        )
        device = rewards_per_func.device
        rewards = (rewards_per_func * self.reward_weights.to(device)).nansum(1)
        rewards[torch.isnan(rewards_per_func).all(1)] = torch.nan  # unscorable, as in TRL
        measured = seconds * lengths.double() / lengths.max().clamp(min=1)
        local = len(inputs)
        group_ids = first_group + self.accelerator.process_index * local + torch.arange(local).repeat_interleave(size)
        lengths, durations, group_ids = (
            self.accelerator.gather(value.to(device)).cpu() for value in (lengths, measured, group_ids)
        )
        if self.rollout_delay is not None:
            durations = durations + lengths * self.rollout_delay.sample((len(durations),), self.delay_generator)
        event = self.controller.observe(durations, size=size)  # every duration: TRL generates all completions
        barrier = float(durations.max())
        late = torch.zeros_like(durations, dtype=torch.bool)
        if self.deadline is not None:
            late, barrier = durations > self.deadline, min(barrier, self.deadline)
        self._metrics["train"]["sagc/straggler_event"].append(float(event))
        rewards = rewards.cpu()
        return {
            "output": output,
            "rewards": rewards,
            "usable": ~late & ~torch.isnan(rewards),
            "group_ids": group_ids,
            "lengths": lengths,
            "barrier": barrier,
            "generate_seconds": seconds,
            "rows": local * size,
        }

    def _keep(self, rounds: list[dict[str, Any]]) -> torch.Tensor:
        """``(rows,)`` bool over the rounds' rows: what trains (everything unless rows are filtered)."""
        usable = _cat(rounds, "usable")
        if not self.filters_rows:
            return torch.ones_like(usable)
        return usable_groups(
            _cat(rounds, "rewards").masked_fill(~usable, torch.nan),
            _cat(rounds, "group_ids"),
            min_size=self.min_group_size,
            require_variance=self.dynamic_sampling,
        )

    def _refill_prompts(self) -> list[dict[str, Any]]:
        """This process's share of ``generation_batch_size`` new distinct prompts from ``train_dataset``."""
        local = self.args.generation_batch_size // self.accelerator.num_processes
        order = torch.randperm(len(self.train_dataset), generator=self.refill_generator)
        start = self.accelerator.process_index * local
        return [self.train_dataset[int(index)] for index in order[start : start + local]]

    def _assemble(self, rounds: list[dict[str, Any]], size: int) -> dict[str, Any]:
        """One training batch from the rounds: advantages by group id over the kept rows; with a deadline or
        dynamic sampling only the kept rows (the first ``generation_batch_size`` kept groups) stay."""
        rewards, group_ids, usable = (_cat(rounds, key) for key in ("rewards", "group_ids", "usable"))
        keep = self._keep(rounds)
        if self.dynamic_sampling:
            keep &= torch.isin(group_ids, torch.unique(group_ids[keep])[: self.args.generation_batch_size])
        advantages = group_advantages(rewards.masked_fill(~keep, torch.nan), group_ids, scale=self.scale_rewards)
        output = rounds[0]["output"] if len(rounds) == 1 else self._concatenate([r["output"] for r in rounds])
        local = self._local_rows(rounds)
        device = output["completion_mask"].device
        output["advantages"] = advantages[local].to(device=device, dtype=torch.float32)
        output["group_ids"] = group_ids[local].to(device)
        if self.filters_rows:
            output = self._select(output, keep[local])
        self._replace_logged_advantages(advantages)
        lengths = _cat(rounds, "lengths").double()
        metrics = self._metrics["train"]
        metrics["sagc/group_size"].append(size)
        metrics["sagc/event_rate"].append(self.controller.event_rate)
        metrics["sagc/dual"].append(self.controller.dual.value)
        metrics["sagc/rounds"].append(len(rounds))
        metrics["sagc/rollout_seconds"].append(sum(r["barrier"] for r in rounds))
        metrics["sagc/generate_seconds"].append(sum(r["generate_seconds"] for r in rounds))
        metrics["sagc/erased_fraction"].append(float((~usable).double().mean()))
        metrics["sagc/dropped_groups"].append(len(torch.unique(group_ids)) - len(torch.unique(group_ids[keep])))
        metrics["sagc/completion_length"].append(float(lengths.mean()))
        metrics["sagc/reward"].append(float(rewards.nanmean()))
        if keep.any():
            metrics["sagc/kept_completion_length"].append(float(lengths[keep].mean()))
            metrics["sagc/kept_reward"].append(float(rewards[keep].mean()))
        return output

    def _local_rows(self, rounds: list[dict[str, Any]]) -> torch.Tensor:
        """Indices of this process's rows in the gathered (all processes, all rounds) order."""
        index, start = [], 0
        for r in rounds:
            begin = start + self.accelerator.process_index * r["rows"]
            index.append(torch.arange(begin, begin + r["rows"]))
            start += r["rows"] * self.accelerator.num_processes
        return torch.cat(index)

    def _concatenate(self, outputs: list[dict[str, Any]]) -> dict[str, Any]:
        """Stack the rounds' batches: per-row tensors padded to one width (prompts on the left, the rest on the
        right; the padding is masked out by ``prompt_mask`` / ``completion_mask``)."""
        merged = {}
        for key, first in outputs[0].items():
            if key == "num_items_in_batch":
                continue
            if not isinstance(first, torch.Tensor) or first.ndim not in (1, 2):
                raise ValueError(f"dynamic_sampling=True cannot merge the batch entry {key!r} (multimodal inputs?)")
            values = [output[key] for output in outputs]
            if first.ndim == 2:
                width = max(value.shape[1] for value in values)
                fill = self._tokenizer.pad_token_id if key in ("prompt_ids", "completion_ids") else 0
                left = key.startswith("prompt_")
                values = [
                    F.pad(value, (width - value.shape[1], 0) if left else (0, width - value.shape[1]), value=fill)
                    for value in values
                ]
            merged[key] = torch.cat(values)
        return merged

    def _select(self, output: dict[str, Any], keep: torch.Tensor) -> dict[str, Any]:
        """The rows ``keep`` of a batch, ``num_items_in_batch`` recounted over them (all processes). With no row
        kept, the first row stays with its completion masked out (a step that trains on nothing)."""
        keep = keep.to(output["completion_mask"].device)
        rows = len(output["completion_mask"])
        selected = {}
        for key, value in output.items():
            if key == "num_items_in_batch":
                continue
            if not isinstance(value, torch.Tensor) or value.ndim == 0 or value.shape[0] != rows:
                raise ValueError(f"deadline= and dynamic_sampling= cannot filter the batch entry {key!r}")
            selected[key] = value[keep] if keep.any() else value[:1]
        if not keep.any():
            selected["completion_mask"] = torch.zeros_like(selected["completion_mask"])
        mask = selected["completion_mask"]
        if "tool_mask" in selected:
            mask = mask * selected["tool_mask"]
        selected["num_items_in_batch"] = self.accelerator.gather(mask.sum()).sum()
        return selected

    def _replace_logged_advantages(self, advantages: torch.Tensor) -> None:
        """TRL's completion log holds the advantages it computed by stride: put ours (0 for left-out rows)."""
        logged = self._logs["advantages"]
        for _ in range(min(len(logged), len(advantages))):
            logged.pop()
        logged.extend(advantages.tolist())


def _cat(rounds: list[dict[str, Any]], key: str) -> torch.Tensor:
    """The rounds' ``key`` tensors end to end (all processes' rows, round after round)."""
    return torch.cat([r[key] for r in rounds])
