"""torchgcc.integrations.trl: SAGC inside TRL's GRPOTrainer, offline on a CPU with a tiny model built in code.

The trainer tests run a few optimizer steps and check every batch it trains on against references computed here
from the decoded prompts and completions: rewards recomputed by this file's own reward functions, group-relative
advantages by the textbook formula (Python's ``statistics``), the groups' prompts, the rows that a deadline or
dynamic sampling leaves out, and the loss normaliser. Delays are planted (a latency model of this file), so the
straggler events are known in advance.
"""

from __future__ import annotations

import importlib.util
import math
import os
import statistics
import subprocess
import sys

import pytest
import torch

from torchgcc.stragglers import LatencyModel

HF_STACK = ("trl", "transformers", "datasets", "accelerate", "tokenizers")
needs_trl = pytest.mark.skipif(
    importlib.util.find_spec("trl") is None, reason="trl is not installed (pip install -e '.[trl]')"
)
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


def test_the_library_outside_integrations_imports_no_hugging_face_package():
    """Every module of the library except torchgcc.app and torchgcc.integrations.trl, imported in a fresh process."""
    script = (
        "import importlib, pathlib, sys, torchgcc\n"
        "root = pathlib.Path(torchgcc.__file__).parent\n"
        "for path in sorted(root.rglob('*.py')):\n"
        "    parts = path.relative_to(root.parent).with_suffix('').parts\n"
        "    if parts[-1] == '__main__' or parts[1:2] == ('app',) or parts[1:3] == ('integrations', 'trl'):\n"
        "        continue\n"
        "    importlib.import_module('.'.join(parts[:-1] if parts[-1] == '__init__' else parts))\n"
        f"print(sorted({{name.split('.')[0] for name in sys.modules}} & set({HF_STACK!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


class PlantedDelays(LatencyModel):
    """Seconds per token: 1 ms, except ``slow[call]`` (row indices of that call, counted from 0): 10^4 s, past
    every threshold of these tests however slow the measured generation is on a loaded machine."""

    def __init__(self, slow: dict[int, list[int]]) -> None:
        self.slow, self.calls = slow, 0

    def sample(self, shape, generator):
        delays = torch.full(shape, 1e-3, dtype=torch.float64)
        delays[self.slow.get(self.calls, [])] = 1e4
        self.calls += 1
        return delays


def answer_of(prompt: str) -> int:
    first, second = prompt.rstrip("=").split("+")
    return int(first) + int(second)


def exact(completions, prompts, **kwargs):
    """The addition task's reward, written again from the prompt text."""
    return [float(text.strip() == str(answer_of(prompt))) for text, prompt in zip(completions, prompts)]


def length(completions, **kwargs):
    """A dense reward (characters of the completion), so that groups of an untrained model differ."""
    return [float(len(text)) for text in completions]


def reference_advantages(rewards: list[float], groups: list[int]) -> list[float]:
    """``(r - mean) / (sample std + 1e-4)`` within each group (TRL's scale_rewards="group")."""
    members: dict[int, list[float]] = {}
    for reward, group in zip(rewards, groups):
        members.setdefault(group, []).append(reward)
    stats = {g: (statistics.fmean(rs), statistics.stdev(rs)) for g, rs in members.items()}
    return [(reward - stats[g][0]) / (stats[g][1] + 1e-4) for reward, g in zip(rewards, groups)]


def decoded(tokenizer, batch):
    """The batch's rows as (prompt text, completion text, completion tokens)."""
    prompts = tokenizer.batch_decode(batch["prompt_ids"], skip_special_tokens=True)
    rows = []
    for prompt, ids, mask in zip(prompts, batch["completion_ids"], batch["completion_mask"]):
        tokens = int(mask.sum())
        rows.append((prompt, tokenizer.decode(ids[:tokens], skip_special_tokens=True), tokens))
    return rows


def make_trainer(controller, reward_funcs, *, steps, prompts=4, accumulation=1, **options):
    from transformers import PrinterCallback
    from trl import GRPOConfig

    from torchgcc.integrations.trl import SAGCGRPOTrainer, addition_dataset, char_tokenizer, tiny_causal_lm

    class Recording(SAGCGRPOTrainer):
        """Keeps every batch the trainer hands to TRL's loss (before TRL shuffles it)."""

        batches: list[dict] = []

        def _generate_and_score_completions(self, inputs):
            batch = super()._generate_and_score_completions(inputs)
            if self.model.training:
                self.batches.append({key: value for key, value in batch.items()})
            return batch

    tokenizer = char_tokenizer()
    args = GRPOConfig(
        output_dir=str(options.pop("tmp_path")),
        per_device_train_batch_size=prompts // accumulation,
        gradient_accumulation_steps=accumulation,
        num_generations=2,
        max_completion_length=4,
        learning_rate=1e-2,
        max_steps=steps,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    trainer = Recording(
        model=tiny_causal_lm(tokenizer, hidden=16),
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=addition_dataset(64, seed=1),
        processing_class=tokenizer,
        controller=controller,
        **options,
    )
    trainer.batches = []
    trainer.remove_callback(PrinterCallback)
    return trainer, tokenizer


def check_batch(tokenizer, batch, weights=(1.0, 1.0)):
    """Every group shares one prompt, and the advantages are the reference from this file's own rewards."""
    rows = decoded(tokenizer, batch)
    groups = batch["group_ids"].tolist()
    prompts_of: dict[int, set[str]] = {}
    for (prompt, _, _), group in zip(rows, groups):
        prompts_of.setdefault(group, set()).add(prompt)
    assert all(len(prompts) == 1 for prompts in prompts_of.values()), prompts_of
    rewards = [weights[0] * exact([text], [prompt])[0] + weights[1] * length([text])[0] for prompt, text, _ in rows]
    expected = reference_advantages(rewards, groups)
    assert batch["advantages"].tolist() == pytest.approx(expected, abs=1e-4)
    assert int(batch["num_items_in_batch"]) == sum(tokens for _, _, tokens in rows)
    return rows, groups, rewards


@needs_trl
@pytest.mark.parametrize("accumulation", [1, 2])  # 2: TRL splits each generation into two micro-batches
def test_group_size_changes_between_steps_and_every_batch_matches_the_reference(tmp_path, accumulation):
    from torchgcc.control import group_size_controller

    controller = group_size_controller((2, 4), prompts_per_step=4, budget=0.25, kappa=10.0, warmup=0, hold=1)
    delays = PlantedDelays({3: [5]})  # one straggler, in the fourth step
    trainer, tokenizer = make_trainer(
        controller, [exact, length], steps=6, accumulation=accumulation, rollout_delay=delays, tmp_path=tmp_path
    )
    trainer.train()

    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    sizes = [int(entry["sagc/group_size"]) for entry in logs]
    assert len(logs) == 6 and set(sizes) == {2, 4}  # G changed between steps
    assert all(math.isfinite(entry["loss"]) for entry in logs)
    assert [entry["sagc/straggler_event"] for entry in logs] == [0, 0, 0, 1, 0, 0]
    assert controller.steps == 6 and controller.events == 1 and controller.event_rate <= controller.budget
    assert logs[-1]["sagc/event_rate"] == pytest.approx(1 / 6) and logs[-1]["sagc/dual"] == controller.dual.value
    for batch, size in zip(trainer.batches, sizes):
        rows, groups, _ = check_batch(tokenizer, batch)
        assert len(rows) == 4 * size and sorted(set(groups)) == [0, 1, 2, 3]
        assert all(groups.count(group) == size for group in set(groups))


@needs_trl
def test_deadline_erasures_leave_their_group_the_batch_and_the_normaliser(tmp_path):
    from torchgcc.control import group_size_controller

    controller = group_size_controller((4,), prompts_per_step=4, budget=0.5, deadline=50.0, warmup=0)
    # first step: row 0 (group 0 keeps 3 of 4) and rows 4, 5 (group 1 keeps 2 < min_group_size 3) are late
    delays = PlantedDelays({0: [0, 4, 5]})
    trainer, tokenizer = make_trainer(
        controller, [exact, length], steps=2, rollout_delay=delays, deadline=50.0, min_group_size=3, tmp_path=tmp_path
    )
    trainer.train()

    first, second = trainer.batches
    rows, groups, rewards = check_batch(tokenizer, first)
    assert groups == [0, 0, 0, 2, 2, 2, 2, 3, 3, 3, 3]
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert logs[0]["sagc/erased_fraction"] == pytest.approx(3 / 16) and logs[0]["sagc/dropped_groups"] == 1
    assert logs[0]["sagc/kept_completion_length"] == pytest.approx(statistics.fmean(t for _, _, t in rows))
    assert logs[0]["sagc/kept_reward"] == pytest.approx(statistics.fmean(rewards))
    assert logs[0]["sagc/straggler_event"] == 1 and logs[0]["sagc/rollout_seconds"] == 50.0
    assert check_batch(tokenizer, second)[1] == sorted(4 * [0, 1, 2, 3])  # nothing late: whole groups
    assert logs[1]["sagc/straggler_event"] == 0 and logs[1]["sagc/erased_fraction"] == 0
    assert all(math.isfinite(entry["loss"]) for entry in logs)


def even_answer_length(completions, prompts, **kwargs):
    """Varies within a group only for prompts with an even answer: the other groups have no signal."""
    return [float(len(text)) * (answer_of(prompt) % 2 == 0) for text, prompt in zip(completions, prompts)]


@needs_trl
def test_dynamic_sampling_keeps_groups_with_reward_variance_and_refills(tmp_path):
    from torchgcc.control import group_size_controller

    controller = group_size_controller((4,), prompts_per_step=4, budget=0.5, kappa=10.0, warmup=0)
    trainer, tokenizer = make_trainer(
        controller, [even_answer_length], steps=3, dynamic_sampling=True, max_refill_rounds=6, tmp_path=tmp_path
    )
    trainer.train()

    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert controller.steps == sum(entry["sagc/rounds"] for entry in logs)  # one observation per round
    assert any(entry["sagc/rounds"] > 1 for entry in logs)
    for batch in trainer.batches:
        rows, groups, _ = check_batch(tokenizer, batch, weights=(0.0, 1.0))
        assert len(set(groups)) == 4 and all(groups.count(group) == 4 for group in set(groups))
        for group in set(groups):
            members = [(prompt, text) for (prompt, text, _), g in zip(rows, groups) if g == group]
            assert answer_of(members[0][0]) % 2 == 0 and len({len(text) for _, text in members}) > 1


def constant(completions, **kwargs):
    return [1.0] * len(completions)


@needs_trl
def test_a_step_without_any_usable_group_trains_on_nothing(tmp_path):
    from torchgcc.control import group_size_controller

    controller = group_size_controller((2,), prompts_per_step=4, budget=0.5, kappa=10.0, warmup=0)
    trainer, _ = make_trainer(
        controller, [constant], steps=2, dynamic_sampling=True, max_refill_rounds=1, tmp_path=tmp_path
    )
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()

    for batch in trainer.batches:
        assert len(batch["completion_mask"]) == 1 and int(batch["completion_mask"].sum()) == 0
        assert int(batch["num_items_in_batch"]) == 0 and batch["advantages"].tolist() == [0.0]
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [entry["loss"] for entry in logs] == [0.0, 0.0] and all(e["sagc/rounds"] == 2 for e in logs)
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))


