"""GRPO with SAGC: the task, the GRPO pieces, the loop and the experiment's bookkeeping."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
import torch

from torchgcc.app.experiments import sagc_study
from torchgcc.app.experiments.sagc_study import time_to_target
from torchgcc.app.statistics import seed_mean_ci
from torchgcc.control import GroupSizeHook, group_size_controller
from torchgcc.rl.countdown_task import CountdownTask
from torchgcc.rl.grpo import clipped_policy_loss, group_advantages
from torchgcc.rl.loop import GRPOConfig, makespan, train_grpo
from torchgcc.rl.policy import TinyPolicy

EOS = CountdownTask.EOS


def test_countdown_rewards_count_matching_positions_over_the_longer_length():
    task = CountdownTask(max_span=6, max_low=3)
    prompts = torch.tensor([[5, 2, 10]] * 5)  # correct answer 5 4 3 2
    answers = torch.tensor(
        [
            [5, 4, 3, 2, EOS, EOS],  # exact: 1
            [5, 4, EOS, EOS, EOS, EOS],  # 2 of max(2, 4)
            [5, 4, 3, 2, 1, 0],  # no EOS: 4 of 6
            [9, 4, 3, 2, EOS, EOS],  # 3 of 4
            [EOS, 4, 3, 2, 1, 0],  # empty: 0
        ]
    )
    assert task.rewards(prompts, answers).tolist() == pytest.approx([1.0, 0.5, 4 / 6, 0.75, 0.0])
    drawn = task.sample_prompts(500, torch.Generator().manual_seed(0))
    span = drawn[:, 0] - drawn[:, 1]
    assert (span >= 0).all() and (span <= 6).all() and (drawn[:, 1] <= 3).all() and (drawn[:, 0] <= 9).all()
    assert (drawn[:, 2] == task.SEP).all()


def test_group_advantages_and_clipped_loss_match_the_formulas():
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5, 0.2, 0.2, 0.2, 0.8])
    adv = group_advantages(rewards, 4)
    for group in range(2):
        r = rewards[4 * group : 4 * group + 4]
        assert torch.allclose(adv[4 * group : 4 * group + 4], (r - r.mean()) / (r.std() + 1e-4))
    with pytest.raises(ValueError, match="group_size"):
        group_advantages(rewards, 3)

    new = torch.tensor([[0.0, -1.0], [-0.5, -0.2]])
    old = torch.tensor([[-0.5, -1.0], [0.0, -0.2]])  # ratios e^0.5 (clipped to 1.2 for A > 0), 1, e^-0.5, 1
    advantages = torch.tensor([2.0, -1.0])
    mask = torch.tensor([[True, True], [True, False]])
    expected_first = (min(math.exp(0.5) * 2, 1.2 * 2) + 2.0) / 2
    expected_second = min(math.exp(-0.5) * -1, 0.8 * -1)  # the pessimistic (clipped) term for A < 0
    loss = clipped_policy_loss(new, old, advantages, mask, clip=0.2)
    assert loss.item() == pytest.approx(-(expected_first + expected_second) / 2)


def test_policy_scores_what_it_samples():
    torch.manual_seed(0)
    task = CountdownTask()
    policy = TinyPolicy(task.VOCAB, hidden=16)
    prompts = task.sample_prompts(6, torch.Generator().manual_seed(1))
    answers = policy.generate(prompts, task.max_new_tokens, eos=EOS, generator=torch.Generator().manual_seed(2))
    assert answers.shape == (6, task.max_new_tokens)
    # after the first EOS everything is EOS
    lengths = task.answer_lengths(answers)
    for row, length in zip(answers, lengths.tolist()):
        assert (row[length:] == EOS).all()
    log_probs = policy.answer_log_probs(prompts, answers)
    # teacher forcing of the first answer token equals the next-token distribution after the prompt
    first = policy(prompts)[:, -1].log_softmax(-1).gather(1, answers[:, :1]).squeeze(1)
    assert torch.allclose(log_probs[:, 0], first, atol=1e-6)


def test_makespan_is_list_scheduling():
    durations = torch.tensor([3.0, 1.0, 2.0, 2.0, 1.0])
    # 2 slots: 3 | 1, then 2 on slot B (ends 3), 2 on A or B (tie at 3 -> ends 5), 1 on the other (ends 4)
    assert makespan(durations, 2) == pytest.approx(5.0)
    assert makespan(durations, 5) == pytest.approx(3.0) and makespan(durations, 1) == pytest.approx(9.0)
    # Graham: list scheduling in any order is within a factor 2 - 1/m of the optimal assignment (brute force)
    best = min(
        max(sum(d for d, slot in zip(durations.tolist(), assign) if slot == side) for side in (0, 1))
        for assign in itertools.product((0, 1), repeat=5)
    )
    assert best == pytest.approx(5.0) and makespan(durations, 2) <= 1.5 * best


def test_time_to_target_uses_the_trailing_mean():
    steps = [{"reward": r, "clock": 10.0 * (i + 1)} for i, r in enumerate([0.1, 0.9, 0.9, 0.2, 1.0])]
    assert time_to_target(steps, 0.9, window=2) == 30.0  # mean of steps 1 and 2
    assert time_to_target(steps, 0.9, window=1) == 20.0
    assert math.isnan(time_to_target(steps, 0.95, window=2))


def test_seed_mean_ci_uses_student_t():
    mean, half = seed_mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0 and half == pytest.approx(4.302652729911275 * 1.0 / math.sqrt(3))
    assert all(math.isnan(value) for value in seed_mean_ci([1.0, math.nan]))


def test_grpo_loop_learns_and_follows_the_hook():
    config = GRPOConfig(steps=50, prompts_per_step=8, rollout_slots=32, seed=0)
    controller = group_size_controller((4, 8), prompts_per_step=8, budget=0.3, kappa=8.0, warmup=0, hold=1)
    records = train_grpo(config, GroupSizeHook(controller))
    assert [r["step"] for r in records] == list(range(50))
    assert {r["G"] for r in records} <= {4, 8} and controller.steps == 50
    assert all(b["clock"] > a["clock"] for a, b in zip(records, records[1:]))
    early = sum(r["reward"] for r in records[:10]) / 10
    late = sum(r["reward"] for r in records[-10:]) / 10
    assert late > early + 0.1  # real learning, not a constant


def test_run_sagc_summaries(tmp_path):
    tiny = replace(
        sagc_study.DEFAULT,
        static_sizes=(4,),
        candidate_sizes=(4, 8),
        seeds=(0, 1),
        grpo=replace(sagc_study.DEFAULT.grpo, steps=6, prompts_per_step=4),
        window=2,
        warmup=0,
        hold=1,
    )
    result = sagc_study.run(tiny, progress=False)
    records, histories = result.records, result.extra["histories"]
    assert [r["scheme"] for r in records] == ["static G=4", "sagc"]
    static = records[0]
    assert static["mean_G"] == 4.0 and static["G_distribution"] == {4: 1.0}
    assert len(histories["sagc"]) == 2 and len(histories["sagc"][0]) == 6
    events = [float(sum(step["event"] for step in run)) / 6 for run in histories["static G=4"]]
    assert static["event_rate"] == pytest.approx(sum(events) / 2)
    assert sum(records[1]["G_distribution"].values()) == pytest.approx(1.0)


def test_rl_script_runs_and_writes_json(tmp_path, capsys):
    from torchgcc.app.commands.grpo import main

    out = tmp_path / "run.json"
    assert main(["--sagc", "4,8", "--steps", "3", "--out", str(out)]) == 0
    assert "straggler-event rate" in capsys.readouterr().out
    import json

    payload = json.loads(out.read_text())
    assert len(payload["records"]) == 3 and payload["controller"]["sizes"] == [4, 8]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--sagc", "a,b"], "--sagc takes comma-separated integers"),
        (["--sagc", "4,4"], "group sizes must be distinct and at least 1"),
        (["--group-size", "0"], "group sizes must be distinct and at least 1"),
        (["--sagc", "4,8", "--budget", "2"], "--budget must lie in (0, 1)"),
        (["--sagc", "4,8", "--steps", "0"], "--steps be at least 1"),
    ],
)
def test_rl_script_rejects_bad_options_in_one_line(argv, message, capsys):
    from torchgcc.app.commands.grpo import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and err[-1].startswith("python -m torchgcc.rl: error:")
