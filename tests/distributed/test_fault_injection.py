"""Fault injection: what goes wrong in real runs, and what the trainer guarantees then.

Every test injects a real fault: a signal, a damaged or hostile file, a bad flag. Faults
that need a process boundary (signals, SIGKILL, spawned gloo workers, a checkpoint writer)
hit real processes; the single-worker runs that meet a damaged file or a bad flag run the
CLI's ``main()`` in this process (``cli_in_process``: the same code path without a Python
start-up), and one bad input also goes through the script in a real process.

 1. SIGKILL while a checkpoint is being written
    -> the previous checkpoint and ``latest`` stay intact and loadable; a leftover
       temp file is never taken for a checkpoint.
 2. SIGTERM / SIGINT during training (1 worker, and 2 spawned workers)
    -> exit 143 / 130 after "interrupted at episode N, checkpoint saved"; the
       checkpoint holds episode N and ``--resume`` continues from it. A second
       signal exits at once (no waiting for the update).
 3. A corrupt or truncated checkpoint
    -> loading fails with one clear error naming the file; ``--resume`` falls back
       to the newest valid checkpoint and says so on stderr; none valid -> exit 2.
 4. A crafted pickle whose unpickling has a side effect, as the newest checkpoint
    -> it is never executed (weights_only loading); ``--resume`` falls back.
 5. Exact resume (1 worker, and 2 gloo workers) from a mid-run checkpoint
    -> final parameters bitwise equal to the uninterrupted run, same episode lines.
 8. Bad inputs (counts, device, batch split, data file, market, resume, model sizes, CSV)
    -> one stderr line each, exit 2, no traceback.

Faults across processes (a second run on the same directory, a rank failing mid-run):
``test_job_failures.py``; non-finite updates (6) and an unwritable checkpoint directory (7):
``test_faults_in_training.py``.
"""
from __future__ import annotations

import datetime
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import (SPAWN2, TINY, Run, assert_models_equal, assert_no_process_left, cli_in_process, copy_checkpoint,
                      env_for_child, episode_lines, load_state, run_cli, training_started, wait_for)
from ppo_lstm.rundir.checkpoint import CheckpointDir, CheckpointError, load_checkpoint

pytestmark = pytest.mark.timeout(180)

LONG = ["--episodes", "1000000", "--checkpoint-interval", "1000000", "--log-interval", "2"]
EXACT = ["--episodes", "16", "--checkpoint-interval", "4", "--log-interval", "2"]  # checkpoints every 4 episodes


def interrupted_episode(cwd: Path) -> int:
    found = re.findall(r"^interrupted at episode (\d+), checkpoint saved$", (cwd / "training.log").read_text(),
                       re.MULTILINE)
    assert len(found) == 1, (cwd / "training.log").read_text()[-2000:]
    return int(found[0])


def newest(directory: Path) -> tuple[Path, dict]:
    path, state, skipped = CheckpointDir(directory).load_newest_valid()
    assert not skipped
    return path, state


def checkpoint_with_episodes(directory: Path, episodes: int) -> Path:
    for path in CheckpointDir(directory).checkpoints():
        if load_checkpoint(path)["counters"]["global_episodes"] == episodes:
            return path
    raise AssertionError(f"no checkpoint at episode {episodes} in {directory}")


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """An uninterrupted 1-worker run of 16 episodes, a checkpoint every 4 (keeps u4, u6, u8)."""
    cwd = tmp_path_factory.mktemp("single")
    result = cli_in_process(cwd, *TINY, *EXACT)
    assert result.returncode == 0, result.output
    return cwd


def copy_run(source: Path, target: Path) -> Path:
    shutil.copytree(source / "checkpoints", target / "checkpoints",
                    ignore=shutil.ignore_patterns("metrics.csv", ".lock"))
    return target / "checkpoints"


# ----------------------------------------------------------------------------- 1. SIGKILL while saving

WRITER = """
import sys, torch
from ppo_lstm.rundir.checkpoint import CheckpointDir
directory, update = CheckpointDir(sys.argv[1], keep=2), int(sys.argv[2])
payload = torch.empty(8_000_000)  # 32 MB per checkpoint
while True:
    payload.fill_(float(update))
    print(f"saving {update}", flush=True)
    directory.save({"model": {"w": payload}, "counters": {"update": update}}, update, is_best=update % 2 == 0)
    print(f"saved {update}", flush=True)
    update += 1
"""


