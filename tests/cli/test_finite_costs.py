"""Training refuses a cost or a cash amount that is not a finite number, in one line (as
evaluate-ppo-lstm does), before anything is written."""
from __future__ import annotations

import pytest

from ppo_lstm.cli import main


@pytest.mark.parametrize("flag, value, rule", [("--fee-bps", "inf", "a finite number >= 0"),
                                               ("--slippage-bps", "inf", "a finite number >= 0"),
                                               ("--fee-bps", "nan", "a finite number >= 0"),
                                               ("--initial-cash", "inf", "a finite number > 0"),
                                               ("--initial-cash", "-inf", "a finite number > 0"),
                                               ("--reward-scale", "inf", "a finite number > 0")])
def test_a_non_finite_amount_is_one_line_exit_2(tmp_path, monkeypatch, capsys, flag, value, rule):
    monkeypatch.chdir(tmp_path)
    assert main([f"{flag}={value}", "--episodes", "1", "--device", "cpu", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {flag} must be {rule}, got {float(value)}\n"
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "training.log").exists()
