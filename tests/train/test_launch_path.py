"""One launch's path from argv: the run dir is opened once, and the settings are resolved and
checked once, on a fresh run and on a resume (one process; spawned workers start from what
the command line checked, see ``train/worker.RunStart``)."""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from conftest import TINY, cli_in_process

import ppo_lstm.config.checks as checks
import ppo_lstm.config.resolve as resolve
import ppo_lstm.train.run_dir as run_dir


def _entries(cwd: Path, *args: str) -> Counter:
    """Run the CLI in this process and count: calls into run_dir.py from outside it, and calls
    of ``resolve`` and ``validate``."""
    run_dir_file, counted = run_dir.__file__, {(resolve.__file__, "resolve"), (checks.__file__, "validate")}
    seen: Counter = Counter()

    def profile(frame, event, _arg):
        if event != "call":
            return
        code = frame.f_code
        if code.co_filename == run_dir_file and frame.f_back.f_code.co_filename != run_dir_file:
            seen["run_dir"] += 1
        elif (code.co_filename, code.co_name) in counted:
            seen[code.co_name] += 1

    sys.setprofile(profile)
    try:
        result = cli_in_process(cwd, *args)
    finally:
        sys.setprofile(None)
    assert result.returncode == 0, result.output
    return seen


def test_a_fresh_run_and_its_resume_open_the_run_dir_once_and_resolve_once(tmp_path):
    assert _entries(tmp_path, *TINY, "--episodes", "4") == {"run_dir": 1, "resolve": 1, "validate": 1}
    assert _entries(tmp_path, *TINY, "--episodes", "6", "--resume") == {"run_dir": 1, "resolve": 1, "validate": 1}
