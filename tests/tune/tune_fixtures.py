"""Helpers of the tuning tests: a tiny base configuration, the tuning command as a process,
reading a study back, and a throwaway PostgreSQL 15 server."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, Optional

import optuna
import pytest

from conftest import Run, free_port

# 8 episodes of 16 bars, a hold-out backtest every 4: two reports per trial, a few seconds each.
TINY = ["--num-envs", "2", "--update-interval", "32", "--episode-length", "16", "--window", "8",
        "--hidden-size", "16", "--lstm-size", "16", "--minibatches", "2", "--market", "regime",
        "--device", "cpu", "--seed", "3", "--episodes", "8", "--checkpoint-interval", "4",
        "--holdout-episodes", "4"]
TUNE = [sys.executable, "-m", "ppo_lstm.tune"]


def write_space(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def start_tune(cwd: Path, *args: str) -> Run:
    return Run(cwd, [*TINY, *args], launcher=TUNE)


def trials_of(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    if url.startswith("journal:"):
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend
        storage = JournalStorage(JournalFileBackend(url[len("journal:"):]))
    else:
        storage = url
    return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)


def assert_exactly(trials: list[optuna.trial.FrozenTrial], n: int) -> None:
    """N trials in the storage, all finished, one per slot 0..N-1."""
    states = [t.state for t in trials]
    assert len(trials) == n, states
    assert all(s.is_finished() for s in states), states
    assert sorted(t.user_attrs["slot"] for t in trials) == list(range(n))


class Postgres:
    """A PostgreSQL 15 server in a temporary directory, on a free port; run as ``nobody`` when
    this process is root (the server refuses to run as root)."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="pg-", dir="/tmp"))
        self.port = free_port()
        self.user: Optional[str] = "nobody" if os.geteuid() == 0 else None
        if self.user:
            shutil.chown(self.dir, self.user)
        self.data = self.dir / "data"
        self._run(["initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"])
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(["pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.dir / "log"), "-w", "start"])
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, command: list[str]) -> None:
        result = subprocess.run(command, user=self.user, capture_output=True, text=True, timeout=60, cwd=self.dir)
        assert result.returncode == 0, f"{command[0]}: {result.stdout}{result.stderr}"

    def stop(self) -> None:
        try:
            self._run(["pg_ctl", "-D", str(self.data), "-m", "immediate", "stop"])
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def postgres_available() -> Optional[str]:
    """None when a server can be started here, else why not."""
    missing = [b for b in ("initdb", "pg_ctl") if shutil.which(b) is None]
    if missing:
        return f"PostgreSQL server binaries not on PATH: {', '.join(missing)}"
    return None


def postgres_server() -> Iterator[Postgres]:
    why = postgres_available()
    if why is not None:
        if os.environ.get("REQUIRE_POSTGRES") == "1":
            pytest.fail(f"REQUIRE_POSTGRES=1 but {why}")
        pytest.skip(why)
    server = Postgres()
    try:
        yield server
    finally:
        server.stop()


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.2)
