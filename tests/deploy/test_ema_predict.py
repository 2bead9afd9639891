"""predict-ppo-lstm and the ONNX route for a model trained with --ema-spans: predict's decision after
each head of a file is evaluate-ppo-lstm's position; a growing --state gives what a call from scratch
gives; the ONNX metadata records the spans (an older model without the key reads as none) and the ONNX
policy takes the checkpoint's decisions; states of other spans are one line and exit 2."""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

from deploy_fixtures import EMA_SPANS, ema_run, stream, write_head
from envs.data import load_ohlcv
from ppo_lstm import TradingPolicy
from ppo_lstm.deploy import export_onnx
from predict_checks import call, check_decisions_follow_evaluate, check_state_matches_scratch, decide

W = 8  # TINY's window


@pytest.fixture(scope="module")
def ema(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared run trained with --ema-spans 5,40 on prices.csv (read only)."""
    return ema_run(tmp_path_factory)


@pytest.mark.parametrize("start", [None, "2021-03-01"])
def test_ema_decisions_are_evaluates_positions(ema: Path, capsys: pytest.CaptureFixture, tmp_path: Path,
                                               start: str | None) -> None:
    check_decisions_follow_evaluate(ema, capsys, tmp_path, start, first_bar=W)


def test_ema_state_gives_exactly_what_a_call_from_scratch_gives(ema: Path, capsys: pytest.CaptureFixture,
                                                                tmp_path: Path) -> None:
    saved = check_state_matches_scratch(ema, capsys, tmp_path, (W + 1, W + 2, W + 2, 90))
    state, live = tmp_path / "state.json", tmp_path / "live.csv"
    assert saved["ema"]["spans"] == list(EMA_SPANS) and len(saved["ema"]["levels"]) == 2
    # a state whose EMAs are not the policy's: one line, exit 2
    for change, match in (({"spans": [5]}, "not a valid policy state (its EMA spans [5] are not the policy's"),
                          ({"clip": 4.0}, "the state's EMAs have another clip: 4.0 (now 5.0)")):
        state.write_text(json.dumps({**saved, "ema": {**saved["ema"], **change}}))
        code, out, err = call(capsys, "--checkpoint", ema / "checkpoints", "--data", live, "--state", state)
        lines = err.splitlines()
        assert code == 2 and out == "" and len(lines) == 1 and match in lines[0], err


# ----------------------------------------------------------------------------- the ONNX route


@pytest.fixture(scope="module")
def exported(ema: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The shared run's model exported here, and what the export printed."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    model = tmp_path_factory.mktemp("onnx-ema") / "policy.onnx"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert export_onnx.main(["--checkpoint", str(ema / "checkpoints"), "--onnx", str(model)]) == 0
    return model, printed.getvalue()


def test_ema_metadata_records_the_spans(exported: tuple[Path, str]) -> None:
    import onnx

    from ppo_lstm.deploy.onnx_model import spec_of

    model, printed = exported
    assert "observation 13 (window 8, EMA spans 5,40)" in printed
    meta = {p.key: p.value for p in onnx.load(model).metadata_props}
    assert json.loads(meta["ema_spans"]) == [5, 40] and json.loads(meta["env"])["ema_spans"] == "5,40"
    assert (meta["obs_dim"], meta["ema_clip"], json.loads(meta["features"])) == ("13", "5.0", [])
    assert "[W+3+F+k] (F = len(features)) the log close's deviation from its EMA of span ema_spans[k]" in \
        meta["observation"]
    assert spec_of(meta, "m").ema_spans == (5, 40)
    without = {k: v for k, v in meta.items() if k != "ema_spans"}
    for broken, match in (({**meta, "ema_spans": "[5]"}, r"its ema_spans \[5\] are not its env's \[5, 40\]"),
                          ({**meta, "ema_clip": "3.0"}, r"observation constants \(ema_clip\)"),
                          (without, r"its ema_spans \[\] are not its env's \[5, 40\]")):
        with pytest.raises(ValueError, match=match):
            spec_of(broken, "m")
    # a model written before the key existed (format 1): no ema_spans, and no spans in its env
    env = {k: v for k, v in json.loads(meta["env"]).items() if k != "ema_spans"}
    older = {k: v for k, v in without.items() if k not in ("ema_clip", "settings_format")}
    assert spec_of({**older, "env": json.dumps(env)}, "m").ema_spans == ()


def test_ema_onnx_policy_takes_the_checkpoints_decisions(ema: Path, exported: tuple[Path, str],
                                                         capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    model, _ = exported
    data = load_ohlcv(ema / "prices.csv")
    torch_route = stream(TradingPolicy.load(ema / "checkpoints"), data)
    onnx_policy = TradingPolicy.from_onnx(model)
    assert onnx_policy.spec.ema_spans == EMA_SPANS
    onnx_route = stream(onnx_policy, data)
    assert len(onnx_route) == len(torch_route) == len(data) - W
    targets = np.array([d.target_position for d in onnx_route])
    assert np.array_equal(targets, [d.target_position for d in torch_route]) and len(set(targets.tolist())) >= 2
    np.testing.assert_allclose([d.logits for d in onnx_route], [d.logits for d in torch_route], rtol=0, atol=1e-5)
    assert np.array_equal([d.observation for d in onnx_route], [d.observation for d in torch_route])
    live, state = tmp_path / "live.csv", tmp_path / "state.json"
    for rows in (40, 41, len(data)):
        write_head(ema / "prices.csv", live, rows)
        incremental = decide(capsys, "--model", model, "--data", live, "--state", state)
        scratch = decide(capsys, "--model", model, "--data", live)
        incremental.pop("new_bars"), scratch.pop("new_bars")
        assert incremental == scratch and scratch["target_position"] == onnx_route[rows - 1 - W].target_position
    assert scratch["logits"] == list(onnx_route[-1].logits)


def test_predict_warns_in_one_line_of_a_history_too_short_for_the_emas(ema: Path, capsys: pytest.CaptureFixture,
                                                                        tmp_path: Path) -> None:
    short, enough = write_head(ema / "prices.csv", tmp_path / "short.csv", 60), \
        write_head(ema / "prices.csv", tmp_path / "enough.csv", 93)
    code, out, err = call(capsys, "--checkpoint", ema / "checkpoints", "--data", short)
    assert code == 0 and out
    assert err.splitlines() == ["warning: the history has 60 bars, fewer than the 93 an EMA of span 40 (--ema-spans) "
                                "needs to forget where it started (its start still weighs 5%), so its deviation is "
                                "not yet what a backtest on the whole file reads; warm up on at least 93 bars"], err
    code, out, err = call(capsys, "--checkpoint", ema / "checkpoints", "--data", enough)
    assert code == 0 and out and "warning" not in err
