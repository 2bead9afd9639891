"""The server's process: ``kill -9`` mid-stream and a restart on the same --state-dir give the decisions of an
uninterrupted stream, no bar lost or consumed twice; a second server on the state dir is refused by its
lock; SIGTERM finishes the requests in flight, leaves every answered bar on disk and exits 0; a start the
server refuses is one line and exit 2."""
from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("onnxruntime")

from serve_fixtures import (Server, bodies, latest_state, model, no_server_outlives_its_test,  # noqa: E402,F401
                            run_server_command)
from ppo_lstm.deploy.policy import TradingPolicy  # noqa: E402

pytestmark = pytest.mark.e2e
HISTORY = 100


def uninterrupted(model: Path, bodies: list[dict[str, Any]], bars: int) -> list[dict[str, Any]]:
    """The decisions after bars HISTORY - 1 .. bars - 1 of one stream never stopped (in this process)."""
    policy, found = TradingPolicy.from_onnx(model), []
    for i, b in enumerate(bodies[:bars]):
        decision = policy.update(b["time"], b["open"], b["high"], b["low"], b["close"], b["volume"], b["features"])
        if i >= HISTORY - 1:
            found.append({"time": decision.to_dict()["time"], "target_position": decision.target_position,
                          "logits": list(decision.logits), "value": decision.value, "equity": decision.equity})
    return found


def decided(answer: dict[str, Any]) -> dict[str, Any]:
    return {"time": answer["bar"]["time"], "target_position": answer["decision"]["target_position"],
            "logits": answer["decision"]["logits"], "value": answer["decision"]["value"],
            "equity": answer["account"]["equity"]}


def send_and_kill(server: Server, body: dict[str, Any]) -> None:
    """Send one bar's request on a raw socket and ``kill -9`` the server without reading the answer."""
    data = json.dumps(body).encode()
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"POST /sessions/spy/bars HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
        server.kill()


def test_kill_9_mid_stream_and_a_restart_lose_no_bar(model: Path, bodies: list[dict[str, Any]],
                                                     tmp_path: Path) -> None:
    state = tmp_path / "state"
    server = Server("--model", model, state_dir=state).ready()
    answers = [server.client.post("/sessions/spy", json={"bars": bodies[:HISTORY]}).json()["last"]]
    answers += [server.client.post("/sessions/spy/bars", json=b).json() for b in bodies[HISTORY:HISTORY + 11]]
    server.kill()  # after bar HISTORY + 10 was answered
    server = Server("--model", model, state_dir=state).ready()
    assert "1 session from" in server.output()
    second = run_server_command("--model", model, "--state-dir", state, "--port", "0")
    assert second.returncode == 2 and second.stderr.count("\n") == 1
    assert f"is in use by another serve-ppo-lstm (pid {server.process.pid}," in second.stderr
    again = server.client.post("/sessions/spy/bars", json=bodies[HISTORY + 10]).json()  # resent: answered already
    assert again == {**answers[-1], "duplicate": True}
    send_and_kill(server, bodies[HISTORY + 11])  # in flight: consumed or not, never half
    server = Server("--model", model, state_dir=state).ready()
    assert not list((state / "sessions" / "spy").glob(".*.tmp"))
    answers += [server.client.post("/sessions/spy/bars", json=b).json() for b in bodies[HISTORY + 11:HISTORY + 20]]
    assert [decided(a) for a in answers] == uninterrupted(model, bodies, HISTORY + 20)
    assert server.client.get("/sessions/spy").json()["bars"] == HISTORY + 20  # no bar lost or consumed twice
    assert json.loads(latest_state(state, "spy").read_text())["bars"] == HISTORY + 20
    assert server.stop() == 0


def test_sigterm_finishes_the_requests_in_flight_and_exits_0(model: Path, bodies: list[dict[str, Any]],
                                                             tmp_path: Path) -> None:
    state, names = tmp_path / "state", [f"s{i}" for i in range(4)]
    server = Server("--model", model, state_dir=state).ready()
    for name in names:
        assert server.client.post(f"/sessions/{name}", json={"bars": bodies[:HISTORY]}).status_code == 201
    answered, refused = {name: 0 for name in names}, []
    enough = threading.Event()

    def feed(name: str) -> None:
        with httpx.Client(base_url=server.url, timeout=30.0) as client:
            for body in bodies[HISTORY:]:
                try:
                    got = client.post(f"/sessions/{name}/bars", json=body)
                except httpx.TransportError:
                    return  # the server stopped taking requests
                if got.status_code != 200:
                    refused.append(got.text)
                    return
                answered[name] += 1
                if sum(answered.values()) >= 20:
                    enough.set()

    threads = [threading.Thread(target=feed, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    assert enough.wait(60)
    assert server.stop() == 0, server.errors()
    for thread in threads:
        thread.join(30)
    assert not refused and sum(answered.values()) < 4 * (len(bodies) - HISTORY)  # stopped mid-stream
    for name in names:  # every answered bar is on disk, and none that was not answered
        assert json.loads(latest_state(state, name).read_text())["bars"] == HISTORY + answered[name]
    server = Server("--model", model, state_dir=state).ready()
    assert "4 sessions from" in server.output()
    for name in names:
        nxt = server.client.post(f"/sessions/{name}/bars", json=bodies[HISTORY + answered[name]]).json()
        assert nxt["bar"]["index"] == HISTORY + answered[name] and nxt["duplicate"] is False
    assert server.stop() == 0


def test_a_start_the_server_refuses_is_one_line_and_exit_2(model: Path, tmp_path: Path) -> None:
    (tmp_path / "short").write_text("too-short\n")
    bad_state = tmp_path / "bad" / "sessions" / "spy"
    bad_state.mkdir(parents=True)
    (bad_state / "state-000000000001.json").write_text('{"format": "something else"}\n')
    for args, message in (
        (("--host", "0.0.0.0"), "--host 0.0.0.0 is not a loopback address"),
        (("--token-file", tmp_path / "short"), "the token must be at least 16 printable characters"),
        (("--model", tmp_path / "missing.onnx"), "missing.onnx: no such file"),
        (("--state-dir", tmp_path / "bad"), "state-000000000001.json: not a policy state"),
    ):
        argv = {"--model": model, "--state-dir": tmp_path / "state", "--port": "0"}
        argv.update(dict(zip(args[::2], args[1::2])))
        done = run_server_command(*(item for pair in argv.items() for item in pair))
        assert done.returncode == 2 and done.stdout == "", (args, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ") and message in done.stderr, args