@needs_trl
def test_group_advantages_by_group_id_match_the_formula():
    from torchgcc.integrations.trl import group_advantages, usable_groups

    nan = math.nan
    rewards = torch.tensor([0.5, 3.0, nan, 1.0, 2.0, 2.0, 7.0, nan, 4.0, 4.0, nan])
    groups = torch.tensor([7, 2, 7, 7, 2, 9, 2, 9, 5, 5, 9])  # members scattered; usable: 2, 3, 1 and 2
    got = group_advantages(rewards, groups).tolist()
    expected = {}
    for group in set(groups.tolist()):
        rows = [i for i, g in enumerate(groups.tolist()) if g == group and not math.isnan(rewards[i])]
        values = [float(rewards[i]) for i in rows]
        if len(values) > 1:
            expected.update(zip(rows, reference_advantages(values, [group] * len(values))))
    assert got == pytest.approx([expected.get(i, 0.0) for i in range(len(rewards))], abs=1e-6)
    # group 9 has one usable reward: no baseline, advantage 0 (TRL's NaN std, zeroed)
    assert usable_groups(rewards, groups).tolist() == [1, 1, 0, 1, 1, 0, 1, 0, 1, 1, 0]
    assert usable_groups(rewards, groups, min_size=3).tolist() == [0, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0]
    # group 5 (4.0, 4.0) has no variance: dynamic sampling drops it
    assert usable_groups(rewards, groups, require_variance=True).tolist() == [1, 1, 0, 1, 1, 0, 1, 0, 0, 0, 0]
    batch = group_advantages(rewards, groups, scale="batch")
    usable = rewards[~torch.isnan(rewards)]
    assert float(batch[0]) == pytest.approx(
        (0.5 - statistics.fmean([0.5, 1.0])) / (statistics.stdev(usable.tolist()) + 1e-4)
    )
    with pytest.raises(ValueError, match="scale"):
        group_advantages(rewards, groups, scale="token")


