"""Fault injection across processes: what the trainer guarantees when two runs or two ranks
collide (the faults within one run: ``test_fault_injection.py``).

 1. A second run on the same checkpoint directory
    -> exit 2 with a clear line while the first runs; the lock file is gone after.
 2. A failure on one rank mid-run (an unexpected exception on rank 1 or 0, also between
    two of an update's gradient-step sums; rank 0 unable to write a checkpoint), under
    spawn and torchrun
    -> the job ends within seconds, exit 1: the failing rank's one line (plus the
       traceback of an unexpected exception), one "stopped" line per other rank, no
       gloo errors, no process left.
 3. A rank that stalls inside an update -> the job ends within --dist-timeout, one line per rank.
"""
from __future__ import annotations

import signal
import sys
import time

import pytest

from conftest import (SPAWN2, TINY, TRAIN, Run, assert_no_process_left, cli_in_process, torchrun,
                      training_started, wait_for)

pytestmark = pytest.mark.timeout(180)

LONG = ["--episodes", "1000000", "--checkpoint-interval", "1000000", "--log-interval", "2"]


# ----------------------------------------------------------------------------- 1. concurrent runs


@pytest.mark.e2e
def test_second_run_on_same_dir_is_refused(tmp_path):
    first_cwd, second_cwd = tmp_path / "first", tmp_path / "second"
    directory = first_cwd / "checkpoints"
    first = Run(first_cwd, [*TINY, *LONG])
    wait_for(lambda: training_started(first_cwd), 60, "training to start", first)
    assert (directory / ".lock").read_text().strip() == str(first.pid)
    second_cwd.mkdir()  # the second run in this process: the lock it meets is the first process's
    second = cli_in_process(second_cwd, *TINY, "--episodes", "4", "--checkpoint-dir", str(directory))
    assert second.returncode == 2
    assert second.error_lines() == [f"error: checkpoint dir {directory} is in use by another run (pid {first.pid}); "
                                    f"wait for it to finish or choose another --checkpoint-dir"]
    assert first.process.poll() is None  # the first run is unharmed
    first.signal(signal.SIGTERM)
    assert first.wait(timeout=60).returncode == 143
    assert not (directory / ".lock").exists()
    assert_no_process_left(tmp_path)


def test_temp_files_of_a_killed_writer_are_removed_at_the_next_start(tmp_path):
    """A SIGKILL mid-save leaves a hidden temp file; the next run (holding the lock) deletes it
    and never lists it as a checkpoint."""
    from ppo_lstm.rundir.checkpoint import CheckpointDir

    directory = CheckpointDir(tmp_path)
    directory.save({"model": {}, "counters": {}}, update=1, is_best=False)
    leftover = tmp_path / ".checkpoint_u00000002.pt.12345.tmp"
    leftover.write_bytes(b"half a checkpoint")
    assert [p.name for p in directory.checkpoints()] == ["checkpoint_u00000001.pt"]
    assert directory.remove_stale_temp_files() == [leftover]
    assert not leftover.exists() and directory.load_newest_valid()[0].name == "checkpoint_u00000001.pt"


# ----------------------------------------------------------------------------- 2. a rank fails mid-run

FAIL_AT = "PPO_LSTM_FAIL_AT"  # test hook: "RANK:N" makes rank RANK raise before its N-th gather
LAUNCHERS = {"spawn": (SPAWN2, None), "torchrun": ([], torchrun("--standalone", "--nproc-per-node=2", TRAIN))}
ENDS_WITHIN = 30.0  # seconds from the failing rank's message to the end of the job (it was 10 s to 180 s)


def wait_for_failure(run: Run, line_start: str, timeout: float = 150.0):
    """Wait until stderr has a line starting with ``line_start`` (or the run ended); then the
    job must end within ENDS_WITHIN seconds. Returns the result and those seconds."""
    deadline = time.monotonic() + timeout
    while not any(line.startswith(line_start) for line in run.stderr_so_far().splitlines()):
        if run.process.poll() is not None:
            break
        if time.monotonic() > deadline:
            run.wait(timeout=0.1)  # kills the run and fails the test, showing its stderr
        time.sleep(0.05)
    seen = time.monotonic()
    result = run.wait(timeout=ENDS_WITHIN)
    return result, time.monotonic() - seen


def assert_no_peer_noise(result) -> None:
    """The other ranks stop with one line each: no gloo error, no traceback of theirs."""
    for noise in ("Connection closed by peer", "pair.cc", "[rank0]", "[rank1]", "DistBackendError"):
        assert noise not in result.output, result.output


@pytest.mark.e2e
@pytest.mark.parametrize("launcher, rank", [("spawn", 1), ("spawn", 0), ("torchrun", 1)])
def test_unexpected_failure_on_one_rank_ends_the_job_in_seconds(cwd, launcher, rank):
    """Rank ``rank`` raises just before a collective that the other rank already waits in."""
    flags, command = LAUNCHERS[launcher]
    run = Run(cwd, [*TINY, *flags, *LONG], launcher=command, env={FAIL_AT: f"{rank}:40"})
    result, seconds = wait_for_failure(run, f"error: rank {rank}: ")
    assert seconds < ENDS_WITHIN
    assert result.returncode == 1, result.output
    lines = result.error_lines()
    assert f"error: rank {rank}: InjectedFault: injected failure ({FAIL_AT}={rank}:40)" in lines, result.stderr
    assert f"rank {1 - rank} stopped: rank {rank} failed" in lines, result.stderr
    assert "InjectedFault: injected failure" in result.stderr.split("Traceback (most recent call last)")[1]
    assert_no_peer_noise(result)
    if launcher == "spawn":  # the launcher adds nothing: the ranks said it all
        assert result.stderr.count("Traceback (most recent call last)") == 1
        assert not [line for line in lines if line.startswith("error: worker")]
    assert training_started(cwd) and not (cwd / "checkpoints" / ".lock").exists()
    assert_no_process_left(cwd)


