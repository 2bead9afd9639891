"""docs/configuration.md runs top to bottom: its files are written under the names their first
comment line gives, and its shell commands run in order, in one empty directory, as the page
says they do. Each command runs in this process (``main(argv)`` of the command; ``> FILE``
writes its stdout there), not in a subprocess. A command followed by a ``# error: TEXT ...``
line must fail with exit code 2 and that line. Commands that start several workers
(``torchrun``, ``train_ppo_lstm_distributed.py``) are left out: ``tests/distributed/`` runs
several workers. The page's sample outputs are checked against what the commands print."""
from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path
from typing import Callable, Optional

from ppo_lstm.cli import main as train_main
from ppo_lstm.evaluation.cli import main as evaluate_main

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
FILE_NAME = re.compile(r"^# ([\w.-]+\.(?:yaml|yml|toml))\b")
PROGRAMS: dict[tuple[str, ...], Callable[[list[str]], int]] = {
    ("python", "train_ppo_lstm.py"): train_main,
    ("evaluate-ppo-lstm",): evaluate_main,
}
SEVERAL_WORKERS = ("torchrun", "train_ppo_lstm_distributed.py")


def blocks() -> list[tuple[str, str]]:
    """The page's fenced blocks in order: (language, text)."""
    return [(match.group(1), match.group(2)) for match in FENCE.finditer(PAGE.read_text(encoding="utf-8"))]


def run(line: str) -> tuple[int, str, str]:
    """One command line of the page: exit code, stdout, stderr."""
    words = shlex.split(line, comments=True)
    target: Optional[str] = None
    if ">" in words:
        words, target = words[:words.index(">")], words[words.index(">") + 1]
    for prefix, main in PROGRAMS.items():
        if tuple(words[:len(prefix)]) == prefix:
            break
    else:
        raise AssertionError(f"the page runs a command this test does not know: {line}")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(words[len(prefix):])
    if target is not None:
        Path(target).write_text(out.getvalue(), encoding="utf-8")
    return code, out.getvalue(), err.getvalue()


def test_the_configuration_page_runs_top_to_bottom(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outputs: dict[str, str] = {}
    ran = 0
    for language, text in blocks():
        name = FILE_NAME.match(text)
        if language in ("yaml", "toml") and name:
            assert not Path(name.group(1)).exists(), f"the page writes {name.group(1)} twice"
            Path(name.group(1)).write_text(text, encoding="utf-8")
            continue
        if language != "bash":
            continue
        lines = [line for line in text.splitlines() if line.strip()]
        for k, line in enumerate(lines):
            if line.startswith("#") or any(word in line for word in SEVERAL_WORKERS):
                continue
            expected = lines[k + 1] if k + 1 < len(lines) and lines[k + 1].startswith("# error:") else None
            code, out, err = run(line)
            ran += 1
            if expected is None:
                assert code == 0, f"{line}\n{err}"
            else:
                assert code == 2, f"{line} should fail"
                assert err.startswith(expected[2:].split("...")[0].rstrip()), f"{line}\n{err}"
            outputs[line.split("#")[0].strip()] = out + err
    assert ran >= 10
    assert Path("runs/regime/best.pt").is_file() and Path("runs/regime-seed2/best.pt").is_file()
    # the samples the page shows, from the commands it names
    page = PAGE.read_text(encoding="utf-8")
    note = re.search(r"^Config file regime\.yaml: .*$", page, re.M).group(0)
    named = re.search(r"\(from `(python train_ppo_lstm\.py --config regime\.yaml [^`]*)`", page).group(1)
    assert named in outputs  # a command the page ran; its start-up lines are in its run's own log
    run_dir = shlex.split(named)[shlex.split(named).index("--checkpoint-dir") + 1]
    assert note in Path(run_dir, "training.log").read_text(encoding="utf-8").splitlines()
    assert Path("from-toml.yaml").read_text(encoding="utf-8") == run(
        "python train_ppo_lstm.py --config regime.yaml --print-config")[1]
    sample = next(text for language, text in blocks() if text.startswith("# Resolved settings"))
    assert run("python train_ppo_lstm.py --config regime.yaml --print-config")[1].startswith(sample)
    assert "Settings changed on resume: --episodes 16 -> 24" in Path("runs/regime/training.log").read_text(
        encoding="utf-8").splitlines()
