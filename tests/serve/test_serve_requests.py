"""The server's requests, against one real server of the ONNX model (with a bearer token, fsync on): a bar
once (a duplicate answers again without consuming, an older bar or another bar of the same time is 409),
every bad input a 4xx JSON error that leaves the session and its state file as they were while the server
serves on, the token, session names, fills, gaps, and opening and closing sessions."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("onnxruntime")

from serve_fixtures import Server, bodies, latest_state, model  # noqa: E402,F401 - bodies and model are fixtures
from ppo_lstm.deploy.policy import TradingPolicy  # noqa: E402
from ppo_lstm.serve.models import Closed, DecisionAnswer, Health, SessionList, SessionOut  # noqa: E402

pytestmark = pytest.mark.e2e
TOKEN = "test-token-0123456789abcdef"
HISTORY = 100  # bars a session opens on


@pytest.fixture(scope="module")
def server(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("requests")
    (base / "token").write_text(TOKEN + "\n")
    (base / "token").chmod(0o600)
    started = Server("--model", model, "--token-file", base / "token", "--max-body-bytes", 200_000,
                     state_dir=base / "state", token=TOKEN).ready()
    yield started
    assert started.stop() == 0, started.errors()


def open_session(server: Server, name: str, bodies: list[dict[str, Any]], bars: int = HISTORY) -> dict[str, Any]:
    server.client.delete(f"/sessions/{name}")  # a fresh one
    opened = server.client.post(f"/sessions/{name}", json={"bars": bodies[:bars]})
    assert opened.status_code == 201, opened.text
    return opened.json()


def state_bytes(server: Server, name: str) -> bytes:
    """The newest state file's name and contents (a write makes another generation)."""
    latest = latest_state(server.state_dir, name)
    return latest.name.encode() + b"\n" + latest.read_bytes()


def test_a_bar_is_consumed_once(server: Server, bodies: list[dict[str, Any]]) -> None:
    open_session(server, "once", bodies)
    first = server.client.post("/sessions/once/bars", json=bodies[HISTORY])
    assert first.status_code == 200 and first.json()["duplicate"] is False
    on_disk = state_bytes(server, "once")
    assert json.loads(latest_state(server.state_dir, "once").read_text())["bars"] == HISTORY + 1  # before the answer
    again = server.client.post("/sessions/once/bars", json=bodies[HISTORY])
    assert again.status_code == 200 and again.json() == {**first.json(), "duplicate": True}
    assert state_bytes(server, "once") == on_disk  # nothing consumed, nothing written
    for bar, when in ((bodies[HISTORY - 5], "older than"), ({**bodies[HISTORY], "close": bodies[HISTORY]["close"] + 0.01},
                                                            "another bar of the same time as")):
        refused = server.client.post("/sessions/once/bars", json=bar)
        assert refused.status_code == 409 and when in refused.json()["error"]
        assert state_bytes(server, "once") == on_disk
    nxt = server.client.post("/sessions/once/bars", json=bodies[HISTORY + 1])
    assert nxt.status_code == 200 and nxt.json()["bar"]["index"] == HISTORY + 1
    # every answer is its response model, as the OpenAPI page says
    assert DecisionAnswer.model_validate(nxt.json()).model_dump(mode="json") == nxt.json()
    view = server.client.get("/sessions/once").json()
    assert SessionOut.model_validate(view).model_dump(mode="json") == view and view["last"] == nxt.json()
    for path, response_model in (("/health", Health), ("/sessions", SessionList)):
        body = server.client.get(path).json()
        assert response_model.model_validate(body).model_dump(mode="json") == body
    closed = server.client.delete("/sessions/once").json()
    assert Closed.model_validate(closed).model_dump(mode="json") == closed == {"session": "once", "bars": HISTORY + 2}


def test_bad_input_is_a_4xx_json_error_and_changes_nothing(server: Server, bodies: list[dict[str, Any]]) -> None:
    open_session(server, "bad", bodies)
    open_session(server, "other", bodies)
    view, on_disk = server.client.get("/sessions/bad").json(), state_bytes(server, "bad")
    bar = bodies[HISTORY]
    no_mom = {**bar, "features": {"Vol_Z": bar["features"]["Vol_Z"]}}
    raw = json.dumps(bar).replace(f'"open": {bar["open"]}', '"open": NaN')
    assert "NaN" in raw
    cases = [
        (dict(json=no_mom), 422, "no value for 'Mom'"),
        (dict(json={**bar, "close": -1.0}), 422, "close: Input should be greater than 0"),
        (dict(json={**bar, "high": bar["low"] - 1}), 422, "is below low"),
        (dict(content=raw, headers={"content-type": "application/json"}), 422, "open: Input should be a finite number"),
        (dict(json=bodies[HISTORY - 30]), 409, "older than the last bar consumed"),  # a bar of the warm-up
        (dict(content=b'{"time": "2021-06-01", "open": 1', headers={"content-type": "application/json"}), 422,
         "JSON decode error"),
        (dict(json={**bar, "colse": 1.0}), 422, "colse: Extra inputs are not permitted"),
        (dict(json={**bar, "time": "not a time"}), 422, "is not a time"),
        (dict(content=b"{" + b" " * 300_000 + b"}", headers={"content-type": "application/json"}), 413,
         "over the limit of 200000 bytes"),  # by its Content-Length
        (dict(content=iter([b"{", b" " * 300_000, b"}"]), headers={"content-type": "application/json"}), 413,
         "over the limit of 200000 bytes"),  # chunked: as it is read
    ]
    for request, status, message in cases:
        got = server.client.post("/sessions/bad/bars", **request)
        assert got.status_code == status and message in got.json()["error"], (request, got.text)
        assert server.client.get("/sessions/bad").json() == view and state_bytes(server, "bad") == on_disk
    missing = server.client.post("/sessions/nobody/bars", json=bar)
    assert missing.status_code == 404 and "no session 'nobody'" in missing.json()["error"]
    short = server.client.post("/sessions/short", json={"bars": bodies[:20]})  # Vol_Z has no value yet
    assert short.status_code == 422 and "feature column 'Vol_Z' holds no values" in short.json()["error"]
    served = server.client.post("/sessions/other/bars", json=bar)  # the other sessions are served on
    assert served.status_code == 200 and served.json()["bar"]["index"] == HISTORY
    assert server.client.post("/sessions/bad/bars", json=bar).json() == served.json() | {"session": "bad"}


