"""The ONNX route imports neither torch nor pandas: ``predict-ppo-lstm --model`` (with a --state, on a plain CSV
file), ``TradingPolicy.from_onnx`` (bars, a fill, a saved and loaded state, the state lock) and the server's
session store (a session opened on a history and fed bars) run in a fresh child process whose ``sys.modules``
holds neither torch nor pandas, nor any module of this project that imports them; and the torch-free reading of an ONNX
model's saved env settings agrees with ``ppo_lstm.config``'s."""
from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from conftest import ROOT, env_for_child  # noqa: E402
from deploy_fixtures import featured_run  # noqa: E402
from ppo_lstm.config.migrate import migrate_env, settings_v1_to_v2  # noqa: E402
from ppo_lstm.deploy import export_onnx  # noqa: E402

CHILD = r"""
import csv, json, sys
from pathlib import Path
from ppo_lstm.deploy.predict import main
from ppo_lstm.deploy.policy import TradingPolicy
from ppo_lstm.deploy.state import state_lock
from ppo_lstm.serve.cli import build_parser, policy_factory, prepare
from ppo_lstm.serve.models import Bar, OpenSession
from ppo_lstm.serve.store import SessionStore, lock_state_dir

model, data, state = sys.argv[1:4]
codes = [main(["--model", model, "--data", data, "--json", "--state", state]),
         main(["--model", model, "--data", data, "--json", "--state", state])]  # the second reads it back
policy = TradingPolicy.from_onnx(model)
with open(data, newline="") as handle:
    rows = list(csv.DictReader(handle))
decisions = 0
for row in rows:
    features = {k: float(row[k]) if row[k] else None for k in ("Vol_Z", "mom")}
    decisions += policy.update(row["Date"], float(row["Open"]), float(row["High"]), float(row["Low"]),
                               float(row["Close"]), float(row["Volume"]), features) is not None
policy.fill(float(rows[-1]["Open"]), 1)
with state_lock(state + ".lib"):
    policy.save_state(state + ".lib")
    policy.load_state(state + ".lib")
bars = [Bar(time=r["Date"], open=float(r["Open"]), high=float(r["High"]), low=float(r["Low"]), close=float(r["Close"]),
            volume=float(r["Volume"]), features={k: float(r[k]) if r[k] else None for k in ("Vol_Z", "mom")})
        for r in rows]
args = build_parser().parse_args(["--model", model, "--state-dir", state + ".serve", "--port", "0", "--no-fsync"])
app, sock, lock, line = prepare(args)  # serve-ppo-lstm --model up to uvicorn: the app, its socket and lock
store = SessionStore(Path(args.state_dir), policy_factory(args), False)
opened = store.open("spy", OpenSession(bars=bars[:200]))
posted = [store.post("spy", bar)["bar"]["index"] for bar in bars[200:210]]
sock.close()
lock.release()
bound = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "pandas") or m in (
    "ppo_lstm.config.schema", "ppo_lstm.algo", "ppo_lstm.rundir.checkpoint", "ppo_lstm.deploy.torch_step",
    "ppo_lstm.evaluation.cli", "envs.data.loading", "envs.trading_env"))
print(json.dumps({"codes": codes, "decisions": decisions, "bound": bound, "posted": posted,
                  "opened": opened["last"]["bar"]["time"]}))
"""


@pytest.fixture(scope="module")
def onnx_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The shared run trained with --features vol_z,Mom, and its model exported here."""
    run = featured_run(tmp_path_factory)
    model = tmp_path_factory.mktemp("torch-free") / "policy.onnx"
    with contextlib.redirect_stdout(io.StringIO()):
        assert export_onnx.main(["--checkpoint", str(run / "checkpoints"), "--onnx", str(model)]) == 0
    return run, model


@pytest.mark.e2e
def test_the_onnx_route_imports_no_torch_nor_pandas(onnx_run: tuple[Path, Path], tmp_path: Path) -> None:
    run, model = onnx_run
    done = subprocess.run([sys.executable, "-c", CHILD, str(model), str(run / "prices.csv"),
                           str(tmp_path / "s.json")], cwd=ROOT, env=env_for_child(), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    first, second = json.loads(lines[0]), json.loads(lines[1])
    assert first["route"] == "onnx" and first["new_bars"] == 260 and second["new_bars"] == 0
    report = json.loads(lines[2])
    assert report["codes"] == [0, 0] and report["decisions"] == 230  # bars 30..259: Vol_Z's warm-up first
    assert report["bound"] == [], f"the ONNX route imported {report['bound']}"
    assert report["opened"] == "2021-10-07T00:00:00" and report["posted"] == list(range(200, 210))  # the server's
    assert json.loads((tmp_path / "s.json.lib").read_text())["fill"] is not None


@pytest.mark.parametrize("env", [
    {}, {"window": 8}, {"features": "vol_z", "feature_window": 24}, {"features": "", "feature_window": 24},
    {"features": "rsi"}, {"ema_spans": "5,40"}, {"ema_spans": None, "features": None}, "not a dict",
])
def test_the_torch_free_reading_of_saved_env_settings_is_the_configs(env: object) -> None:
    """An ONNX model's env (format 1, as env_settings recorded it) reads as a checkpoint's would."""
    assert migrate_env(env, None, "a model") == settings_v1_to_v2({"env": env})["env"]
