"""A session fed a file bar by bar over HTTP decides what evaluate-ppo-lstm traded on the same bars, at the
cut points of predict's parity test (tests/deploy/predict_checks.py), for the checkpoint (with and without
--start) and for its ONNX export: real servers on 127.0.0.1, a real HTTP client."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")
pytest.importorskip("onnxruntime")

from serve_fixtures import Server, bar_bodies, featured_run, shared_onnx  # noqa: E402
from deploy_fixtures import VOL_WARMUP  # noqa: E402
from ppo_lstm.evaluation import cli as evaluate  # noqa: E402

pytestmark = pytest.mark.e2e
START = "2021-03-01"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return featured_run(tmp_path_factory)


@pytest.fixture(scope="module")
def servers(run: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    """A server of the checkpoint and one of its ONNX export, started side by side."""
    base = tmp_path_factory.mktemp("parity")
    started = {"checkpoint": Server("--checkpoint", run / "checkpoints", "--no-fsync", state_dir=base / "ck"),
               "onnx": Server("--model", shared_onnx(tmp_path_factory), "--no-fsync", state_dir=base / "onnx")}
    for server in started.values():
        server.ready()
    yield started
    for server in started.values():
        assert server.stop() == 0, server.errors()


@pytest.fixture(scope="module")
def curves(run: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[Optional[str], pd.DataFrame]:
    """evaluate-ppo-lstm's equity curve on the whole file, without and with --start (row k + 1: the position
    held during the bar after row k's)."""
    out, found = tmp_path_factory.mktemp("curves"), {}
    for start in (None, START):
        since = ["--start", start] if start else []
        assert evaluate.main(["--checkpoint", str(run / "checkpoints"), "--data", str(run / "prices.csv"), *since,
                              "--equity-csv", str(out / f"{start}.csv")]) == 0
        found[start] = pd.read_csv(out / f"{start}.csv")
    return found


def first_row(run: Path, start: Optional[str]) -> int:
    """The first decision bar: where Vol_Z is first defined, or --start's bar."""
    dates = pd.read_csv(run / "prices.csv")["Date"]
    return VOL_WARMUP if start is None else int(dates.index[dates == start][0])


def check(answer: dict[str, Any], curve: pd.DataFrame, k: int) -> None:
    """``answer`` is evaluate's decision at its row ``k``."""
    assert answer["bar"]["time"] == curve["time"][k]
    assert answer["decision"]["position"] == curve["position"][k] == answer["account"]["position"]
    if k + 1 < len(curve):
        assert answer["decision"]["target_position"] == curve["position"][k + 1]
    assert answer["account"]["equity"] == pytest.approx(curve["equity"][k], rel=1e-12)


def stream(server: Server, run: Path, curve: pd.DataFrame, start: Optional[str], name: str) -> list[dict[str, Any]]:
    """Sessions opened at predict's cut points (each first decision checked), then the first one fed every
    later bar over HTTP (each decision checked); returns the answers of that stream."""
    bodies, first = bar_bodies(run / "prices.csv"), first_row(run, start)
    cuts = (first + 1, first + 2, 97, 180, len(bodies) - 1)
    for cut in cuts:
        opened = server.client.post(f"/sessions/{name}.{cut}", json={"bars": bodies[:cut], "start": start})
        assert opened.status_code == 201, opened.text
        assert opened.json()["bars"] == cut
        check(opened.json()["last"], curve, cut - 1 - first)
    answers = []
    for i in range(cuts[0], len(bodies)):
        got = server.client.post(f"/sessions/{name}.{cuts[0]}/bars", json=bodies[i])
        assert got.status_code == 200, got.text
        check(got.json(), curve, i - first)
        answers.append(got.json())
    assert len(set(curve["position"])) >= 2  # the policy trades
    return answers


@pytest.mark.parametrize("start", [None, START])
def test_checkpoint_sessions_decide_evaluates_positions(servers: dict[str, Server], run: Path,
                                                         curves: dict[Optional[str], pd.DataFrame],
                                                         start: Optional[str]) -> None:
    answers = stream(servers["checkpoint"], run, curves[start], start, f"ck{1 if start else 0}")
    assert {a["account"]["opened_at"] for a in answers} == {curves[start]["time"][0]}
    assert all(a["duplicate"] is False and a["gap"] is None for a in answers)


def test_onnx_sessions_decide_evaluates_positions(servers: dict[str, Server], run: Path,
                                                  curves: dict[Optional[str], pd.DataFrame]) -> None:
    answers = stream(servers["onnx"], run, curves[None], None, "onnx")
    whole = servers["checkpoint"].client.post("/sessions/ck-whole", json={"bars": bar_bodies(run / "prices.csv")})
    assert whole.status_code == 201, whole.text  # the checkpoint's decision after the same bars
    assert answers[-1]["bar"] == whole.json()["last"]["bar"]
    np.testing.assert_allclose(answers[-1]["decision"]["logits"], whole.json()["last"]["decision"]["logits"],
                               rtol=0, atol=1e-5)
    assert {a["account"]["opened_at"] for a in answers} == {curves[None]["time"][0]}
