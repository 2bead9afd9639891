"""predict-ppo-lstm end to end, in-process through main(): its decision for the bar after a file's last
bar is evaluate-ppo-lstm's position for that bar; with --state, files growing a few bars at a time
give exactly what a call from scratch gives; every bad input is one line and exit 2."""
from __future__ import annotations

import configparser
import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import ROOT, env_for_child
from deploy_fixtures import BARS, VOL_WARMUP, featured_run, train_tiny, write_head
from envs.data import load_ohlcv
from ppo_lstm import TradingPolicy
from ppo_lstm.evaluation import cli as evaluate
from ppo_lstm.deploy import predict
from predict_checks import call, check_decisions_follow_evaluate, check_state_matches_scratch, decide, without_warm_up_warning

START = "2021-02-01"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """prices.csv, checkpoints/ of a tiny model trained on it, and other.pt: the same checkpoint
    with one weight changed (another policy)."""
    cwd = tmp_path_factory.mktemp("predict")
    best = train_tiny(cwd)
    state = torch.load(best, map_location="cpu", weights_only=True)
    state["model"]["value_head.bias"] += 1.0
    torch.save(state, cwd / "other.pt")
    return cwd


def test_decisions_are_evaluates_positions(run: Path, capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    assert evaluate.main(["--checkpoint", str(run / "checkpoints"), "--data", str(run / "prices.csv"), "--start",
                          START, "--equity-csv", str(tmp_path / "eq.csv")]) == 0
    capsys.readouterr()
    curve = pd.read_csv(tmp_path / "eq.csv")  # row k + 1: the position held during the bar after row k's
    prices = pd.read_csv(run / "prices.csv")
    changes = [k for k in range(len(curve) - 1) if curve["position"][k + 1] != curve["position"][k]]
    assert len(changes) >= 2  # the policy trades
    rows_of = {f"{date}T00:00:00": i + 1 for i, date in enumerate(prices["Date"])}
    trades = [rows_of[curve["time"][k]] for k in changes[:2]]  # files ending where a decision trades
    for rows in (*trades, 40, 97, len(prices) - 1):
        head = write_head(run / "prices.csv", tmp_path / f"head{rows}.csv", rows)
        got = decide(capsys, "--checkpoint", run / "checkpoints", "--data", head, "--start", START)
        assert got["time"] == f"{prices['Date'][rows - 1]}T00:00:00"
        k = curve.index[curve["time"] == got["time"]][0]
        assert got["target_position"] == curve["position"][k + 1]
        assert got["position"] == curve["position"][k]
        assert got["equity"] == pytest.approx(curve["equity"][k], rel=1e-12)
        assert set(got["probabilities"]) == {"-1", "0", "1"}
        assert sum(got["probabilities"].values()) == pytest.approx(1.0)
        assert got["route"] == "checkpoint" and got["start"] == f"{START}T00:00:00"


def test_state_gives_exactly_what_a_call_from_scratch_gives(run: Path, capsys: pytest.CaptureFixture,
                                                            tmp_path: Path) -> None:
    state, live = tmp_path / "state.json", tmp_path / "live.csv"
    total = len(pd.read_csv(run / "prices.csv"))
    previous = 0
    for rows in (60, 61, 61, 68, 120, total):  # a day, no new bar, a week, ...
        write_head(run / "prices.csv", live, rows)
        args = ("--checkpoint", run / "checkpoints", "--data", live, "--start", START)
        incremental = decide(capsys, *args, "--state", state)
        scratch = decide(capsys, *args)
        assert incremental.pop("new_bars") == rows - previous and scratch.pop("new_bars") == rows
        assert incremental == scratch  # every figure, to the last bit
        previous = rows
    # text mode names the state and the bars it consumed
    code, out, err = call(capsys, "--checkpoint", run / "checkpoints", "--data", live, "--start", START,
                          "--state", state)
    assert code == 0 and without_warm_up_warning(err) == ""
    assert f"Decision after the bar of {scratch['time']}" in out and "target position" in out
    assert "state: " in out and f"0 new bars consumed, {total} in all" in out


def test_new_bars_consumed_are_counted(run: Path, capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    state, live = tmp_path / "state.json", tmp_path / "live.csv"
    for rows, new in ((50, 50), (53, 3), (53, 0)):
        write_head(run / "prices.csv", live, rows)
        got = decide(capsys, "--checkpoint", run / "checkpoints", "--data", live, "--state", state)
        assert got["new_bars"] == new and got["bars"] == rows


def test_fill_reports_the_real_fill_to_the_state(run: Path, capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    state, live = tmp_path / "state.json", tmp_path / "live.csv"
    prices = pd.read_csv(run / "prices.csv")
    args = ("--checkpoint", run / "checkpoints", "--data", live, "--start", START)
    policy, data = TradingPolicy.load(run / "checkpoints"), load_ohlcv(run / "prices.csv")
    policy.begin(START)
    trades = [i for i in range(len(data)) if (d := policy.update(data.timestamps[i], data.open[i], data.high[i],
                                                                   data.low[i], data.close[i], data.volume[i]))
              and d.target_position != d.position]
    rows = next(i for i in trades if i > 90) + 1  # a file whose last decision trades
    write_head(run / "prices.csv", live, rows)
    first = decide(capsys, *args, "--state", state)
    saved = state.read_bytes()
    write_head(run / "prices.csv", live, rows + 1)
    scratch = decide(capsys, *args)
    # the fill the book assumes (the open of the next bar, 1 bp of slippage against the trade): a call from scratch
    move = np.sign(first["target_position"] - first["position"])
    assert move != 0
    assumed = (move * (1.0 / 1e4) + 1.0) * prices["Open"][rows]
    same = decide(capsys, *args, "--state", state, "--fill", repr(float(assumed)), str(first["target_position"]))
    assert same.pop("new_bars") == 1 and scratch.pop("new_bars") == rows + 1 and same == scratch
    # another fill: the book holds what the broker filled
    state.write_bytes(saved)
    other = -1 if first["target_position"] != -1 else 1
    got = decide(capsys, *args, "--state", state, "--fill", "99.5", str(other))
    assert got["position"] == other and got["equity"] != scratch["equity"]
    one_error(capsys, *args, "--state", state, "--fill", "99.5", "1", match="has no bar after")
    one_error(capsys, *args, "--fill", "99.5", "1", match="--fill reports the fill of a decision a --state")
    state.write_bytes(saved)
    one_error(capsys, *args, "--state", state, "--fill", "99.5", "3", match="fill lots must be one of [-1, 0, 1]")


def test_config_file_gives_the_same_decision_and_the_command_line_wins(run: Path, capsys: pytest.CaptureFixture,
                                                                      tmp_path: Path) -> None:
    flags = decide(capsys, "--checkpoint", run / "checkpoints", "--data", run / "prices.csv", "--start", "2021-02-01")
    config = tmp_path / "predict.yaml"
    config.write_text(f"checkpoint: {run / 'checkpoints'}\ndata: {run / 'prices.csv'}\nstart: 2020-01-01\n"
                      f"json: true\n")
    code, out, err = call(capsys, "--config", config, "--start", "2021-02-01")
    assert code == 0 and json.loads(out) == flags  # --json from the file; the command line's --start wins
    assert without_warm_up_warning(err).strip() == (f"Config file {config}: 4 settings; the command line overrode "
                           f"--start 2020-01-01 -> 2021-02-01")
    code, out, _ = call(capsys, "--config", config, "--print-config")
    printed = tmp_path / "printed.yaml"
    printed.write_text(out)
    assert code == 0 and json.loads(call(capsys, "--config", printed, "--start", "2021-02-01")[1]) == flags
    onnx_route = tmp_path / "model.yaml"  # --model on the command line replaces the file's --checkpoint
    onnx_route.write_text(f"checkpoint: {run / 'checkpoints'}\ndata: {run / 'prices.csv'}\n")
    code, _, err = call(capsys, "--config", onnx_route, "--model", tmp_path / "missing.onnx")
    assert code == 2 and "missing.onnx" in err and len(err.strip().splitlines()) == 1
    bad = tmp_path / "bad.yaml"
    bad.write_text("checkpont: x\n")
    code, _, err = call(capsys, "--config", bad, "--data", run / "prices.csv")
    assert code == 2 and "unknown key 'checkpont'; did you mean 'checkpoint'?" in err
    assert len(err.strip().splitlines()) == 1


def one_error(capsys: pytest.CaptureFixture, *argv: object, match: str) -> str:
    code, out, err = call(capsys, *argv)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and out == "" and len(lines) == 1, err
    assert "Traceback" not in err and match in lines[0], lines[0]
    return lines[0]


def test_bad_inputs_are_one_line_and_exit_2(run: Path, capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    ck, data = run / "checkpoints", run / "prices.csv"
    cut = tmp_path / "cut.pt"
    cut.write_bytes((ck / "best.pt").read_bytes()[:2000])
    one_error(capsys, "--checkpoint", tmp_path / "nope.pt", "--data", data, match="no such file")
    one_error(capsys, "--checkpoint", cut, "--data", data, match="not a checkpoint")
    one_error(capsys, "--checkpoint", ck, "--data", tmp_path / "nope.csv", match="file not found")
    no_close = tmp_path / "no_close.csv"
    pd.read_csv(data).drop(columns="Close").to_csv(no_close, index=False)
    one_error(capsys, "--checkpoint", ck, "--data", no_close, match="missing price column(s) Close")
    one_error(capsys, "--checkpoint", ck, "--data", write_head(data, tmp_path / "short.csv", 8),
              match="has 8 bars; a decision needs at least window + 1 = 9")
    late = decide(capsys, "--checkpoint", ck, "--data", data, "--start", "2021-12-22")  # 7 bars: the window is before
    assert late["start"] == "2021-12-22T00:00:00" and late["bars"] == len(pd.read_csv(data))
    one_error(capsys, "--checkpoint", ck, "--data", data, "--start", "2030-01-01", match="no bars from 2030-01-01")
    one_error(capsys, "--checkpoint", ck, "--data", data, "--fee-bps", "-1", match="--fee-bps must be")
    one_error(capsys, "--checkpoint", ck, "--data", data, "--state", tmp_path, match="is a directory")
    one_error(capsys, "--checkpoint", ck, "--data", data, "--state", tmp_path / "no" / "s.json",
              match="no directory")
    one_error(capsys, "--data", data, match="one of the arguments --checkpoint --model is required")

    state = tmp_path / "state.json"
    for text, match in (("garbage", "not a policy state file"), ('{"format": "ppo-lstm-trader policy state"',
                                                                 "not a policy state file"),
                        ('{"format": "x"}', "not a policy state"), ("[1, 2]", "not a policy state")):
        state.write_text(text)
        one_error(capsys, "--checkpoint", ck, "--data", data, "--state", state, match=match)
    state.unlink()
    head = write_head(data, tmp_path / "head.csv", 100)
    assert decide(capsys, "--checkpoint", ck, "--data", head, "--start", START, "--state", state)["bars"] == 100
    saved = state.read_bytes()
    one_error(capsys, "--checkpoint", run / "other.pt", "--data", data, "--start", START, "--state", state,
              match="written by another policy")
    one_error(capsys, "--checkpoint", ck, "--data", data, "--start", START, "--state", state, "--slippage-bps", "9",
              match="other settings: slippage_bps")
    one_error(capsys, "--checkpoint", ck, "--data", data, "--state", state, match="was started with --start")
    one_error(capsys, "--checkpoint", ck, "--data", write_head(data, tmp_path / "h99.csv", 99), "--start", START,
              "--state", state, match="fewer than the 100 the state has consumed")
    revised = pd.read_csv(data)
    revised.loc[30, ["Open", "High", "Low", "Close"]] += 0.01  # one earlier bar differs
    revised.to_csv(tmp_path / "revised.csv", index=False)
    one_error(capsys, "--checkpoint", ck, "--data", tmp_path / "revised.csv", "--start", START, "--state", state,
              match="are not the 100 bars the state has consumed")
    broken = json.loads(saved)
    broken["closes"] = broken["closes"][:2]
    state.write_text(json.dumps(broken))
    one_error(capsys, "--checkpoint", ck, "--data", data, "--start", START, "--state", state,
              match="not a valid policy state")
    state.write_bytes(saved)
    assert decide(capsys, "--checkpoint", ck, "--data", data, "--start", START, "--state", state)["new_bars"] > 0


@pytest.mark.e2e
def test_console_scripts_and_python_m(run: Path) -> None:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    scripts = dict(line.split(" = ") for line in parser["options.entry_points"]["console_scripts"].split("\n")
                   if line.strip())
    for name, module in (("predict-ppo-lstm", "ppo_lstm.deploy.predict"),
                         ("export-ppo-lstm", "ppo_lstm.deploy.export_onnx")):
        assert scripts[name] == f"{module}:main"
        assert callable(importlib.import_module(module).main)
    assert "onnxruntime" in parser["options.extras_require"]["onnx"]
    assert "onnxruntime" in parser["options.extras_require"]["test"]
    done = subprocess.run([sys.executable, "-m", "ppo_lstm.predict", "--checkpoint", str(run / "checkpoints"),
                           "--data", str(run / "prices.csv")], capture_output=True, text=True, cwd=run,
                          env=env_for_child(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Decision after the bar of 2021-12-30T00:00:00 (bar 260 of ")


# ----------------------------------------------------------------------------- feature columns


@pytest.fixture(scope="module")
def featured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared run trained with --features vol_z,Mom on prices.csv with Vol_Z and mom (read only)."""
    return featured_run(tmp_path_factory)


@pytest.mark.parametrize("start", [None, "2021-03-01"])
def test_featured_decisions_are_evaluates_positions(featured: Path, capsys: pytest.CaptureFixture, tmp_path: Path,
                                                    start: str | None) -> None:
    """On a file whose Vol_Z column starts with 30 NaN rows: evaluate-ppo-lstm's positions, from bar 30
    (no --start) or from --start's bar."""
    check_decisions_follow_evaluate(featured, capsys, tmp_path, start, first_bar=VOL_WARMUP)


def test_featured_state_gives_exactly_what_a_call_from_scratch_gives(featured: Path, capsys: pytest.CaptureFixture,
                                                                     tmp_path: Path) -> None:
    saved = check_state_matches_scratch(featured, capsys, tmp_path, (VOL_WARMUP + 1, VOL_WARMUP + 2, VOL_WARMUP + 2, 90))
    assert saved["features"]["names"] == ["vol_z", "Mom"] and len(saved["features"]["rows"]) == BARS  # every bar: < 1,024


def test_featured_bad_inputs_are_one_line_and_exit_2(featured: Path, capsys: pytest.CaptureFixture,
                                                     tmp_path: Path) -> None:
    ck, data = featured / "checkpoints", featured / "prices.csv"
    frame = pd.read_csv(data)
    frame.drop(columns="mom").to_csv(tmp_path / "no_mom.csv", index=False)
    line = one_error(capsys, "--checkpoint", ck, "--data", tmp_path / "no_mom.csv", match="has no feature column 'Mom'")
    assert "trained with --features vol_z,Mom" in line
    # enough bars for a window, but Vol_Z has no value yet (its warm-up): no decision can be taken
    line = one_error(capsys, "--checkpoint", ck, "--data", write_head(data, tmp_path / "h30.csv", VOL_WARMUP),
                     match="feature column 'Vol_Z' holds no values (all missing)")
    assert "trained with --features vol_z,Mom" in line
    # a state, then a file whose earlier feature value (not price) was revised
    state = tmp_path / "state.json"
    head = write_head(data, tmp_path / "head.csv", 100)
    assert decide(capsys, "--checkpoint", ck, "--data", head, "--state", state)["bars"] == 100
    revised = pd.read_csv(data)
    revised.loc[50, "mom"] += 0.000001
    revised.to_csv(tmp_path / "revised.csv", index=False)
    one_error(capsys, "--checkpoint", ck, "--data", tmp_path / "revised.csv", "--state", state,
              match="are not the 100 bars the state has consumed")
    # a state whose feature normaliser does not match
    saved = json.loads(state.read_text())
    for change, match in (({"window": 64}, "feature normaliser has other constants: window 64 (now 1024)"),
                          ({"rows": saved["features"]["rows"][:-1]}, "not a valid policy state (its feature "
                                                                     "normaliser holds 99 rows; 100 expected")):
        state.write_text(json.dumps({**saved, "features": {**saved["features"], **change}}))
        one_error(capsys, "--checkpoint", ck, "--data", data, "--state", state, match=match)
    state.write_text(json.dumps(saved))
    assert decide(capsys, "--checkpoint", ck, "--data", data, "--state", state)["new_bars"] == len(frame) - 100
