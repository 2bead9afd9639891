"""Fault injection, continued (items 6 and 7 of ``test_fault_injection.py``'s list):

 6. Non-finite losses (overflowing prices in --data / a poisoned batch)
    -> the update is undone and skipped with a warning; 3 in a row stop training
       with a clear error, exit 1; no checkpoint holds non-finite weights.
 7. Unwritable checkpoint directory
    -> exit 2 with one line at start-up, nothing half-written.
"""
from __future__ import annotations

import os
import re

import pytest
import torch

from conftest import TINY, assert_models_equal, cli_in_process
from ppo_lstm.config.schedule import Schedules
from ppo_lstm.rundir.checkpoint import load_checkpoint

pytestmark = pytest.mark.timeout(180)


# ----------------------------------------------------------------------------- 6. non-finite updates


def test_non_finite_updates_are_skipped_and_never_checkpointed(cwd):
    """Valid but extreme prices (alternating 1e-150 / 1e150) overflow the dollar PnL: the
    rewards are inf, the losses non-finite. Those updates are skipped with a warning and
    no checkpoint ever holds a non-finite weight. (The stop after 3 in a row is checked
    in-process below, on a poisoned batch.)"""
    prices = [1e-150 if i % 2 == 0 else 1e150 for i in range(400)]
    rows = [f"2020-01-{1 + i // 24:02d} {i % 24:02d}:00:00,{p},{p},{p},{p}" for i, p in enumerate(prices)]
    (cwd / "wild.csv").write_text("Date,Open,High,Low,Close\n" + "\n".join(rows) + "\n")
    result = cli_in_process(cwd, *TINY, "--episodes", "40", "--checkpoint-interval", "1", "--data", "wild.csv")
    assert result.returncode in (0, 1), result.output
    assert re.search(r"warning: update \d+ gave non-finite losses or parameters; skipped \(1 in a row\)",
                     result.stdout), result.output
    assert "Traceback" not in result.output
    checkpoints = list((cwd / "checkpoints").glob("*.pt"))
    assert checkpoints
    for path in checkpoints:
        for name, tensor in load_checkpoint(path)["model"].items():
            assert torch.isfinite(tensor).all(), (path, name)


def test_poisoned_batch_update_is_undone(tmp_path, monkeypatch):
    """In-process: a NaN in the batch -> update skipped, weights and optimizer restored; 3rd in a row raises."""
    from ppo_lstm.config.command_line import parse_command_line
    from ppo_lstm.distributed import LocalComm, Worker
    from ppo_lstm.train.shutdown import StopRequest
    from ppo_lstm.errors import TrainingError
    from ppo_lstm.train.trainer import Trainer

    monkeypatch.chdir(tmp_path)
    config = parse_command_line([*TINY, "--episodes", "8"]).config
    trainer = Trainer(config, Worker(LocalComm(), 0, torch.device("cpu")), None, StopRequest())
    try:
        trainer.rollout.collect(trainer.state.update)
        batch = trainer.rollout.finish()
        batch.rewards[0, 0] = batch.advantages[3, 1] = float("nan")
        batch.returns[3, 1] = float("inf")
        before = {k: v.clone() for k, v in trainer.agent.state_dict().items()}
        for k in (1, 2):
            _, skipped = trainer._update(batch, Schedules(1.0, 1.0))
            assert skipped and trainer.guard.bad_updates == k
            assert_models_equal(before, trainer.agent.state_dict())
            assert not trainer.optimizer.state  # Adam never stepped
        with pytest.raises(TrainingError, match="3 updates in a row were non-finite"):
            trainer._update(batch, Schedules(1.0, 1.0))
    finally:
        trainer.log.close()


# ----------------------------------------------------------------------------- 7. unwritable directory


def test_unwritable_checkpoint_dir_exits_2(cwd):
    if os.geteuid() == 0:  # root writes anywhere: use a path below a regular file instead
        blocker = cwd / "somefile"
        blocker.write_text("not a directory\n")
        target = blocker / "sub"
    else:
        blocker = cwd / "readonly"
        blocker.mkdir(mode=0o500)
        target = blocker / "sub"
    try:
        result = cli_in_process(cwd, *TINY, "--episodes", "4", "--checkpoint-dir", str(target))
    finally:
        if blocker.is_dir():
            blocker.chmod(0o700)
    assert result.returncode == 2
    assert len(result.error_lines()) == 1, result.stderr
    assert f"--checkpoint-dir {target} is not writable" in result.stderr
    assert "Traceback" not in result.output
    assert sorted(p.name for p in cwd.iterdir()) == [blocker.name]  # no log, no temp files
    if blocker.is_file():
        assert blocker.read_text() == "not a directory\n"
    else:
        assert not any(blocker.iterdir())
