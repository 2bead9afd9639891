"""predict-ppo-lstm run in this process, and the two checks every trained variant (plain, --features,
--ema-spans) must pass: its decisions are evaluate-ppo-lstm's positions, and a growing --state gives
what a call from scratch gives."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
import pytest

from deploy_fixtures import write_head
from ppo_lstm.deploy import predict
from ppo_lstm.evaluation import cli as evaluate


def without_warm_up_warning(err: str) -> str:
    """stderr less predict's warning of a history too short for the EMAs (a head of a file is one)."""
    return "".join(line for line in err.splitlines(keepends=True) if not line.startswith("warning: the history has "))


def call(capsys: pytest.CaptureFixture, *argv: object) -> tuple[int, str, str]:
    """``predict.main(argv)`` in this process: exit code, stdout, stderr."""
    try:
        code = predict.main([str(a) for a in argv])
    except SystemExit as stop:  # argparse's own errors
        code = int(stop.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def decide(capsys: pytest.CaptureFixture, *argv: object) -> dict:
    """The ``--json`` decision of one call (one line on stdout, nothing on stderr)."""
    code, out, err = call(capsys, *argv, "--json")
    assert code == 0 and without_warm_up_warning(err) == "", err
    lines = out.splitlines()
    assert len(lines) == 1
    return json.loads(lines[0])


def check_decisions_follow_evaluate(run: Path, capsys: pytest.CaptureFixture, tmp_path: Path,
                                    start: str | None, first_bar: int) -> None:
    """predict on heads of ``run/prices.csv`` decides evaluate-ppo-lstm's positions, from ``first_bar``
    (the first decision bar without ``start``) or from ``--start``'s bar."""
    since = ["--start", start] if start else []
    assert evaluate.main(["--checkpoint", str(run / "checkpoints"), "--data", str(run / "prices.csv"), *since,
                          "--equity-csv", str(tmp_path / "eq.csv")]) == 0
    capsys.readouterr()
    curve = pd.read_csv(tmp_path / "eq.csv")  # row k + 1: the position held during the bar after row k's
    prices = pd.read_csv(run / "prices.csv")
    first = first_bar if start is None else prices.index[prices["Date"] == start][0]
    assert curve["time"][0] == f"{prices['Date'][first]}T00:00:00"  # the first decision bar
    for rows in (first + 1, first + 2, 97, 180, len(prices) - 1):
        head = write_head(run / "prices.csv", tmp_path / f"head{rows}.csv", rows)
        got = decide(capsys, "--checkpoint", run / "checkpoints", "--data", head, *since)
        k = rows - 1 - first
        assert got["time"] == curve["time"][k] == f"{prices['Date'][rows - 1]}T00:00:00"
        assert got["target_position"] == curve["position"][k + 1] and got["position"] == curve["position"][k]
        assert got["equity"] == pytest.approx(curve["equity"][k], rel=1e-12)
    assert len(set(curve["position"])) >= 2


def check_state_matches_scratch(run: Path, capsys: pytest.CaptureFixture, tmp_path: Path,
                                heads: Sequence[int]) -> dict[str, Any]:
    """A --state fed growing heads of ``run/prices.csv`` (``heads`` rows, then the whole file) gives,
    to the last bit, what a call from scratch gives; returns the state file's contents."""
    state, live = tmp_path / "state.json", tmp_path / "live.csv"
    previous = 0
    for rows in (*heads, len(pd.read_csv(run / "prices.csv"))):
        write_head(run / "prices.csv", live, rows)
        args = ("--checkpoint", run / "checkpoints", "--data", live)
        incremental = decide(capsys, *args, "--state", state)
        scratch = decide(capsys, *args)
        assert incremental.pop("new_bars") == rows - previous and scratch.pop("new_bars") == rows
        assert incremental == scratch
        previous = rows
    return json.loads(state.read_text())