@needs_trl
@pytest.mark.parametrize(
    "group_ids",
    [
        torch.tensor([0.0, 0.0, 1.0, 1.0]),  # float ids: 0.1 + 0.2 and 0.3 would be different groups
        torch.tensor([0.5, 0.5, 1.5, 1.5], dtype=torch.float64),
        torch.tensor([True, True, False, False]),
        torch.tensor([0, 0, 1, 1], dtype=torch.complex64),
        [0, 0, 1, 1],
    ],
)
def test_group_ids_must_be_an_integer_tensor(group_ids):
    """The docstring says integers; float group ids were grouped by exact float equality. A TypeError names
    ``group_ids`` (for usable_groups too), while every integer dtype keeps working."""
    from torchgcc.integrations.trl import group_advantages, usable_groups

    rewards = torch.tensor([1.0, 0.0, 2.0, 1.0])
    for function in (group_advantages, usable_groups):
        with pytest.raises(TypeError, match="^group_ids must be") as info:
            function(rewards, group_ids)
        assert "\n" not in str(info.value)
    expected = group_advantages(rewards, torch.tensor([0, 0, 1, 1]))
    for dtype in (torch.int8, torch.uint8, torch.int16, torch.int32):
        assert torch.equal(group_advantages(rewards, torch.tensor([0, 0, 1, 1], dtype=dtype)), expected)


