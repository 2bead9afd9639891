"""Distributed training end to end: real processes, real gloo over loopback.

Covers the spawn launcher (``--distributed --device cpu``), ``torchrun`` on one
node and on two "nodes" (two torchrun agents on localhost), the split of episodes
and of the update batch over workers, a worker killed mid-run, resuming with a
different number of workers, and the rendezvous port choice.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import time
from pathlib import Path

import pytest

from conftest import (SPAWN2, TINY, TRAIN, Run, assert_models_equal, assert_no_process_left, children_of,
                      cli_in_process, episode_lines, free_port, load_state, run_cli, torchrun, training_started,
                      wait_for)
from ppo_lstm.config.plan import steps_per_env
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.distributed import episode_share
from ppo_lstm.errors import UsageError

pytestmark = pytest.mark.timeout(180)


def checkpoint_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("checkpoint_u*.pt"))


def newest_checkpoint(directory: Path) -> dict:
    return load_state(directory / (directory / "latest").read_text().strip())


@pytest.fixture(scope="module")
def spawned(tmp_path_factory):
    """One 2-worker spawned run of 11 episodes (checksum every update, each rank dumps its
    final state), run while port 12355 is held by someone else."""
    cwd = tmp_path_factory.mktemp("spawned")
    dump = tmp_path_factory.mktemp("dump")
    blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        blocker.bind(("localhost", 12355))
        blocker.listen()
    except OSError:
        pass  # already taken by another process: just as good
    try:
        result = run_cli(cwd, *TINY, *SPAWN2, "--episodes", "11", "--sync-check-interval", "1",
                         "--log-interval", "4", "--checkpoint-interval", "4",
                         env={"PPO_LSTM_DUMP_FINAL_DIR": str(dump)})
    finally:
        blocker.close()
    return result, dump


@pytest.mark.e2e
def test_spawned_workers_end_bitwise_equal(spawned):
    result, dump = spawned
    assert result.returncode == 0, result.output
    assert "diverged" not in result.output  # the per-update checksum never disagreed
    rank0, rank1 = load_state(dump / "rank0_final.pt"), load_state(dump / "rank1_final.pt")
    assert_models_equal(rank0["model"], rank1["model"])
    for key, state in rank0["optimizer"]["state"].items():
        for name, value in state.items():
            assert (value == rank1["optimizer"]["state"][key][name]).all(), (key, name)
    # and the checkpoint holds exactly those weights
    assert_models_equal(rank0["model"], newest_checkpoint(result.cwd / "checkpoints")["model"])


@pytest.mark.e2e
def test_spawned_run_log_and_checkpoint(spawned):
    result, _ = spawned
    assert result.returncode == 0, result.output
    log = result.cwd / "training.log"
    lines = episode_lines(log)
    assert lines and all(line.endswith("| Workers: 2") for line in lines)  # CPU workers
    assert [p.name for p in result.cwd.iterdir() if p.is_dir()] == ["checkpoints"]
    state = newest_checkpoint(result.cwd / "checkpoints")
    assert state["world_size"] == 2
    assert len(state["ranks"]) == 2
    assert not any(key.startswith("module.") for key in state["model"])
    assert not (result.cwd / "checkpoints" / ".lock").exists()


@pytest.mark.e2e
def test_default_port_taken_still_runs(spawned):
    """The spawned fixture ran while 12355 was taken: a free port was picked instead."""
    result, _ = spawned
    assert result.returncode == 0, result.output
    assert "Training finished: 11 episodes" in result.stdout


def test_episode_share_unit():
    assert [episode_share(11, r, 2) for r in range(2)] == [6, 5]
    assert [episode_share(10, r, 3) for r in range(3)] == [4, 3, 3]
    assert [episode_share(7, r, 1) for r in range(1)] == [7]
    assert sum(episode_share(1001, r, 8) for r in range(8)) == 1001


@pytest.mark.e2e
def test_episode_split_end_to_end(spawned):
    result, _ = spawned
    assert result.returncode == 0, result.output
    assert "episodes per worker: 6 / 5" in result.stdout
    assert episode_lines(result.cwd / "training.log")[-1].startswith("Episode 11/11 ")
    assert "Training finished: 11 episodes" in result.stdout
    phases = re.search(r"^Time by phase \(rank 0\): rollout \d+%, gather \d+%, update \d+%, "
                       r"logging \d+%, hold-out \d+%, checkpoints \d+%(, sync check \d+%)?$", result.stdout, re.M)
    assert phases, result.stdout
    assert re.search(r"^Time by phase \(rank 1\): rollout \d+%, gather \d+%, update \d+%", result.stdout, re.M)
    peaks = re.search(r"^Peak memory per worker: (\d+) / (\d+) MiB$", result.stdout, re.M)
    assert peaks and all(50 < int(p) < 4096 for p in peaks.groups()), result.stdout
    state = newest_checkpoint(result.cwd / "checkpoints")
    assert state["counters"]["global_episodes"] == 11
    assert [rank["rank_episodes"] for rank in state["ranks"]] == [6, 5]


def test_steps_per_env_unit():
    config = TrainConfig(update_interval=32, num_envs=2)
    assert steps_per_env(config, 1) == 16
    assert steps_per_env(config, 2) == 8
    assert steps_per_env(config, 4) == 4
    config.update_interval = 30
    with pytest.raises(UsageError) as info:
        steps_per_env(config, 2)
    message = str(info.value)
    assert "--update-interval 30" in message and "2 worker(s) x 2 envs" in message
    assert "multiple of 4" in message and "4, 8, 12, 16" in message
    assert "\n" not in message


def test_update_interval_not_dividing_exits_2(cwd):
    result = cli_in_process(cwd, *TINY, *SPAWN2, "--update-interval", "30", "--episodes", "4")
    assert result.returncode == 2
    assert len(result.error_lines()) == 1, result.stderr
    assert "--update-interval 30 does not divide into 2 worker(s) x 2 envs" in result.stderr
    assert "Traceback" not in result.output
    assert not (cwd / "checkpoints").exists() or not list((cwd / "checkpoints").glob("*.pt"))


@pytest.mark.e2e
def test_torchrun_standalone(cwd):
    result = run_cli(cwd, *TINY, "--episodes", "8", "--log-interval", "4",
                     launcher=torchrun("--standalone", "--nproc-per-node=2", TRAIN), timeout=120)
    assert result.returncode == 0, result.output
    lines = episode_lines(cwd / "training.log")
    assert lines and all(line.endswith("| Workers: 2") for line in lines)  # CPU workers
    assert [p.name for p in cwd.iterdir() if p.is_dir()] == ["checkpoints"]
    state = newest_checkpoint(cwd / "checkpoints")
    assert state["world_size"] == 2 and state["counters"]["global_episodes"] == 8
    assert not any(key.startswith("module.") for key in state["model"])


@pytest.mark.e2e
def test_two_nodes_on_loopback(tmp_path):
    """Two torchrun agents (node 0 and node 1, one worker each) with static rendezvous."""
    port = free_port()
    nodes = [Run(tmp_path / f"node{rank}", [*TINY, "--episodes", "8", "--log-interval", "4"],
                 launcher=torchrun("--nnodes", "2", "--node-rank", str(rank), "--nproc-per-node", "1",
                                   "--master-addr", "localhost", "--master-port", str(port), TRAIN))
             for rank in (0, 1)]
    results = [node.wait(timeout=120) for node in nodes]
    for result in results:
        assert result.returncode == 0, result.output
    node0, node1 = (tmp_path / "node0", tmp_path / "node1")
    state = newest_checkpoint(node0 / "checkpoints")
    assert state["world_size"] == 2 and state["counters"]["global_episodes"] == 8
    assert all(line.endswith("| Workers: 2") for line in episode_lines(node0 / "training.log"))
    assert not checkpoint_files(node1 / "checkpoints") and not (node1 / "training.log").exists()


@pytest.mark.e2e
def test_killed_worker_fails_the_job(cwd):
    run = Run(cwd, [*TINY, *SPAWN2, "--episodes", "1000000", "--checkpoint-interval", "1000000"])
    wait_for(lambda: training_started(cwd), 60, "training to start", run)
    workers = []  # the launcher's children but multiprocessing's resource tracker (CPU workers are forked)
    for child in children_of(run.pid):
        try:
            if b"resource_tracker" not in Path(f"/proc/{child}/cmdline").read_bytes():
                workers.append(child)
        except OSError:
            pass
    assert len(workers) == 2, workers
    killed_at = time.monotonic()
    os.kill(workers[1], signal.SIGKILL)
    result = run.wait(timeout=60)
    assert time.monotonic() - killed_at < 60
    assert result.returncode != 0
    assert "error: worker rank 1" in result.stderr and "was killed by SIGKILL" in result.stderr
    assert_no_process_left(cwd)


@pytest.mark.e2e
@pytest.mark.parametrize("before, after", [(2, 1), (1, 2)], ids=["2to1", "1to2"])
def test_resume_with_other_world_size(cwd, before, after):
    workers = {1: [], 2: SPAWN2}
    run = {1: cli_in_process, 2: run_cli}  # the 1-worker side in this process, the 2-worker one spawned
    first = run[before](cwd, *TINY, *workers[before], "--episodes", "8", "--log-interval", "4")
    assert first.returncode == 0, first.output
    second = run[after](cwd, *TINY, *workers[after], "--episodes", "14", "--log-interval", "4", "--resume")
    assert second.returncode == 0, second.output
    warning = (f"warning: the checkpoint was written by {before} worker(s) x 2 envs and this run has {after} x 2: "
               f"weights, optimizer and counters restored; environments and per-rank RNG streams restarted")
    assert second.output.count(warning) == 1 and "RuntimeWarning" not in second.output  # once, on the console
    log = (cwd / "training.log").read_text()
    assert warning in log
    assert "Resumed from checkpoints/checkpoint_u" in log and "at episode 8/14" in log
    assert episode_lines(cwd / "training.log")[-1].startswith("Episode 14/14 ")
    assert "Training finished: 14 episodes" in second.stdout
    state = newest_checkpoint(cwd / "checkpoints")
    assert state["world_size"] == after and state["counters"]["global_episodes"] == 14


@pytest.mark.e2e
def test_master_port_taken_exits_2(cwd):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("localhost", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli(cwd, *TINY, *SPAWN2, "--episodes", "4", "--master-port", str(port), timeout=60)
    assert result.returncode == 2
    assert len(result.error_lines()) == 1, result.stderr
    assert f"--master-port {port} is already in use" in result.stderr and "pass a free port, e.g. --master-port" \
        in result.stderr
    assert "Traceback" not in result.output
    assert not (cwd / "checkpoints" / ".lock").exists()


@pytest.mark.e2e
@pytest.mark.parametrize("all_ranks", [False, True], ids=["rank0-history", "all-ranks-history"])
def test_history_on_rank_0_and_simulated_markets_elsewhere(tmp_path, all_ranks):
    """With --data, rank 0 trades the file and rank 1 a simulated market; with
    --data-all-ranks both trade the file (their env price windows prove it)."""
    import numpy as np

    from envs.data import load_ohlcv
    from ppo_lstm.rundir.checkpoint import from_safe

    closes = 100 * np.exp(np.cumsum(np.random.default_rng(0).normal(0, 0.01, 300)))
    rows = [f"2024-01-{1 + i // 24:02d} {i % 24:02d}:00:00,{c},{c * 1.001},{c * 0.999},{c}"
            for i, c in enumerate(closes)]
    (tmp_path / "prices.csv").write_text("Date,Open,High,Low,Close\n" + "\n".join(rows) + "\n")
    history = load_ohlcv(tmp_path / "prices.csv").close
    flags = ["--data-all-ranks"] if all_ranks else []
    result = run_cli(tmp_path, *TINY, *SPAWN2, "--data", "prices.csv", "--episodes", "4", *flags)
    assert result.returncode == 0, result.output
    state = newest_checkpoint(tmp_path / "checkpoints")
    on_history = [bool(np.isin(from_safe(rank["env"])["close"], history).all()) for rank in state["ranks"]]
    assert on_history == [True, all_ranks]


@pytest.mark.e2e
def test_a_worker_usage_error_exits_2_with_its_own_line_only(tmp_path):
    """A spawned worker that rejects its input (exit 2, one line) makes the job exit 2
    without the launcher adding a second line."""
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import sys
        from ppo_lstm.config.schema import TrainConfig
        from ppo_lstm.distributed import launch

        def worker(config, w):
            if w.comm.rank == 0:
                print("error: something only a worker can see", file=sys.stderr)
            return 2

        if __name__ == "__main__":
            sys.exit(launch(TrainConfig(distributed=True, num_workers=2, device="cpu"), "cpu", worker))
    """))
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(root)}, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["error: something only a worker can see"]
