"""A run owns its checkpoint dir: a new run never deletes, overwrites or appends to another
run's files; ``--overwrite`` moves them aside; rotation only touches the run's own files;
``--resume`` keeps the run's settings; the run lock cannot be held twice; start-up only
removes this project's own temp files.
"""
from __future__ import annotations

import fcntl
import hashlib
from pathlib import Path

import pytest
import torch

from ppo_lstm.rundir.checkpoint import CheckpointDir, load_checkpoint
from ppo_lstm.rundir.lock import RunLock
from ppo_lstm.errors import UsageError

from conftest import TINY, cli_in_process, episode_lines, run_cli

FIRST = [*TINY, "--episodes", "8", "--checkpoint-interval", "4", "--log-interval", "4"]
_MARKET = TINY.index("--market")
SMALL = TINY[:_MARKET] + TINY[_MARKET + 2:]  # TINY without its --market, for resume's inherited settings


def digests(directory: Path) -> dict[str, str]:
    """sha256 of every file below ``directory`` (relative path -> digest)."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_second_fresh_run_is_refused_and_leaves_the_first_intact(cwd):
    assert cli_in_process(cwd, *FIRST).returncode == 0
    before = digests(cwd / "checkpoints")
    second = cli_in_process(cwd, *TINY, "--episodes", "4")
    assert second.returncode == 2
    assert second.error_lines() == [
        "error: --checkpoint-dir checkpoints already holds a run at episode 8/8, update 4; pass --resume to "
        "continue it, choose another --checkpoint-dir for a new run, or pass --overwrite to move it into "
        "checkpoints/previous-<timestamp>/ and start afresh"]
    assert digests(cwd / "checkpoints") == before


@pytest.mark.e2e
def test_refused_under_spawned_workers_too(cwd):
    assert cli_in_process(cwd, *FIRST).returncode == 0
    before = digests(cwd / "checkpoints")
    second = run_cli(cwd, *TINY, "--distributed", "--num-workers", "2", "--episodes", "4")
    assert second.returncode == 2 and "already holds a run at episode 8/8" in second.stderr
    assert len(second.error_lines()) == 1, second.stderr
    assert digests(cwd / "checkpoints") == before


def test_overwrite_moves_the_previous_run_aside(cwd):
    assert cli_in_process(cwd, *FIRST).returncode == 0
    before = digests(cwd / "checkpoints")
    second = cli_in_process(cwd, *TINY, "--episodes", "4", "--overwrite")
    assert second.returncode == 0, second.output
    [previous] = (cwd / "checkpoints").glob("previous-*")
    assert f"--overwrite: moved a run at episode 8/8, update 4 into checkpoints/{previous.name}/" in second.stdout
    assert digests(previous) == before  # every file of the first run, byte for byte
    run_dir = CheckpointDir(cwd / "checkpoints")
    assert run_dir.latest() is not None and run_dir.latest().exists()
    assert load_checkpoint(run_dir.latest())["counters"]["global_episodes"] == 4
    rows = (cwd / "checkpoints" / "metrics.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in rows[1:]] == [str(u) for u in range(1, len(rows))]  # its own numbering


def test_files_of_a_run_without_checkpoints_are_not_appended_to(cwd):
    (cwd / "checkpoints").mkdir()
    (cwd / "checkpoints" / "metrics.csv").write_text("update,episodes\n1,2\n")
    result = cli_in_process(cwd, *TINY, "--episodes", "4")
    assert result.returncode == 2
    assert result.error_lines() == [
        "error: --checkpoint-dir checkpoints already holds files of an earlier run (metrics.csv); choose another "
        "--checkpoint-dir for a new run, or pass --overwrite to move it into checkpoints/previous-<timestamp>/ "
        "and start afresh"]
    assert (cwd / "checkpoints" / "metrics.csv").read_text() == "update,episodes\n1,2\n"


def test_rotation_only_removes_the_runs_own_checkpoints(tmp_path):
    foreign = {"model": {}, "counters": {}, "run_id": "someone-else"}
    CheckpointDir(tmp_path).save(foreign, update=500, is_best=False)
    (tmp_path / "unlabelled").mkdir()
    CheckpointDir(tmp_path / "unlabelled").save({"model": {}, "counters": {}}, update=400, is_best=False)
    (tmp_path / "unlabelled" / "checkpoint_u00000400.pt").rename(tmp_path / "checkpoint_u00000400.pt")

    directory = CheckpointDir(tmp_path, keep=2)
    directory.adopt("mine")
    for update in range(1, 6):
        directory.save({"model": {}, "counters": {}, "run_id": "mine"}, update=update, is_best=False)
    names = sorted(p.name for p in directory.checkpoints())
    assert names == ["checkpoint_u00000004.pt", "checkpoint_u00000005.pt", "checkpoint_u00000400.pt",
                     "checkpoint_u00000500.pt"]
    assert directory.latest().name == "checkpoint_u00000005.pt"


def test_a_resumed_run_rotates_the_checkpoints_it_adopted(tmp_path):
    first = CheckpointDir(tmp_path, keep=2)
    for update in (1, 2):
        first.save({"model": {}, "counters": {}, "run_id": "run-a"}, update=update, is_best=False)
    resumed = CheckpointDir(tmp_path, keep=2)
    resumed.adopt("run-a", resumed_from=tmp_path / "checkpoint_u00000002.pt")
    resumed.save({"model": {}, "counters": {}, "run_id": "run-a"}, update=3, is_best=False)
    assert [p.name for p in resumed.checkpoints()] == ["checkpoint_u00000003.pt", "checkpoint_u00000002.pt"]


def test_resume_keeps_the_checkpoints_settings(cwd):
    assert cli_in_process(cwd, *SMALL, "--market", "gbm", "--fee-bps", "4", "--episodes", "4").returncode == 0
    resumed = cli_in_process(cwd, *SMALL, "--episodes", "8", "--log-interval", "4", "--resume")
    assert resumed.returncode == 0, resumed.output
    assert "Settings changed on resume: --episodes 4 -> 8, --log-interval 10 -> 4" in resumed.stdout
    assert "warning" not in resumed.output and "RuntimeWarning" not in resumed.output
    state = load_checkpoint(CheckpointDir(cwd / "checkpoints").latest())
    assert state["config"]["env"]["market"] == "gbm" and state["config"]["env"]["fee_bps"] == 4.0
    assert state["run_id"] == load_checkpoint(cwd / "checkpoints" / "best.pt")["run_id"]

    # --episodes left out: the checkpoint's total; a changed cost is applied and named
    again = cli_in_process(cwd, *SMALL, "--resume", "--fee-bps", "10", "--episodes", "12")
    assert again.returncode == 0, again.output
    assert "Settings changed on resume: --episodes 8 -> 12, --fee-bps 4.0 -> 10.0" in again.stdout
    assert "warning: the environment settings changed" in again.stdout
    state = load_checkpoint(CheckpointDir(cwd / "checkpoints").latest())
    assert state["config"]["env"]["market"] == "gbm" and state["config"]["env"]["fee_bps"] == 10.0
    log = (cwd / "training.log").read_text()
    assert "Settings changed on resume: --episodes 8 -> 12, --fee-bps 4.0 -> 10.0" in log


def test_resume_without_flags_continues_to_the_checkpoints_total(cwd):
    run = cli_in_process(cwd, *SMALL, "--market", "gbm", "--episodes", "12", "--checkpoint-interval", "4",
                         "--log-interval", "4")
    assert run.returncode == 0
    run_dir = CheckpointDir(cwd / "checkpoints")
    mid = run_dir.checkpoints()[-1]  # an earlier checkpoint of the run, as after a crash
    (run_dir.path / "latest").write_text(mid.name + "\n")
    for later in run_dir.checkpoints()[:-1]:
        later.unlink()
    resumed = cli_in_process(cwd, "--resume", "--device", "cpu", "--no-progress")  # nothing but --resume
    assert resumed.returncode == 0, resumed.output
    assert "Settings: as in the checkpoint" in resumed.stdout
    assert "Training finished: 12 episodes" in resumed.stdout
    assert episode_lines(cwd / "training.log")[-1].startswith("Episode 12/12")


def test_layout_warning_only_when_the_layout_changed_and_only_once(cwd):
    assert cli_in_process(cwd, *TINY, "--episodes", "4").returncode == 0
    resumed = cli_in_process(cwd, *TINY, "--episodes", "8", "--resume", "--num-envs", "4")
    assert resumed.returncode == 0, resumed.output
    assert resumed.output.count("warning:") == 1 and "RuntimeWarning" not in resumed.output
    assert ("warning: the checkpoint was written by 1 worker(s) x 2 envs and this run has 1 x 4: weights, "
            "optimizer and counters restored; environments and per-rank RNG streams restarted") in resumed.stdout


def test_minibatch_of_one_transition_is_refused_at_start(cwd):
    result = cli_in_process(cwd, *TINY, "--update-interval", "8", "--num-envs", "8", "--minibatches", "8")
    assert result.returncode == 2
    assert result.error_lines() == [
        "error: --minibatches 8 leaves one transition in a minibatch (8 transitions / 8), too few to normalise "
        "advantages; use --minibatches 4 or fewer, a larger --update-interval, or --no-norm-adv"]
    assert not (cwd / "checkpoints").exists()


def test_resume_and_overwrite_together_are_refused(cwd):
    result = cli_in_process(cwd, *TINY, "--resume", "--overwrite")
    assert result.returncode == 2 and len(result.error_lines()) == 1
    assert "pass only one of them" in result.stderr


def test_run_lock_is_never_held_twice(tmp_path, monkeypatch):
    """B opens the lock file just before A releases it; once A has, B must not hold a lock on
    the removed file while C locks the new one."""
    holder, late, third = RunLock(tmp_path), RunLock(tmp_path), RunLock(tmp_path)
    holder.acquire()
    real_flock = fcntl.flock
    interleaved = []

    def flock_after_release(handle, operation):
        if not interleaved and operation & fcntl.LOCK_EX:
            interleaved.append(True)
            holder.release()  # A lets go between B's open and B's flock
        return real_flock(handle, operation)

    monkeypatch.setattr(fcntl, "flock", flock_after_release)
    late.acquire()
    monkeypatch.setattr(fcntl, "flock", real_flock)
    assert interleaved
    with pytest.raises(UsageError, match="is in use by another run"):
        third.acquire()
    late.release()
    third.acquire()
    third.release()


def test_start_up_removes_only_this_projects_temp_files(tmp_path):
    ours = [".checkpoint_u00000002.pt.12345.tmp", ".latest.12345.tmp", ".best.pt.7.tmp", ".write-test.99"]
    theirs = [".cache.tmp", ".editor-swap.123.tmp", ".metrics.backup.1.tmp", "notes.tmp"]
    for name in ours + theirs:
        (tmp_path / name).write_bytes(b"x")
    removed = CheckpointDir(tmp_path).remove_stale_temp_files()
    assert sorted(p.name for p in removed) == sorted(ours)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(theirs)


def test_ppo_update_refuses_more_minibatches_than_sequences():
    from ppo_lstm.algo.agent import RecurrentActorCritic
    from ppo_lstm.algo.buffer import RolloutBuffer
    from ppo_lstm.distributed import LocalComm
    from ppo_lstm.algo.ppo import PPOSettings, ppo_update

    torch.manual_seed(0)
    agent = RecurrentActorCritic(4, 3, 8, 8)
    buffer = RolloutBuffer(2, 6, 4, 8, torch.device("cpu"))
    batch = buffer.finish(torch.zeros(6), torch.zeros(6), 0.99, 0.95)
    settings = PPOSettings(0.2, 1, 7, 0.0, 0.5, 0.5, True, False, None)
    with pytest.raises(ValueError, match="7 minibatches of the batch's 6 env sequences leave one empty"):
        ppo_update(agent, torch.optim.Adam(agent.parameters()), batch, settings, torch.Generator(), LocalComm())
