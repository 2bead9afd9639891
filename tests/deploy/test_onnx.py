"""ONNX export (export-ppo-lstm) and the ONNX route of predict-ppo-lstm: the exported step matches the
agent's (logits within 1e-5, any batch size), the metadata describes the observation, the ONNX
policy takes the checkpoint's (and so the backtest's) greedy action at every bar, and bad models
are one line and exit 2."""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from deploy_fixtures import VOL_WARMUP, featured_run, train_tiny  # noqa: E402
from predict_checks import without_warm_up_warning
from envs.data import date_span, load_ohlcv  # noqa: E402
from ppo_lstm import TradingPolicy  # noqa: E402
from ppo_lstm.deploy import export_onnx  # noqa: E402
from ppo_lstm.deploy import predict  # noqa: E402
from ppo_lstm.evaluation.backtest import backtest_history  # noqa: E402
from ppo_lstm.evaluation.loading import load_policy  # noqa: E402
from ppo_lstm.deploy.onnx_model import OnnxStep, spec_of  # noqa: E402
from ppo_lstm.deploy.torch_step import checkpoint_fingerprint  # noqa: E402

START = "2021-02-01"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """prices.csv, checkpoints/ of a tiny model trained on it, and policy.onnx exported from best.pt."""
    cwd = tmp_path_factory.mktemp("onnx")
    train_tiny(cwd, "--window", "12", "--lstm-size", "24")
    assert export_onnx.main(["--checkpoint", str(cwd / "checkpoints"), "--onnx", str(cwd / "policy.onnx")]) == 0
    return cwd


def test_metadata_carries_what_a_consumer_needs(run: Path) -> None:
    model = onnx.load(run / "policy.onnx")
    meta = {p.key: p.value for p in model.metadata_props}
    agent, config = load_policy(run / "checkpoints" / "best.pt")
    env = config.env
    assert meta["format"] == "ppo-lstm-trader recurrent step" and meta["version"] == "1"
    assert meta["fingerprint"] == checkpoint_fingerprint(agent, config)
    assert (meta["window"], meta["max_position"], meta["no_short"]) == ("12", "1", "false")
    assert json.loads(meta["env"]) == {k: getattr(env, k) for k in json.loads(meta["env"])}
    assert json.loads(meta["positions"]) == [-1, 0, 1] and json.loads(meta["features"]) == []
    assert spec_of(meta, "m").features == ()
    assert (meta["obs_dim"], meta["lstm_size"], meta["time_scale"]) == ("16", "24", str(env.episode_length))  # 12 + 3 + EMA(500)
    assert (meta["return_clip"], meta["rms_floor"], meta["upnl_scale"], meta["upnl_clip"]) == ("5.0", "1e-12",
                                                                                                "10.0", "10.0")
    assert [i.name for i in model.graph.input] == ["observation", "h", "c"]
    assert [o.name for o in model.graph.output] == ["logits", "value", "h_next", "c_next"]


def test_exported_step_matches_the_agents_for_any_batch(run: Path) -> None:
    agent, config = load_policy(run / "checkpoints" / "best.pt")
    step = OnnxStep(run / "policy.onnx")
    generator = torch.Generator().manual_seed(0)
    for batch in (1, 5):
        obs = torch.randn(batch, config.env.obs_dim, generator=generator)
        h, c = torch.randn(2, batch, config.lstm_size, generator=generator)
        out = step.session.run(None, {"observation": obs.numpy(), "h": h.numpy(), "c": c.numpy()})
        with torch.no_grad():
            logits, value, (h2, c2) = agent.step(obs, (h[None], c[None]), torch.zeros(batch))
        for got, want in zip(out, (logits, value, h2[0], c2[0])):
            assert got.shape == tuple(want.shape)
            np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=1e-5)