@needs_trl
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool, torch.float64, torch.float16])
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_group_advantages_of_integer_or_bool_rewards_are_not_truncated(dtype, scale):
    """0/1 exact-match scores as integers or bools: advantages in floating point, against numpy in float64."""
    import numpy as np

    from torchgcc.integrations.trl import group_advantages

    scores = [1, 0, 0, 1, 1, 0, 1, 1, 0, 1]
    groups = [0, 0, 0, 1, 1, 1, 4, 4, 7, 7]
    values, ids = np.array(scores, dtype=np.float64), np.array(groups)
    expected = np.zeros_like(values)
    for group in np.unique(ids):
        rows = ids == group
        centred = values[rows] - values[rows].mean()
        if scale == "group":
            centred = centred / (values[rows].std(ddof=1) + 1e-4)
        elif scale == "batch":
            centred = centred / (values.std(ddof=1) + 1e-4)
        expected[rows] = centred
    got = group_advantages(torch.tensor(scores).to(dtype), torch.tensor(groups), scale=scale)
    floating = dtype.is_floating_point
    assert got.dtype == (dtype if floating else torch.get_default_dtype())
    np.testing.assert_allclose(got.double().numpy(), expected, rtol=1e-3 if dtype == torch.float16 else 1e-6, atol=1e-6)


