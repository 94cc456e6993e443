"""Multi-node torchrun on one machine: two torchrun agents (``--nnodes 2 --rdzv-backend c10d``, the same
``--rdzv-id`` and endpoint), each its own process tree as on two machines, so RANK and LOCAL_RANK differ, which
single-node runs never exercise. The executor survives a real SIGKILL of a worker on the node without rank 0; the
gradient-coding runtime trains across the two nodes and matches its simulator."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from processes import alive

from torchgcc.app.commands.gradient_coding_job import build_job
from torchgcc.distributed.latency_trace import trace_from_saved_run
from torchgcc.distributed.launch import free_port
from torchgcc.gradient_coding import Simulation
from torchgcc.gradient_coding.gradients import flat_parameters

pytestmark = pytest.mark.distributed


class TwoNodes:
    """Two torchrun agents of one job on localhost, each in its own session; their output goes to files."""

    def __init__(self, folder: Path, run_id: str, module: str, args: list[str], nproc_per_node: int = 2) -> None:
        self.folder, self.run_id = folder, run_id
        port = free_port()
        env = dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=str(folder))
        self.agents = []
        # a hosts the rendezvous store (is_host=1) and sorts first (--local-addr), so it is node 0 with rank 0:
        # the other node can then fail without taking the store, or rank 0, with it
        for node, addr, host in (("a", "127.0.0.1", "1"), ("b", "127.0.0.2", "0")):
            command = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--nproc-per-node",
                str(nproc_per_node),
                "--rdzv-backend",
                "c10d",
                "--rdzv-endpoint",
                f"localhost:{port}",
                "--rdzv-id",
                run_id,
                "--rdzv-conf",
                f"is_host={host}",
                "--local-addr",
                addr,
                "--max-restarts",
                "0",
                "--log-dir",
                str(folder / "logs"),
                "-m",
                module,
                *args,
            ]
            out, err = open(folder / f"{node}.out", "w"), open(folder / f"{node}.err", "w")
            self.agents.append(subprocess.Popen(command, stdout=out, stderr=err, env=env, start_new_session=True))
        self.ranks: dict[int, int] = {}  # rank -> pid, once found

    def records(self) -> list[dict]:
        """JSON lines of rank 0 (on whichever node it landed)."""
        lines = []
        for node in ("a", "b"):
            lines += [line for line in (self.folder / f"{node}.out").read_text().splitlines() if line.startswith("{")]
        return [json.loads(line) for line in lines]

    def find_ranks(self) -> dict[int, int]:
        """``{RANK: pid}`` of this job's worker processes (read from /proc)."""
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                environ = dict(
                    item.split("=", 1) for item in (entry / "environ").read_text().split("\0") if "=" in item
                )
            except OSError:
                continue
            if environ.get("TORCHELASTIC_RUN_ID") == self.run_id and "RANK" in environ:
                self.ranks[int(environ["RANK"])] = int(entry.name)
        return self.ranks

    def wait_for(self, condition, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline or all(a.poll() is not None for a in self.agents):
                break
            time.sleep(0.1)

    def stop(self) -> None:
        """End both process trees (SIGTERM, then SIGKILL)."""
        for agent in self.agents:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGTERM)
        for agent in self.agents:
            try:
                agent.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()

    def stderr(self) -> str:
        return "".join((self.folder / f"{n}.err").read_text()[-3000:] for n in ("a", "b"))


def _ancestors(pid: int) -> list[int]:
    """``pid``'s parent, grandparent, ... up to init."""
    chain = []
    while pid > 1:
        pid = int(Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[1])
        chain.append(pid)
    return chain