def test_every_request_needs_the_token(server: Server) -> None:
    for headers, what in (({}, "no bearer token"), (server.headers("wrong-token-0123456789abcdef"), "a wrong bearer")):
        for method, path in (("GET", "/health"), ("GET", "/sessions"), ("POST", "/sessions/x/bars"),
                             ("GET", "/openapi.json")):
            got = httpx.request(method, server.url + path, headers=headers)
            assert got.status_code == 401 and got.json()["error"].startswith(what)
            assert got.headers["www-authenticate"] == "Bearer"
    health = server.client.get("/health").json()
    assert health["status"] == "ok" and health["route"] == "onnx" and health["fsync"] is True
    schema = server.client.get("/openapi.json").json()
    assert {"/sessions/{name}/bars", "/sessions/{name}/fill", "/health"} <= set(schema["paths"])
    assert server.client.get("/docs").status_code == 200


def test_session_names_stay_in_the_state_dir(server: Server, bodies: list[dict[str, Any]]) -> None:
    for name in ("..%2F..%2Fescape", "a..b", ".hidden", "x" * 65, "sp%20y"):
        got = server.client.post(f"/sessions/{name}", json={"bars": bodies[:HISTORY]})
        assert got.status_code in (404, 422) and "error" in got.json(), (name, got.text)
    assert sorted(p.name for p in (server.state_dir / "sessions").iterdir()) == sorted(
        server.client.get("/sessions").json()["sessions"])
    assert not any(server.state_dir.parent.glob("escape*"))


def test_a_reported_fill_is_booked_as_predict_books_it(server: Server, model: Path,
                                                       bodies: list[dict[str, Any]]) -> None:
    open_session(server, "fill", bodies)
    bad = server.client.post("/sessions/fill/fill", json={"price": 100.0, "lots": 7})
    assert bad.status_code == 422 and "fill lots must be one of [-1, 0, 1]" in bad.json()["error"]
    price = bodies[HISTORY]["open"] * 1.01
    reported = server.client.post("/sessions/fill/fill", json={"price": price, "lots": -1})
    assert reported.status_code == 200 and reported.json()["last"]["account"]["pending_fill"] == {"price": price,
                                                                                                 "lots": -1}
    answer = server.client.post("/sessions/fill/bars", json=bodies[HISTORY]).json()
    policy = TradingPolicy.from_onnx(model)  # the same stream in this process
    for body in bodies[:HISTORY]:
        policy.update(body["time"], body["open"], body["high"], body["low"], body["close"], body["volume"],
                      body["features"])
    policy.fill(price, -1)
    body = bodies[HISTORY]
    decision = policy.update(body["time"], body["open"], body["high"], body["low"], body["close"], body["volume"],
                             body["features"])
    assert answer["decision"]["position"] == -1 and answer["account"]["pending_fill"] is None
    assert answer["account"]["equity"] == decision.equity and answer["decision"]["logits"] == list(decision.logits)


def test_a_gap_wider_than_the_history_is_reported(server: Server, bodies: list[dict[str, Any]]) -> None:
    opened = open_session(server, "gap", bodies)
    assert opened["allowed_gap_seconds"] == 3 * 86400.0  # weekends: the widest gap of business days
    # 100 bars are too few for the model's EMA(500) to forget its start: the session says so, and keeps saying it
    assert "the history has 100 bars, fewer than the 1152 an EMA of span 500" in opened["warm_up_warning"]
    assert server.client.get("/sessions/gap").json()["warm_up_warning"] == opened["warm_up_warning"]
    late = {**bodies[HISTORY], "time": "2021-07-01"}  # the history ends on 2021-05-20
    answer = server.client.post("/sessions/gap/bars", json=late).json()
    assert answer["gap"]["seconds"] == 42 * 86400.0 and answer["gap"]["allowed_seconds"] == 3 * 86400.0
    assert "bars may be missing" in answer["gap"]["message"]
    assert server.client.post("/sessions/gap/bars", json=late).json()["gap"] == answer["gap"]  # the duplicate's too
    assert server.client.post("/sessions/gap/bars", json={**bodies[HISTORY + 1], "time": "2021-07-02"}
                              ).json()["gap"] is None


def test_sessions_open_once_and_close(server: Server, bodies: list[dict[str, Any]]) -> None:
    open_session(server, "life", bodies)
    again = server.client.post("/sessions/life", json={"bars": bodies[:HISTORY]})
    assert again.status_code == 409 and "open already" in again.json()["error"]
    assert "life" in server.client.get("/sessions").json()["sessions"]
    closed = server.client.delete("/sessions/life")
    assert closed.status_code == 200 and closed.json() == {"session": "life", "bars": HISTORY}
    assert not (server.state_dir / "sessions" / "life").exists()
    assert server.client.get("/sessions/life").status_code == 404
    assert server.client.delete("/sessions/life").status_code == 404
    assert server.client.post("/sessions/life", json={"bars": bodies[:HISTORY]}).status_code == 201