@needs_trl
def test_char_tokenizer_refuses_characters_outside_its_alphabet_instead_of_padding_them():
    from torchgcc.integrations.trl import char_tokenizer
    from torchgcc.integrations.trl.tiny_model import CHARACTERS

    tokenizer = char_tokenizer()
    # the reference: one id per character, in the documented order after <pad> = 0 and <eos> = 1
    ids = {character: index + 2 for index, character in enumerate(CHARACTERS)}
    assert tokenizer("3+4=")["input_ids"] == [ids[c] for c in "3+4="]
    assert tokenizer(["12+0=", "7="])["input_ids"] == [[ids[c] for c in "12+0="], [ids["7"], ids["="]]]
    assert tokenizer.encode("3+4=<eos>") == [ids["3"], ids["+"], ids["4"], ids["="], 1]  # special tokens are known
    for call in (
        lambda: tokenizer("3-4="),
        lambda: tokenizer.encode("3-4="),
        lambda: tokenizer(["3+4=", "3-4="]),
        lambda: tokenizer("3+4=", "3-4="),
    ):
        with pytest.raises(ValueError, match=r"'-'"):
            call()
    with pytest.raises(ValueError, match=r"\['-', 'x'\]"):  # every unknown character, once
        tokenizer(["x-1", "2-x"])
    letters = char_tokenizer("ab")
    assert letters("ab")["input_ids"] == [2, 3]
    with pytest.raises(ValueError, match="'c'"):
        letters("abc")


@needs_trl
def test_trainer_rejects_a_controller_that_does_not_match_the_batch(tmp_path):
    from torchgcc.control import group_size_controller

    with pytest.raises(ValueError, match="prompts_per_step=4"):
        make_trainer(
            group_size_controller((2, 4), prompts_per_step=8, budget=0.2, kappa=10.0),
            [exact],
            steps=1,
            tmp_path=tmp_path,
        )
    with pytest.raises(ValueError, match="at least 2"):
        make_trainer(
            group_size_controller((1, 4), prompts_per_step=4, budget=0.2, kappa=10.0),
            [exact],
            steps=1,
            tmp_path=tmp_path,
        )


@needs_trl
def test_trainer_refuses_a_min_group_size_above_any_size(tmp_path):
    """A group of G completions has at most G usable ones, so with min_group_size > G every group of a step at size G
    would be dropped (loss 0: the step trains on nothing): refused at construction, naming the sizes."""
    from torchgcc.control import group_size_controller
    from torchgcc.integrations.trl import usable_groups

    def controller():
        return group_size_controller((2, 4), prompts_per_step=4, budget=0.2, kappa=10.0)

    full = torch.tensor([0.0, 1.0, 0.0, 1.0])  # a complete group of the largest size, with reward variance
    assert not usable_groups(full, torch.zeros(4, dtype=torch.int64), min_size=5).any()
    for options in ({"deadline": 1.0}, {"dynamic_sampling": True}, {}):
        with pytest.raises(ValueError, match=r"min_group_size=5 .*\[2, 4\] \(of \[2, 4\]\)"):
            make_trainer(controller(), [exact], steps=1, tmp_path=tmp_path, min_group_size=5, **options)
    assert not usable_groups(full[:2], torch.zeros(2, dtype=torch.int64), min_size=3).any()  # size 2 keeps nothing
    with pytest.raises(ValueError, match=r"min_group_size=3 .*\[2\] \(of \[2, 4\]\)"):
        make_trainer(controller(), [exact], steps=1, tmp_path=tmp_path, deadline=1.0, min_group_size=3)
    assert usable_groups(full[:2], torch.zeros(2, dtype=torch.int64), min_size=2).all()
    trainer, _ = make_trainer(controller(), [exact], steps=1, tmp_path=tmp_path, deadline=1.0, min_group_size=2)
    assert trainer.min_group_size == 2