def test_executor_on_two_agents_survives_a_sigkilled_worker_on_the_other_node(tmp_path):
    """Ranks 0-1 on node a (which also hosts the rendezvous store), 2-3 on node b. After step 4, rank 3 is
    SIGKILLed: its agent tears node b down (rank 2 too), node a goes on and every step still decodes, from rank 1's
    workers [0, 3]. The surviving agent would then wait 300 s at torchrun's exit barrier for the failed one; it is
    stopped once rank 0 wrote its summary, and no process or torchelastic folder is left."""
    save = tmp_path / "run.pt"
    job = [
        *("-N", "6", "-K", "3", "-S", "1", "--steps", "50", "--mode", "injected", "--deadline", "0"),
        *("--latency-param", "shift=0.05", "--latency-param", "scale=0.005"),  # >= 2 s of steps after the kill
        *("--heartbeat-timeout", "1", "--slow-worker", "4", "--slow-delay", "0.5", "--save", str(save)),
    ]
    nodes = TwoNodes(tmp_path, "torchgcc-test-executor", "torchgcc.distributed", job)
    try:
        nodes.wait_for(lambda: any(r.get("step") == 4 for r in nodes.records()), 90)
        ranks = nodes.find_ranks()
        assert sorted(ranks) == [0, 1, 2, 3], nodes.stderr()
        agents = [a.pid for a in nodes.agents]
        assert [next(p for p in _ancestors(ranks[r]) if p in agents) for r in range(4)] == [agents[0]] * 2 + [
            agents[1]
        ] * 2  # ranks 0 and 1 descend from node a's agent, 2 and 3 from node b's
        start = next(r for r in nodes.records() if r.get("event") == "start")
        assert start["world_size"] == 4 and start["layout"] == {"1": [0, 3], "2": [1, 4], "3": [2, 5]}
        os.kill(ranks[3], signal.SIGKILL)
        nodes.wait_for(lambda: any(r.get("event") == "summary" for r in nodes.records()), 90)
    finally:
        nodes.stop()
    records = nodes.records()
    steps = [r for r in records if "step" in r]
    assert [r["step"] for r in steps] == list(range(50)), nodes.stderr()
    summary = records[-1]
    assert summary["event"] == "summary" and summary["status"] == 0 and summary["lost_workers"] == [1, 2, 4, 5]
    assert steps[-1]["arrived"] == [0, 3] and steps[0]["arrived"] == [0, 1, 2, 3, 5]  # worker 4 is 0.5 s late
    assert not any(alive(pid) for pid in [*nodes.ranks.values(), *(a.pid for a in nodes.agents)])
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("torchelastic_")]
    trace = trace_from_saved_run(save)  # a latency trace recorded from this two-node run
    assert trace.delays_s.shape == (50, 6) and trace.censored[-1].tolist() == [False, True, True, False, True, True]


def test_gradient_coding_runtime_on_two_agents_matches_the_simulator(tmp_path):
    """Cyclic-repetition gradient coding, s = 1, n = 3 workers on ranks 1-3 of two nodes, worker 2 (on the other
    node) 2 s late at every step: no step waits for it, and the model equals the simulator's for the same
    arrivals."""
    path = tmp_path / "run.pt"
    args = ["--scheme", "gc-cr", "-s", "1", "--steps", "6", "--slow-worker", "2", "--slow-delay", "2"]
    nodes = TwoNodes(tmp_path, "torchgcc-test-gc", "torchgcc.gradient_coding.runtime", [*args, "--save", str(path)])
    try:
        nodes.wait_for(lambda: all(a.poll() is not None for a in nodes.agents), 120)
        codes = [a.poll() for a in nodes.agents]
    finally:
        nodes.stop()
    assert codes == [0, 0], nodes.stderr()
    steps = [r for r in nodes.records() if "step" in r and "event" not in r]
    assert [r["step"] for r in steps] == list(range(6)) and all(2 not in r["arrived"] for r in steps)
    saved = torch.load(path, weights_only=False)
    _, job = build_job(args, num_workers=3)
    Simulation(job.code, job.model, job.data, lr=job.lr, delays=None).run(job.steps, arrivals=saved["arrivals"])
    torch.testing.assert_close(saved["parameters"], flat_parameters(job.model), rtol=0, atol=1e-6)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("torchelastic_")]
