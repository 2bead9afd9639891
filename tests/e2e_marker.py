"""The ``e2e`` marker, checked as the tests run: a pytest plugin whose hooks the conftest registers.

A test is marked ``e2e`` exactly when it starts a Python child process: the project's commands
in subprocesses (``run_cli``, ``Run``, ``subprocess``), torchrun, spawned or forked workers
(``--distributed``, ``--jobs``: multiprocessing, also when the CLI runs in this process), or a
helper script. A run of the CLI in this process (``cli_in_process``) that starts no worker is
not e2e. Non-Python programs (the tuning tests' throwaway PostgreSQL server: initdb, pg_ctl)
do not count. Children started during a test's setup and call count, those of a fixture
shared by several tests (module or session scope, set up once) count for every test that
uses it. A passing test whose mark disagrees with what it started fails, saying which.

Importing this module wraps ``subprocess.Popen.__init__`` and ``multiprocessing``'s
``BaseProcess.start`` to note the Python children started while a test runs.
"""
from __future__ import annotations

import functools
import inspect
import multiprocessing.process
import os
import re
import shlex
import shutil
import subprocess
import traceback
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]
_HELPERS = (__file__, str(Path(__file__).with_name("conftest.py")))  # frames that are never the place to name

_started: list[str] = []  # the Python children started since the running test's setup began
_recording = False
_fixture_started: dict[object, str] = {}  # FixtureDef -> the first Python child its setup started


def _is_python(program: object, env: Optional[dict], cwd: object) -> bool:
    """Whether ``program`` (a path, from ``cwd`` when relative, or a name on PATH) is a Python
    interpreter or a Python script."""
    try:
        program = os.fsdecode(program)  # type: ignore[arg-type]
        if os.sep in program:
            path: Optional[str] = os.path.join(os.fsdecode(cwd) if cwd is not None else "", program)
        else:
            path = shutil.which(program, path=(env or os.environ).get("PATH"))
        if path is None:
            return False
        if re.fullmatch(r"python[0-9.]*", os.path.basename(os.path.realpath(path))):
            return True
        with open(path, "rb") as handle:
            first = handle.readline(256)
        return first.startswith(b"#!") and b"python" in first
    except (OSError, TypeError, ValueError):
        return False


def _where() -> str:
    """The innermost line of a test module (else of a helper module under tests/) that led here."""
    tests = str(Path(__file__).parent) + os.sep
    frames = [f for f in traceback.extract_stack()[:-2] if f.filename.startswith(tests) and f.filename not in _HELPERS]
    frames = [f for f in frames if os.path.basename(f.filename).startswith("test_")] or frames
    return f"{os.path.relpath(frames[-1].filename, ROOT)}:{frames[-1].lineno}" if frames else "?"


def _note(what: str) -> None:
    if _recording:
        _started.append(f"{what} (from {_where()})")


_popen_init = subprocess.Popen.__init__
_popen_signature = inspect.signature(_popen_init)


@functools.wraps(_popen_init)
def _noting_popen_init(self: subprocess.Popen, *args: object, **kwargs: object) -> None:
    _popen_init(self, *args, **kwargs)
    if not _recording:
        return
    bound = _popen_signature.bind(self, *args, **kwargs).arguments
    command = bound["args"]
    if bound.get("executable") is not None:
        program = bound["executable"]
    elif isinstance(command, (str, bytes, os.PathLike)):
        text = os.fsdecode(command)
        program = (shlex.split(text) or [""])[0] if bound.get("shell") else text
    else:
        program = list(command)[0]
    if _is_python(program, bound.get("env"), bound.get("cwd")):  # type: ignore[arg-type]
        shown = command if isinstance(command, (str, bytes, os.PathLike)) else " ".join(map(str, command))
        _note(f"subprocess {str(shown)[:160]!r}")


_process_start = multiprocessing.process.BaseProcess.start


@functools.wraps(_process_start)
def _noting_process_start(self: multiprocessing.process.BaseProcess) -> None:
    target = getattr(self, "_target", None)  # start() drops it
    _process_start(self)
    _note(f"multiprocessing process {self.name} ({getattr(target, '__qualname__', target)})")


subprocess.Popen.__init__ = _noting_popen_init  # type: ignore[method-assign]
multiprocessing.process.BaseProcess.start = _noting_process_start  # type: ignore[method-assign]


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item):
    global _recording
    _started.clear()
    _recording = True
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    """Note the first Python child a fixture's setup starts (its dependencies are set up before)."""
    before = len(_started)
    try:
        return (yield)
    finally:
        if len(_started) > before:
            _fixture_started.setdefault(fixturedef, _started[before])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    result = yield  # a test that fails or skips is not checked
    _check_e2e_mark(item)
    return result


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: Optional[pytest.Item]):
    global _recording
    _recording = False
    return (yield)


def _check_e2e_mark(item: pytest.Item) -> None:
    started = list(_started)
    info = getattr(item, "_fixtureinfo", None)
    for name in item.fixturenames if info is not None else ():  # type: ignore[attr-defined]
        for fixturedef in info.name2fixturedefs.get(name, ()):
            if fixturedef in _fixture_started and not started:
                started.append(f"{_fixture_started[fixturedef]}, by its fixture {name!r} "
                               f"({fixturedef.scope} scope)")
    marked = item.get_closest_marker("e2e") is not None
    if started and not marked:
        pytest.fail(f"{item.nodeid} started {len(started)} Python child process(es) but is not marked e2e "
                    f"(setup.cfg: the e2e marker); the first: {started[0]}. Mark it @pytest.mark.e2e, or run "
                    "the CLI in this process (cli_in_process) if no subprocess or worker is needed.", pytrace=False)
    if marked and not started:
        pytest.fail(f"{item.nodeid} is marked e2e but started no Python child process (no subprocess, no "
                    "worker; not through its fixtures either): remove its e2e mark.", pytrace=False)