@needs_trl
def test_trainer_arguments_are_checked_at_construction_naming_the_argument(tmp_path):
    import numpy as np

    from torchgcc.control import group_size_controller
    from torchgcc.stragglers import Pareto

    def controller():
        return group_size_controller((2, 4), prompts_per_step=4, budget=0.2, kappa=10.0)

    def make(**options):
        return make_trainer(
            options.pop("controller", None) or controller(), [exact], steps=1, tmp_path=tmp_path, **options
        )[0]

    refused = [
        ({"rollout_delay": 0.5}, TypeError, "rollout_delay must be a torchgcc.stragglers.LatencyModel"),
        ({"deadline": "5"}, TypeError, "deadline must be"),
        ({"deadline": 0.0}, ValueError, "deadline must be"),
        ({"deadline": math.nan}, ValueError, "deadline must be"),
        ({"min_group_size": 2.5}, ValueError, "min_group_size must be an integer"),
        ({"min_group_size": 1}, ValueError, "min_group_size must be an integer >= 2"),
        ({"max_refill_rounds": 2.0}, ValueError, "max_refill_rounds must be an integer"),
        ({"max_refill_rounds": -1}, ValueError, "max_refill_rounds must be an integer >= 0"),
        ({"dynamic_sampling": "yes"}, TypeError, "dynamic_sampling must be True or False"),
        ({"controller": object()}, TypeError, "controller must be a StragglerAwareController"),
    ]
    for options, error, message in refused:
        with pytest.raises(error, match=message):
            make(**options)
    # numpy integers are integers (checks.check_integer), kept as Python ints
    trainer = make(
        controller=group_size_controller((4, 8), prompts_per_step=np.int64(4), budget=0.2, kappa=10.0),
        rollout_delay=Pareto(1.0, 2.0),
        deadline=np.float32(5.0),
        min_group_size=np.int64(3),
        max_refill_rounds=np.int32(2),
    )
    assert (trainer.min_group_size, trainer.max_refill_rounds, trainer.deadline) == (3, 2, 5.0)
    assert type(trainer.min_group_size) is int and type(trainer.max_refill_rounds) is int


@needs_trl
def test_sagc_trl_study_summarises_every_scheme_from_its_steps(tmp_path):
    from dataclasses import replace

    from torchgcc.app.experiments import sagc_trl_study

    tiny = replace(
        sagc_trl_study.QUICK,
        static_sizes=(2,),
        candidate_sizes=(2, 4),
        fallback=2,
        deadline_size=4,
        deadline=3.0,
        token_seconds=1.0,
        seeds=(0,),
        steps=4,
        window=2,
        prompts_per_step=2,
        max_completion_length=2,
        dataset_size=32,
        hidden=16,
        max_refill_rounds=1,
    )
    result = sagc_trl_study.run(tiny, progress=False)
    records, histories = {r["scheme"]: r for r in result.records}, result.extra["histories"]
    assert list(records) == ["static G=2", "sagc", "sagc + dynamic sampling", "G=4 + deadline"]
    for scheme, record in records.items():
        (steps,) = histories[scheme]
        assert [step["step"] for step in steps] == [1, 2, 3, 4]
        assert record["mean_G"] == pytest.approx(statistics.fmean(step["G"] for step in steps))
        assert record["seconds_per_step"] == pytest.approx(statistics.fmean(step["seconds"] for step in steps))
        rewards = [step["reward"] for step in steps]
        assert record["reward_curve"] == pytest.approx([statistics.fmean(rewards[:2]), statistics.fmean(rewards[2:])])
        assert record["rounds_per_step"] == pytest.approx(statistics.fmean(step["rounds"] for step in steps))
        if scheme != "sagc + dynamic sampling":  # one controller observation per step
            assert record["event_rate"] == pytest.approx(statistics.fmean(step["event"] for step in steps))
            assert {step["rounds"] for step in steps} == {1}
    # every setting the run records is the one it ran: Config.max_refill_rounds bounds the refill rounds (the
    # trainer's default, 4, would allow 5 rounds; exact-match rewards of an untrained model are mostly equal)
    assert result.config["max_refill_rounds"] == 1
    assert max(step["rounds"] for step in histories["sagc + dynamic sampling"][0]) == 2
    assert records["static G=2"]["G_distribution"] == {2: 1.0} and records["static G=2"]["erased_fraction"] == 0
    deadline = histories["G=4 + deadline"][0]
    assert all(step["rollout_seconds"] <= 3.0 for step in deadline)
    assert records["G=4 + deadline"]["length_bias"] == pytest.approx(
        statistics.fmean(
            s["kept_completion_length"] - s["completion_length"] for s in deadline if s["kept_completion_length"]
        )
    )
    paths = sagc_trl_study.report(result, tmp_path, console=None)
    assert {path.name for path in paths} == {"results.json", "results.csv", "table.md", "sagc_trl.png"}
    assert sagc_trl_study.docs_table({"records": result.records, "config": result.config}).count("\n") == 6
