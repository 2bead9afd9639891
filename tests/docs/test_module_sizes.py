"""The size limits of the code: no Python file (package, tests, benchmarks) over 400 lines, no class of
``ppo_lstm/`` or ``envs/`` over 260, and at most 8 modules at the top of ``ppo_lstm/``."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "ppo_lstm").rglob("*.py"), *(ROOT / "envs").rglob("*.py")])
EVERY_FILE = sorted([*SOURCES, *(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py"), *ROOT.glob("*.py")])


def test_no_file_is_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in EVERY_FILE
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400}
    assert len(SOURCES) > 100 and not long, long


def test_no_class_is_over_260_lines():
    big = {}
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > 260:
                big[f"{path.relative_to(ROOT)}:{node.name}"] = node.end_lineno - node.lineno + 1
    assert not big, big


def test_at_most_8_modules_at_the_top_of_the_package():
    top = sorted(p.name for p in (ROOT / "ppo_lstm").glob("*.py"))
    assert "cli.py" in top and len(top) <= 8, top