def test_onnx_policy_takes_the_checkpoints_decisions_at_every_bar(run: Path) -> None:
    data = load_ohlcv(run / "prices.csv")
    agent, config = load_policy(run / "checkpoints" / "best.pt")
    lo, hi = date_span(data, START)
    result = backtest_history(agent, config.env, data, lo, hi)
    routes = {}
    for name, policy in (("checkpoint", TradingPolicy.load(run / "checkpoints")),
                         ("onnx", TradingPolicy.from_onnx(run / "policy.onnx"))):
        policy.begin(START)
        decisions = []
        for i in range(len(data)):
            decision = policy.update(data.timestamps[i], data.open[i], data.high[i], data.low[i], data.close[i])
            if decision is not None:
                decisions.append(decision)
        routes[name] = decisions
    torch_route, onnx_route = routes["checkpoint"], routes["onnx"]
    assert len(onnx_route) == len(torch_route) == result.bars + 1
    targets = np.array([d.target_position for d in onnx_route])
    assert np.array_equal(targets, [d.target_position for d in torch_route])  # the argmax at every bar
    assert np.array_equal(targets[:-1], result.position) and len(set(targets.tolist())) >= 2
    np.testing.assert_allclose([d.logits for d in onnx_route], [d.logits for d in torch_route], rtol=0, atol=1e-5)
    np.testing.assert_allclose([d.value for d in onnx_route], [d.value for d in torch_route], rtol=0, atol=1e-5)
    assert [d.equity for d in onnx_route] == [d.equity for d in torch_route]  # same trades, same book


def json_of(capsys: pytest.CaptureFixture, *argv: object) -> dict:
    assert predict.main([str(a) for a in argv] + ["--json"]) == 0
    out, err = capsys.readouterr()
    assert without_warm_up_warning(err) == ""
    return json.loads(out)