@pytest.mark.e2e
def test_sigkill_during_checkpoint_writes(tmp_path):
    directory = tmp_path / "checkpoints"
    directory.mkdir()
    CheckpointDir(directory, keep=2).save({"model": {"w": torch.zeros(3)}, "counters": {"update": 1}}, 1, True)
    rng = random.Random(5)
    last_saved, mid_write_kills = 1, 0
    for iteration in range(4):
        child = subprocess.Popen([sys.executable, "-c", WRITER, str(directory), str(last_saved + 1)],
                                 cwd=tmp_path, stdout=subprocess.PIPE, text=True, env=env_for_child())
        try:
            started, seconds = {}, []
            while True:  # time a couple of saves, then kill at a random moment inside the next one
                line = child.stdout.readline()
                assert line, "checkpoint writer died"
                what, update = line.split()
                if what == "saving":
                    started[update] = time.monotonic()
                    if len(seconds) >= 2:
                        time.sleep(rng.uniform(0.0, 1.2 * max(seconds)))
                        child.kill()
                        break
                else:
                    seconds.append(time.monotonic() - started[update])
                    last_saved = int(update)
            rest = child.stdout.read().split()  # saves may have finished before the kill landed
            last_saved = max([last_saved] + [int(n) for w, n in zip(rest[::2], rest[1::2]) if w == "saved"])
        finally:
            child.kill()
            child.wait(timeout=30)
            child.stdout.close()
        temps = [p for p in directory.iterdir() if p.name.endswith(".tmp")]
        mid_write_kills += bool(temps)
        # the newest checkpoint is the last one saved (or the one in flight if its rename landed)
        path, state = newest(directory)
        assert state["counters"]["update"] in (last_saved, last_saved + 1), (iteration, path, last_saved)
        assert bool((state["model"]["w"] == float(state["counters"]["update"])).all())
        listed = CheckpointDir(directory).checkpoints()
        assert not set(temps) & set(listed)
        for path in listed:  # every file that looks like a checkpoint is a whole one
            load_checkpoint(path)
        if (directory / "best.pt").exists():
            load_checkpoint(directory / "best.pt")
        last_saved = state["counters"]["update"]
    assert mid_write_kills >= 1, "no kill landed while a file was being written"
    assert_no_process_left(tmp_path)


# ----------------------------------------------------------------------------- 2. SIGTERM / SIGINT


@pytest.mark.e2e
@pytest.mark.parametrize("workers", [[], SPAWN2], ids=["1worker", "2workers"])
def test_sigterm_checkpoints_and_resumes(cwd, workers):
    run = Run(cwd, [*TINY, *workers, *LONG])
    wait_for(lambda: training_started(cwd), 60, "training to start", run)
    run.signal(signal.SIGTERM)
    result = run.wait(timeout=60)
    assert result.returncode == 143, result.output
    assert "Traceback" not in result.output
    done = interrupted_episode(cwd)
    path, state = newest(cwd / "checkpoints")
    assert state["counters"]["global_episodes"] == done
    assert not (cwd / "checkpoints" / ".lock").exists()

    resume = run_cli if workers else cli_in_process  # the 1-worker resume in this process (no signal there)
    resumed = resume(cwd, *TINY, *workers, "--episodes", str(done + 4), "--log-interval", "2", "--resume")
    assert resumed.returncode == 0, resumed.output
    assert f"Resumed from checkpoints/{path.name} at episode {done}/{done + 4}" in resumed.stdout
    assert f"Training finished: {done + 4} episodes" in resumed.stdout
    assert newest(cwd / "checkpoints")[1]["counters"]["global_episodes"] == done + 4


@pytest.mark.e2e
def test_sigint_exits_130_with_checkpoint(cwd):
    run = Run(cwd, [*TINY, *LONG])
    wait_for(lambda: training_started(cwd), 60, "training to start", run)
    run.signal(signal.SIGINT)
    result = run.wait(timeout=60)
    assert result.returncode == 130, result.output
    assert "Traceback" not in result.output
    done = interrupted_episode(cwd)
    assert newest(cwd / "checkpoints")[1]["counters"]["global_episodes"] == done


