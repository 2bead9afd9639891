"""Shared by the server tests: a real ``serve-ppo-lstm`` process on 127.0.0.1 (``Server``), the shared tiny
model of tests/deploy (trained with ``--features vol_z,Mom``) and its ONNX export, and the bars of its
prices.csv as request bodies."""
from __future__ import annotations

import fcntl
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import httpx
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy"))

from conftest import ROOT, env_for_child  # noqa: E402
from deploy_fixtures import featured_run  # noqa: E402,F401 - re-exported for the test modules

START_TIMEOUT = 60.0


class Server:
    """One ``python -m ppo_lstm.serve`` process on a free port of 127.0.0.1 (``--port 0``: the port it
    prints), its output in temp files; started at once, ``ready()`` waits for it."""

    started: list["Server"] = []  # every Server of this pytest process

    def __init__(self, *args: object, state_dir: Path, token: Optional[str] = None) -> None:
        self.state_dir, self.token = Path(state_dir), token
        self._out, self._err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        command = [sys.executable, "-m", "ppo_lstm.serve", *map(str, args), "--state-dir", str(state_dir),
                   "--port", "0"]
        self.process = subprocess.Popen(command, cwd=ROOT, stdout=self._out, stderr=self._err, env=env_for_child(),
                                        start_new_session=True)
        self.url = ""
        self.client = httpx.Client(timeout=30.0)
        Server.started.append(self)

    def ready(self) -> "Server":
        """Wait for the server's ``serving`` line; then ``url`` and ``client`` (with the token) talk to it."""
        self.url = self._wait_for_line()
        self.client = httpx.Client(base_url=self.url, timeout=30.0, headers=self.headers())
        return self

    def headers(self, token: Optional[str] = None) -> dict[str, str]:
        """The bearer header of ``token`` (default: the server's)."""
        token = self.token if token is None else token
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _wait_for_line(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            match = re.search(r"on (http://127\.0\.0\.1:\d+),", self.output())
            if match:
                return match.group(1)
            if self.process.poll() is not None:
                pytest.fail(f"the server exited ({self.process.returncode}) before serving: {self.errors()}")
            time.sleep(0.02)
        self.kill()
        pytest.fail(f"the server did not start within {START_TIMEOUT} s: {self.errors()}")

    def output(self) -> str:
        return _read(self._out)

    def errors(self) -> str:
        return _read(self._err)

    def kill(self) -> None:
        """SIGKILL (``kill -9``), and wait for it."""
        self.client.close()
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> int:
        """SIGTERM; the exit code."""
        self.client.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=60)


@pytest.fixture(autouse=True)
def no_server_outlives_its_test() -> Iterator[None]:
    """Kill the servers a test started and left running (an assertion failed before it stopped them);
    a module's shared server is stopped by its own fixture."""
    before = len(Server.started)
    yield
    for server in Server.started[before:]:
        if server.process.poll() is None:
            server.kill()
    del Server.started[before:]


def _read(handle: Any) -> str:
    fd = handle.fileno()
    return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")


def latest_state(state_dir: Path, name: str) -> Path:
    """The newest generation of session ``name``'s state files (at most two are kept)."""
    files = sorted((Path(state_dir) / "sessions" / name).glob("state-*.json"))
    assert 1 <= len(files) <= 2, files
    return files[-1]


def run_server_command(*args: object, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """``python -m ppo_lstm.serve ARGS`` run to its end (a start-up the server refuses)."""
    return subprocess.run([sys.executable, "-m", "ppo_lstm.serve", *map(str, args)], cwd=ROOT, env=env_for_child(),
                          capture_output=True, text=True, timeout=timeout)


def shared_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared featured run's best.pt exported to ONNX once per test session (under a file lock)."""
    run = featured_run(tmp_path_factory)
    folder = run.parent / "deploy-featured-onnx"
    model = folder / "policy.onnx"
    with open(run.parent / "deploy-featured-onnx.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not model.exists():
            folder.mkdir(exist_ok=True)
            import contextlib
            import io

            from ppo_lstm.deploy import export_onnx

            with contextlib.redirect_stdout(io.StringIO()):
                assert export_onnx.main(["--checkpoint", str(run / "checkpoints"), "--onnx", str(model)]) == 0
    return model


def bar_bodies(prices: Path) -> list[dict[str, Any]]:
    """Every bar of the featured prices.csv as a request body (features by the file's own names; NaN as null)."""
    frame = pd.read_csv(prices)

    def value(v: float) -> Optional[float]:
        return None if math.isnan(v) else float(v)

    return [{"time": row.Date, "open": row.Open, "high": row.High, "low": row.Low, "close": row.Close,
             "volume": float(row.Volume), "features": {"Vol_Z": value(row.Vol_Z), "mom": value(row.mom)}}
            for row in frame.itertuples()]


@pytest.fixture(scope="module")
def bodies(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The shared featured run's price file as bar bodies, oldest first."""
    return bar_bodies(featured_run(tmp_path_factory) / "prices.csv")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared featured run's ONNX export."""
    return shared_onnx(tmp_path_factory)