@pytest.mark.e2e
@pytest.mark.parametrize("launcher", ["spawn", "torchrun"])
def test_checkpoint_write_failure_on_rank_0_ends_the_job_in_seconds(cwd, launcher):
    """A real fault: rank 0 cannot write ``latest`` (a directory sits there), as on a full
    disk, while rank 1 goes on to the next collective."""
    (cwd / "checkpoints" / "latest" / "in-the-way").mkdir(parents=True)
    flags, command = LAUNCHERS[launcher]
    run = Run(cwd, [*TINY, *flags, "--episodes", "1000000", "--checkpoint-interval", "4"], launcher=command)
    result, seconds = wait_for_failure(run, "error: rank 0: ")
    assert seconds < ENDS_WITHIN
    assert result.returncode == 1, result.output
    lines = result.error_lines()
    assert ("error: rank 0: could not write checkpoints/latest: Is a directory; free some disk space or choose "
            "another --checkpoint-dir") in lines, result.stderr
    assert "rank 1 stopped: rank 0 failed" in lines, result.stderr
    assert_no_peer_noise(result)
    if launcher == "spawn":  # nothing else: no traceback, no line from the launcher
        assert len(lines) == 2, result.stderr
    assert not (cwd / "checkpoints" / ".lock").exists()
    assert_no_process_left(cwd)


ALARM_SCRIPT = """
import sys, time
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.distributed import WorkerFailed, launch

def worker(config, w):
    if w.comm.rank == 1:
        w.comm.barrier()
        raise WorkerFailed("the disk is full")
    w.comm.barrier()
    time.sleep(120)  # busy outside any collective (or stuck in an NCCL kernel): only the alarm can stop it
    return 0

if __name__ == "__main__":
    sys.exit(launch(TrainConfig(distributed=True, num_workers=2, device="cpu"), "cpu", worker))
"""


@pytest.mark.e2e
def test_a_rank_busy_outside_collectives_is_stopped_by_the_failure_alarm(tmp_path):
    """Rank 1 fails while rank 0 is not in a collective, so no broken connection can
    tell it: the failure alarm (through the rendezvous store) stops it at once."""
    (tmp_path / "job.py").write_text(ALARM_SCRIPT)
    run = Run(tmp_path, ["job.py"], launcher=[sys.executable])
    result, seconds = wait_for_failure(run, "error: rank 1: ")
    assert seconds < ENDS_WITHIN
    assert result.returncode == 1
    assert result.error_lines() == ["error: rank 1: the disk is full", "rank 0 stopped: rank 1 failed"]
    assert_no_process_left(tmp_path)


MID_UPDATE_SCRIPT = """
import sys, time
from ppo_lstm.config.command_line import parse_command_line
from ppo_lstm.distributed import TorchComm, launch
from ppo_lstm.train.worker import train_worker

MODE = sys.argv.pop(1)
plain_sum = TorchComm.sum_
calls = [0]

def sum_(self, tensor):  # rank 1, at its 40th gradient step's sum: inside an update
    calls[0] += 1
    if self.rank == 1 and calls[0] == 40:
        if MODE == "fail":
            raise RuntimeError("the share's backward failed")
        time.sleep(600)  # alive but stuck: nobody reports a failure
    return plain_sum(self, tensor)

TorchComm.sum_ = sum_
sys.exit(launch(parse_command_line(sys.argv[1:]).config, "cpu", train_worker))
"""


@pytest.mark.e2e
@pytest.mark.parametrize("mode", ["fail", "stall"])
def test_a_rank_that_fails_or_stalls_inside_an_update_ends_the_job(tmp_path, mode):
    """Rank 1 fails, or stops, between two of an update's gradient-step sums while rank 0
    waits in the next one: a failure ends the job within seconds (rank 0 is told through the
    rendezvous store), a stall within --dist-timeout; one line per rank, no process left."""
    (tmp_path / "job.py").write_text(MID_UPDATE_SCRIPT)
    run = Run(tmp_path, [mode, *TINY, *SPAWN2, *LONG, "--dist-timeout", "5", "--shard-update", "on"],
              launcher=[sys.executable, "job.py"])  # TINY's shares are small: auto would not shard them
    result, seconds = wait_for_failure(run, "error: rank 1: " if mode == "fail" else "rank 0 stopped: ")
    assert seconds < ENDS_WITHIN
    assert result.returncode == 1, result.output
    lines = result.error_lines()
    if mode == "fail":
        assert "error: rank 1: RuntimeError: the share's backward failed" in lines, result.stderr
        assert "rank 0 stopped: rank 1 failed" in lines, result.stderr
    else:  # rank 0's sum outlives --dist-timeout; rank 1, still asleep, is stopped through the store
        assert any(line.startswith("rank 0 stopped: a collective failed (all_reduce: ") for line in lines), \
            result.stderr
        assert "rank 1 stopped: rank 0 lost contact with the other ranks" in lines, result.stderr
    assert_no_peer_noise(result)
    assert_no_process_left(tmp_path)