@pytest.mark.e2e
def test_second_signal_exits_at_once(cwd):
    # updates of ~2 s: the first SIGTERM waits for the update to end, the second must not
    run = Run(cwd, [*TINY, *LONG, "--update-interval", "2048", "--epochs", "30"])
    wait_for(lambda: training_started(cwd), 60, "training to start", run)
    run.signal(signal.SIGTERM)
    time.sleep(0.3)
    second = time.monotonic()
    run.signal(signal.SIGTERM)
    result = run.wait(timeout=60)
    assert time.monotonic() - second < 1.5
    assert result.returncode == 143
    assert "second SIGTERM: exiting now" in result.stderr
    assert "interrupted at episode" not in (cwd / "training.log").read_text()


# ----------------------------------------------------------------------------- 3. corrupt checkpoints


def test_corrupt_checkpoint_error_names_file(single, tmp_path):
    good = single / "checkpoints" / "checkpoint_u00000008.pt"
    data = good.read_bytes()
    cases = {"truncated.pt": data[: len(data) // 2], "garbage.pt": os.urandom(4096), "empty.pt": b""}
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(CheckpointError) as info:
            load_checkpoint(path)
        assert str(path) in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")


def test_resume_falls_back_past_corrupt_checkpoint(single, cwd):
    directory = copy_run(single, cwd)
    newest_file = directory / "checkpoint_u00000008.pt"
    newest_file.write_bytes(newest_file.read_bytes()[:5000])  # truncated: a crash mid-copy, a full disk...
    result = cli_in_process(cwd, *TINY, "--episodes", "20", "--log-interval", "2", "--resume")
    assert result.returncode == 0, result.output
    assert re.search(r"warning: checkpoints/checkpoint_u00000008\.pt: not a valid checkpoint .*; "
                     r"falling back to an older checkpoint", result.stderr), result.stderr
    assert "Resumed from checkpoints/checkpoint_u00000006.pt at episode 12/20" in result.stdout
    assert "Training finished: 20 episodes" in result.stdout


def test_resume_with_no_valid_checkpoint_exits_2(single, cwd):
    directory = copy_run(single, cwd)
    for path in CheckpointDir(directory).checkpoints():
        path.write_bytes(b"PK\x03\x04 not really")
    result = cli_in_process(cwd, *TINY, "--episodes", "20", "--resume")
    assert result.returncode == 2
    assert len(result.error_lines()) == 1, result.stderr
    assert "--resume: no valid checkpoint in checkpoints" in result.stderr
    for name in ("checkpoint_u00000004.pt", "checkpoint_u00000006.pt", "checkpoint_u00000008.pt"):
        assert name in result.stderr
    assert "Traceback" not in result.output


# ----------------------------------------------------------------------------- 4. hostile pickle


class Payload:
    """Unpickling this runs code: it writes ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('pwned')",)


def hostile_checkpoint(path: Path, marker: Path) -> None:
    torch.save({"format": 1, "model": {}, "counters": {}, "payload": Payload(marker)}, path)


def test_hostile_pickle_is_never_run(single, cwd, tmp_path):
    # the payload is real: a plain (unsafe) torch.load runs it
    proof_marker, proof = tmp_path / "proof-marker", tmp_path / "proof.pt"
    hostile_checkpoint(proof, proof_marker)
    torch.load(proof, weights_only=False)
    assert proof_marker.read_text() == "pwned"

    marker = tmp_path / "marker"
    directory = copy_run(single, cwd)
    evil = directory / "checkpoint_u00000009.pt"
    hostile_checkpoint(evil, marker)
    (directory / "latest").write_text(evil.name + "\n")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(evil)
    assert str(evil) in str(info.value)
    assert not marker.exists()

    result = cli_in_process(cwd, *TINY, "--episodes", "20", "--log-interval", "2", "--resume")
    assert result.returncode == 0, result.output
    assert not marker.exists()
    assert "checkpoint_u00000009.pt: not a valid checkpoint" in result.stderr
    assert "Resumed from checkpoints/checkpoint_u00000008.pt at episode 16/20" in result.stdout


# ----------------------------------------------------------------------------- 5. exact resume


@pytest.fixture(scope="module")
def spawned_exact(tmp_path_factory):
    """The uninterrupted 2-worker run for the exact-resume test."""
    cwd = tmp_path_factory.mktemp("spawned_exact")
    result = run_cli(cwd, *TINY, *SPAWN2, *EXACT)
    assert result.returncode == 0, result.output
    return cwd


@pytest.mark.parametrize("workers", ["1worker", pytest.param("2workers", marks=pytest.mark.e2e)])
def test_exact_resume_from_mid_run_checkpoint(request, cwd, workers):
    flags = [] if workers == "1worker" else SPAWN2
    run_a = request.getfixturevalue("single" if workers == "1worker" else "spawned_exact")
    mid = checkpoint_with_episodes(run_a / "checkpoints", 8)
    final = newest(run_a / "checkpoints")[0]
    copy_checkpoint(run_a / "checkpoints", mid.name, cwd / "checkpoints")

    resume = cli_in_process if workers == "1worker" else run_cli
    result = resume(cwd, *TINY, *flags, *EXACT, "--resume")
    assert result.returncode == 0, result.output
    assert f"Resumed from checkpoints/{mid.name} at episode 8/16" in result.stdout
    assert "environments and per-rank RNG streams restarted" not in result.output  # same layout: exact

    state_a, state_b = load_state(final), load_state(cwd / "checkpoints" / final.name)
    assert_models_equal(state_a["model"], state_b["model"])
    wall = ("train_seconds",)  # the run's wall time: the one counter a resume cannot repeat
    assert {k: v for k, v in state_a["counters"].items() if k not in wall} == \
        {k: v for k, v in state_b["counters"].items() if k not in wall}
    after_resume = [line for line in episode_lines(run_a / "training.log")
                    if int(line.split()[1].split("/")[0]) > 8]
    assert after_resume and episode_lines(cwd / "training.log") == after_resume


# ----------------------------------------------------------------------------- 8. bad inputs

BAD_CSV_ROWS = 40


def bad_csv(directory: Path) -> Path:
    """A daily OHLCV file, long enough for one episode, with one negative close."""
    lines = ["Date,Open,High,Low,Close,Volume"]
    for day in range(BAD_CSV_ROWS):
        close = -5.0 if day == 17 else 100.0 + day
        stamp = datetime.date(2020, 1, 1) + datetime.timedelta(days=day)
        lines.append(f"{stamp.isoformat()},{100 + day},{110 + day},{90 + day},{close},1000")
    path = directory / "prices.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


BAD_INPUTS = {
    "episodes-zero": (["--episodes", "0"], "--episodes must be a positive count, got 0"),
    "num-envs-negative": (["--num-envs", "-1"], "--num-envs must be a positive count, got -1"),
    "update-interval": (["--update-interval", "33"], "--update-interval 33 does not divide into 1 worker(s) x 2 envs"),
    "missing-data": (["--data", "no/such/prices.csv"], "no/such/prices.csv"),
    "unknown-market": (["--market", "foo"], "invalid choice: 'foo'"),
    "resume-nothing": (["--resume"], "--resume: no checkpoint found in checkpoints"),
    "bad-csv": (["--data", "prices.csv"], "non-positive price -5 in column 'Close'"),
    "model-sizes": (["--resume", "--hidden-size", "32"], "holds a model built with --hidden-size 16"),
    "cuda": (["--device", "cuda"], "--device cuda was asked for but no CUDA device is visible"),
    "num-gpus-cuda": (["--device", "cuda", "--distributed", "--num-gpus", "64"], None),
}


REAL_PROCESS = "bad-csv"  # the case run through the script: the whole stderr of a real process is its one line


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.e2e) if c == REAL_PROCESS else c
                                  for c in BAD_INPUTS])
def test_bad_input_is_one_line_exit_2(case, cwd, single):
    args, expected = BAD_INPUTS[case]
    if case in ("cuda", "num-gpus-cuda") and torch.cuda.is_available():
        if case == "cuda":
            pytest.skip("a CUDA device is visible here")
        expected = "asks for more GPUs than the"
    elif case == "num-gpus-cuda":
        expected = "--device cuda was asked for but no CUDA device is visible"
    if case == "bad-csv":
        bad_csv(cwd)
    if case == "model-sizes":
        copy_run(single, cwd)
    if case == REAL_PROCESS:
        result = run_cli(cwd, *TINY, "--episodes", "4", *args, timeout=60)
    else:
        result = cli_in_process(cwd, *TINY, "--episodes", "4", *args)
    assert result.returncode == 2, result.output
    assert len(result.error_lines()) == 1, result.stderr
    assert expected in result.stderr, result.stderr
    assert "Traceback" not in result.output
    if case == "model-sizes":
        assert "this run asks for --hidden-size 32" in result.stderr
    if case == "bad-csv":
        assert "prices.csv" in result.stderr
    assert not list(cwd.glob("checkpoints/.*.tmp"))