def test_predict_with_the_model_and_a_state(run: Path, capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    common = ("--data", run / "prices.csv", "--start", START)
    by_model = json_of(capsys, "--model", run / "policy.onnx", *common)
    by_checkpoint = json_of(capsys, "--checkpoint", run / "checkpoints", *common)
    assert by_model["route"] == "onnx" and by_model["target_position"] == by_checkpoint["target_position"]
    np.testing.assert_allclose(by_model["logits"], by_checkpoint["logits"], rtol=0, atol=1e-5)
    lines = (run / "prices.csv").read_text().splitlines(keepends=True)
    live, state = tmp_path / "live.csv", tmp_path / "state.json"
    for rows in (100, 104, len(lines) - 1):
        live.write_text("".join(lines[: rows + 1]))
        incremental = json_of(capsys, "--model", run / "policy.onnx", "--data", live, "--start", START,
                              "--state", state)
        scratch = json_of(capsys, "--model", run / "policy.onnx", "--data", live, "--start", START)
        incremental.pop("new_bars"), scratch.pop("new_bars")
        assert incremental == scratch
    by_model.pop("new_bars")
    assert incremental == by_model  # the whole file, consumed in three calls
    assert predict.main(["--checkpoint", str(run / "checkpoints"), "--data", str(live), "--start", START,
                         "--state", str(state)]) == 2  # the other route's rounding: refused
    assert "through the onnx route" in capsys.readouterr().err


def one_error(capsys: pytest.CaptureFixture, main, argv: list, match: str) -> None:
    assert main([str(a) for a in argv]) == 2
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert out == "" and len(lines) == 1 and "Traceback" not in err and match in lines[0], err


def test_bad_models_and_exports_are_one_line_and_exit_2(run: Path, capsys: pytest.CaptureFixture,
                                                        tmp_path: Path) -> None:
    data = ("--data", run / "prices.csv")
    one_error(capsys, predict.main, ["--model", tmp_path / "nope.onnx", *data], "no such file")
    cut = tmp_path / "cut.onnx"
    cut.write_bytes((run / "policy.onnx").read_bytes()[:500])
    one_error(capsys, predict.main, ["--model", cut, *data], "not an ONNX model onnxruntime can load")
    plain = tmp_path / "plain.onnx"  # a valid ONNX model without this project's metadata
    model = onnx.load(run / "policy.onnx")
    del model.metadata_props[:]
    onnx.save(model, plain)
    one_error(capsys, predict.main, ["--model", plain, *data], "not a policy exported by export-ppo-lstm")
    one_error(capsys, predict.main, ["--model", run / "policy.onnx", *data, "--device", "cuda"], "--device is for")
    short = tmp_path / "short.csv"
    short.write_text("".join((run / "prices.csv").read_text().splitlines(keepends=True)[:10]))
    one_error(capsys, predict.main, ["--model", run / "policy.onnx", "--data", short], "window + 1 = 13")
    one_error(capsys, export_onnx.main, ["--checkpoint", tmp_path / "nope.pt", "--onnx", tmp_path / "x.onnx"],
              "no such file")
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    one_error(capsys, export_onnx.main, ["--checkpoint", bad, "--onnx", tmp_path / "x.onnx"], "not a checkpoint")
    one_error(capsys, export_onnx.main, ["--checkpoint", run / "checkpoints", "--onnx", tmp_path / "no" / "x.onnx"],
              "no directory")
    assert not (tmp_path / "x.onnx").exists()


# ----------------------------------------------------------------------------- feature columns


@pytest.fixture(scope="module")
def featured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """The shared run trained with --features vol_z,Mom, its model exported here, and what the export printed."""
    run = featured_run(tmp_path_factory)
    model = tmp_path_factory.mktemp("onnx-featured") / "policy.onnx"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert export_onnx.main(["--checkpoint", str(run / "checkpoints"), "--onnx", str(model)]) == 0
    return run, model, printed.getvalue()


def test_featured_metadata_names_the_columns_and_their_normalisation(featured: tuple[Path, Path, str]) -> None:
    run, model, printed = featured
    assert "observation 14 (window 8, features vol_z,Mom, EMA spans 500)" in printed
    meta = {p.key: p.value for p in onnx.load(model).metadata_props}
    assert json.loads(meta["features"]) == ["vol_z", "Mom"] and json.loads(meta["env"])["features"] == "vol_z,Mom"
    assert meta["obs_dim"] == "14"  # window 8 + 3 + 2 features + the default EMA(500) deviation
    assert (meta["feature_window"], meta["feature_clip"]) == ("1024", "5.0")
    assert (meta["feature_std_floor_rel"], meta["feature_std_floor_abs"]) == ("1e-09", "0.0")
    assert "[W+3+j] the data's column features[j]" in meta["observation"]
    assert spec_of(meta, "m").features == ("vol_z", "Mom")
    for key, value, match in (("feature_window", "128", "feature_window"), ("features", '["vol_z"]', "not its env's")):
        with pytest.raises(ValueError, match=match):
            spec_of({**meta, key: value}, "m")


def test_featured_onnx_policy_takes_the_checkpoints_decisions_at_every_bar(featured: tuple[Path, Path, str],
                                                                          capsys: pytest.CaptureFixture,
                                                                          tmp_path: Path) -> None:
    run, model, _ = featured
    agent, config = load_policy(run / "checkpoints" / "best.pt")
    data = load_ohlcv(run / "prices.csv", features=config.env.feature_names)
    result = backtest_history(agent, config.env, data)  # decisions from bar 30, where Vol_Z is first defined
    routes = {}
    for name, policy in (("checkpoint", TradingPolicy.load(run / "checkpoints")),
                         ("onnx", TradingPolicy.from_onnx(model))):
        decisions = []
        for i in range(len(data)):
            decision = policy.update(data.timestamps[i], data.open[i], data.high[i], data.low[i], data.close[i],
                                     features=dict(zip(("VOL_Z", "mom"), data.features[i])))
            if decision is not None:
                decisions.append(decision)
        routes[name] = decisions
    torch_route, onnx_route = routes["checkpoint"], routes["onnx"]
    assert len(onnx_route) == len(torch_route) == result.bars + 1 == len(data) - VOL_WARMUP
    targets = np.array([d.target_position for d in onnx_route])
    assert np.array_equal(targets, [d.target_position for d in torch_route])  # the argmax at every bar
    assert np.array_equal(targets[:-1], result.position) and len(set(targets.tolist())) >= 2
    np.testing.assert_allclose([d.logits for d in onnx_route], [d.logits for d in torch_route], rtol=0, atol=1e-5)
    assert np.array_equal([d.observation for d in onnx_route], [d.observation for d in torch_route])
    # predict-ppo-lstm --model on the file with feature columns, from scratch and through a growing --state
    lines = (run / "prices.csv").read_text().splitlines(keepends=True)
    live, state = tmp_path / "live.csv", tmp_path / "state.json"
    for rows in (40, 41, len(lines) - 1):
        live.write_text("".join(lines[: rows + 1]))
        incremental = json_of(capsys, "--model", model, "--data", live, "--state", state)
        scratch = json_of(capsys, "--model", model, "--data", live)
        incremental.pop("new_bars"), scratch.pop("new_bars")
        assert incremental == scratch
        assert scratch["target_position"] == onnx_route[rows - 1 - VOL_WARMUP].target_position
    assert scratch["logits"] == list(onnx_route[-1].logits)
