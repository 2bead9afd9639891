"""Shared helpers for the end-to-end tests: run the real CLI in a subprocess, in its
own temporary working directory, with a hard timeout, and check afterwards that no
process of the run (launcher, spawned workers, torchrun agents) is left behind.

A run's processes are found by their working directory (``/proc/<pid>/cwd``): every
test run gets a fresh ``tmp_path`` as cwd, which its children inherit, so the check
needs neither psutil nor process names.

The ``e2e`` marker is checked as the tests run (``e2e_marker.py``, whose hooks this file registers): a
passing test that started a Python child process (itself or through a fixture) must carry
it, and one that started none must not.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import pytest

# One intra-op thread in the test processes too, as every child run gets (env_for_child): with
# pytest-xdist's workers on every core, torch's default of one thread per core oversubscribes
# them (a subset of in-process tests ran 1.1x quicker). Set before torch is imported.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRAIN = str(ROOT / "train_ppo_lstm.py")

# A tiny model and env: a 2-worker run of ~10 episodes takes a few seconds.
TINY = ["--num-envs", "2", "--update-interval", "32", "--episode-length", "16", "--window", "8",
        "--hidden-size", "16", "--lstm-size", "16", "--minibatches", "2", "--market", "regime",
        "--device", "cpu", "--seed", "3", "--no-progress"]
SPAWN2 = ["--distributed", "--num-gpus", "2"]


def env_for_child(extra: Optional[dict[str, Optional[str]]] = None) -> dict[str, str]:
    """The environment of a child run; a ``None`` value in ``extra`` removes that variable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "PPO_LSTM_DUMP_FINAL_DIR", "PPO_LSTM_FAIL_AT"):
        env.pop(name, None)
    for name, value in (extra or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]


