"""``ppo_lstm.state_lock``: the state file's lock for library callers, the one ``predict-ppo-lstm --state`` takes."""
from __future__ import annotations

from pathlib import Path

import pytest

import ppo_lstm
from ppo_lstm.deploy import state as state_module
from ppo_lstm.errors import UsageError


def test_the_public_lock_is_the_command_lines_and_refuses_a_second_holder(tmp_path: Path, monkeypatch) -> None:
    assert ppo_lstm.state_lock is state_module.state_lock
    monkeypatch.setattr(state_module, "STATE_LOCK_WAIT_S", 0.2)
    path = tmp_path / "s.json"
    with ppo_lstm.state_lock(path):
        assert (tmp_path / "s.json.lock").exists()
        with pytest.raises(UsageError, match=r"s\.json is in use by another call .*one after the other"):
            with ppo_lstm.state_lock(path):  # another open file description: flock refuses it, as for a process
                pass
    assert not (tmp_path / "s.json.lock").exists()
    with ppo_lstm.state_lock(path):  # free again
        pass