def processes_in(directory: Path) -> list[int]:
    """Pids of live processes whose cwd is ``directory`` or below it."""
    target = os.path.realpath(directory)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
            with open(f"/proc/{entry}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and (cwd == target or cwd.startswith(target + os.sep)):
            found.append(int(entry))
    return found


def kill_all_in(directory: Path) -> None:
    for pid in processes_in(directory):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def assert_no_process_left(directory: Path, wait: float = 10.0) -> None:
    """Every process started in ``directory`` must be gone (within ``wait`` seconds)."""
    deadline = time.monotonic() + wait
    while True:
        left = processes_in(directory)
        if not left:
            return
        if time.monotonic() > deadline:
            kill_all_in(directory)
            pytest.fail(f"processes left behind in {directory}: {left}")
        time.sleep(0.1)


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc/<pid>/task/*/children)."""
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                out += [int(p) for p in handle.read().split()]
    except OSError:
        pass
    return out


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    cwd: Path
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def error_lines(self) -> list[str]:
        """The non-blank lines of stderr."""
        return [line for line in self.stderr.splitlines() if line.strip()]


class Run:
    """One CLI process (with its own session) whose output goes to temp files. One a test
    leaves running (an assertion failed before it ended) is killed when the test ends
    (:func:`_no_run_outlives_its_test`)."""

    started_runs: list["Run"] = []  # every Run of this pytest process, in start order

    def __init__(self, cwd: Path, args: Sequence[str], launcher: Optional[Sequence[str]] = None,
                 env: Optional[dict[str, Optional[str]]] = None) -> None:
        self.cwd = Path(cwd)
        self.cwd.mkdir(parents=True, exist_ok=True)
        self._out = tempfile.TemporaryFile()
        self._err = tempfile.TemporaryFile()
        command = list(launcher) if launcher is not None else [sys.executable, TRAIN]
        self.started = time.monotonic()
        self.process = subprocess.Popen(command + [str(a) for a in args], cwd=self.cwd, stdout=self._out,
                                        stderr=self._err, env=env_for_child(env), start_new_session=True)
        self.pid = self.process.pid
        Run.started_runs.append(self)

    def kill(self) -> None:
        """End the run's whole process group, and any process left in its directory, at once."""
        if self.process.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()
        kill_all_in(self.cwd)

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def stderr_so_far(self) -> str:
        """What the run has written to stderr so far (read without moving the shared file offset)."""
        fd = self._err.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def wait(self, timeout: float = 90.0, check_processes: bool = True) -> Result:
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_all_in(self.cwd)
            self.process.kill()
            self.process.wait()
            pytest.fail(f"run in {self.cwd} did not finish within {timeout}s:\n{self._read(self._err)[-3000:]}")
        seconds = time.monotonic() - self.started
        result = Result(self.process.returncode, self._read(self._out), self._read(self._err), self.cwd, seconds)
        if check_processes:
            assert_no_process_left(self.cwd)
        return result

    @staticmethod
    def _read(handle) -> str:
        handle.seek(0)
        return handle.read().decode(errors="replace")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with the most end-to-end tests first, each file's tests in their own order. Under
    ``-n auto --dist loadfile`` a file runs on one worker and files are handed out in this
    order, so the long files start early and the short ones fill in at the end, rather than a
    long file that comes last alphabetically (tests/tune, tests/walkforward) running alone."""
    e2e: dict[Path, int] = {}
    for item in items:
        if item.get_closest_marker("e2e"):
            e2e[item.path] = e2e.get(item.path, 0) + 1
    items.sort(key=lambda item: -e2e.get(item.path, 0))  # stable: ties keep the collection order


@pytest.fixture(autouse=True)
def _no_run_outlives_its_test():
    """Kill the runs a test started and left running (an assertion that failed before a
    long ``--episodes 1000000`` run was stopped, say), so none trains on after its test."""
    before = len(Run.started_runs)
    yield
    for run in Run.started_runs[before:]:
        if run.process.poll() is None:
            run.kill()
    del Run.started_runs[before:]


def run_cli(cwd: Path, *args: str, timeout: float = 90.0, launcher: Optional[Sequence[str]] = None,
            env: Optional[dict[str, Optional[str]]] = None) -> Result:
    """Run the training CLI to the end in ``cwd``; fail the test on a timeout or a leftover process."""
    return Run(cwd, args, launcher, env).wait(timeout)


def cli_in_process(cwd: Path, *args: str) -> Result:
    """The training CLI's ``main()`` run in this process from ``cwd``: the same code path as
    the script, without its Python start-up (torch's import: seconds per run). For checks that
    end before any worker starts (bad flags, impossible configurations) and for single-process
    runs whose subject is not the process (the run dir, resume, checkpoints); signals, spawned
    workers and torchrun run in subprocesses (:func:`run_cli`). stdout and stderr are captured;
    Python warnings are shown as a fresh interpreter shows them (its default filters), on the
    captured stderr. What a run changes in this process (cwd, environment, SIGINT/SIGTERM handlers, torch's thread
    count, the global RNGs) is put back afterwards."""
    import contextlib
    import io
    import random
    import warnings

    import numpy as np

    from ppo_lstm.cli import main

    out, err = io.StringIO(), io.StringIO()
    previous, environ = os.getcwd(), dict(os.environ)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    threads = torch.get_num_threads()
    rngs = torch.get_rng_state(), np.random.get_state(), random.getstate()
    started = time.monotonic()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                warnings.catch_warnings(record=True) as caught:
            warnings.resetwarnings()  # a fresh interpreter's filters (python -W unset)
            warnings.simplefilter("default")
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.filterwarnings("ignore", category=category)
            try:
                code = main([str(a) for a in args])
            except SystemExit as stop:  # argparse's own errors
                code = int(stop.code or 0)
        for w in caught:
            err.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line))
    finally:
        os.chdir(previous)
        if dict(os.environ) != environ:  # whatever a run set in it
            os.environ.clear()
            os.environ.update(environ)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        torch.set_num_threads(threads)
        torch.set_rng_state(rngs[0])
        np.random.set_state(rngs[1])
        random.setstate(rngs[2])
    return Result(code, out.getvalue(), err.getvalue(), Path(cwd), time.monotonic() - started)


def torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *args]


def wait_for(predicate, timeout: float, what: str, run: Optional[Run] = None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if run is not None and run.process.poll() is not None:
            result = run.wait(check_processes=False)
            pytest.fail(f"run ended (code {result.returncode}) before {what}:\n{result.output[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def training_started(cwd: Path, checkpoint_dir: str = "checkpoints") -> bool:
    """True once the run wrote its first metrics row (one update done)."""
    metrics = cwd / checkpoint_dir / "metrics.csv"
    try:
        return len(metrics.read_text().splitlines()) >= 2
    except OSError:
        return False


def episode_lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith("Episode ")]


def load_state(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def assert_models_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), f"parameter {key} differs"


def copy_checkpoint(source_dir: Path, name: str, target_dir: Path) -> None:
    """Put checkpoint ``name`` (and a ``latest`` pointing at it) into ``target_dir``."""
    target_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source_dir / name, target_dir / name)
    (target_dir / "latest").write_text(name + "\n")


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    """A fresh working directory for one run (the log file lands in the cwd)."""
    path = tmp_path / "run"
    path.mkdir()
    return path


# The e2e marker's check (tests/e2e_marker.py): its hooks are registered from here, with the conftest.
from e2e_marker import (pytest_fixture_setup, pytest_runtest_call, pytest_runtest_setup,  # noqa: E402,F401
                        pytest_runtest_teardown)
