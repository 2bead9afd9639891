"""The module maps stay true to the tree: docs/architecture.md's package tree names every
module of ``ppo_lstm/`` and ``envs/`` and nothing else, every file path it or the README's
code map names exists, and every import of this project the docs show runs."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NAME = re.compile(r"[\w.-]+/?")
PY_NAME = re.compile(r"\w+\.py")
PATH_IN_CODE = re.compile(r"`([\w./-]+(?:\.py|/))`")
EXTERNAL = {"ppo_atari_lstm.py"}  # CleanRL's file, which the page compares this code with


def _fenced(text: str, after: str) -> str:
    """The first unlabelled fenced block after the line ``after``."""
    rest = text[text.index(after):]
    return re.search(r"^```\n(.*?)^```", rest, re.S | re.M).group(1)


def _tree_paths(block: str) -> list[Path]:
    """The files and folders a code-map block names, as paths under the repository root.

    A line at indent 0 names top-level files or a folder (which the next lines are under);
    at indent 2, files or a folder of it, and a folder's files may follow in the second
    column; deeper lines continue the last folder's file list (or its description)."""
    paths: list[Path] = []
    top = ROOT
    folder: Path | None = None
    for line in block.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        columns = re.split(r"\s{2,}", line.strip())
        names = [n.strip() for n in columns[0].split(",") if n.strip()]
        if indent == 0:
            paths += [ROOT / n for n in names]
            top = ROOT / names[0] if names[0].endswith("/") else ROOT
            folder = None
        elif indent == 2:
            paths += [top / n for n in names]
            folder = top / names[0] if names[0].endswith("/") else None
            listed = [n.strip() for n in columns[1].split(",") if n.strip()] if folder and len(columns) > 1 else []
            if listed and all(PY_NAME.fullmatch(n) for n in listed):
                paths += [folder / n for n in listed]
        elif folder is not None and all(PY_NAME.fullmatch(n) for n in names):
            paths += [folder / n for n in names]
    assert all(NAME.fullmatch(p.name + ("/" if str(p).endswith("/") else "")) for p in paths), paths
    return paths


def _architecture_tree() -> list[Path]:
    return _tree_paths(_fenced(ARCHITECTURE.read_text(), "## The package"))


def test_the_tree_parser_reads_folders_files_and_continuations():
    block = "pkg/\n  a.py        text, b.py\n  sub/        c.py, d.py\n              e.py\n" \
            "  other/      a description, not files\n                more description\ntop.py, run.py   text\n"
    assert _tree_paths(block) == [ROOT / "pkg/", ROOT / "pkg" / "a.py", ROOT / "pkg" / "sub/",
                                  ROOT / "pkg" / "sub" / "c.py", ROOT / "pkg" / "sub" / "d.py",
                                  ROOT / "pkg" / "sub" / "e.py", ROOT / "pkg" / "other/",
                                  ROOT / "top.py", ROOT / "run.py"]


def test_the_architecture_tree_names_existing_files_only():
    missing = [str(p.relative_to(ROOT)) for p in _architecture_tree() if not p.exists()]
    assert not missing, f"docs/architecture.md's package tree names files that do not exist: {missing}"


def test_the_architecture_tree_names_every_module():
    named = {p.resolve() for p in _architecture_tree()}
    modules = [p for package in ("ppo_lstm", "envs") for p in sorted((ROOT / package).rglob("*.py"))
               if not (p.name == "__init__.py" and p.parent.parent != ROOT)]
    unnamed = [str(p.relative_to(ROOT)) for p in modules if p.resolve() not in named]
    assert not unnamed, f"docs/architecture.md's package tree leaves out: {unnamed}"


def test_the_readme_code_map_names_existing_paths():
    paths = _tree_paths(_fenced((ROOT / "README.md").read_text(), "## Code map"))
    assert ROOT / "envs" / "markets/" in paths
    missing = [str(p.relative_to(ROOT)) for p in paths if not p.exists()]
    assert not missing, f"README.md's code map names paths that do not exist: {missing}"


def test_every_module_path_the_architecture_page_names_exists():
    """A path in backticks is from the repository root, from ``ppo_lstm/``, or from the folder
    its section's heading names (``## `ppo_lstm/distributed/`: ranks``)."""
    named, missing = set(), []
    for section in re.split(r"^(?=## )", ARCHITECTURE.read_text(), flags=re.M):
        heading = section.split("\n", 1)[0] if section.startswith("## ") else ""
        folders = [ROOT, ROOT / "ppo_lstm", *(ROOT / f for f in PATH_IN_CODE.findall(heading))]
        for name in set(PATH_IN_CODE.findall(section)) - EXTERNAL:
            named.add(name)
            if not any((folder / name).exists() for folder in folders):
                missing.append(name)
    assert {"envs/data/loading.py", "algo/agent.py", "envs/markets/", "comm.py"} <= named
    assert not missing, f"docs/architecture.md names paths that do not exist: {sorted(missing)}"


def _shown_imports() -> list[str]:
    """The import lines of the docs' Python blocks that import this project (``envs``, ``ppo_lstm``)."""
    imports = []
    for page in PAGES:
        for block in re.findall(r"^```(?:python|py)\n(.*?)^```", page.read_text(), re.S | re.M):
            lines = [line.split("#")[0].strip() for line in block.splitlines()]
            imports += [line for line in lines
                        if re.match(r"(from \S+ )?import ", line) and re.search(r"\b(envs|ppo_lstm)\b", line)]
    return sorted(set(imports))


def test_the_docs_show_imports():
    assert "from envs.data import load_ohlcv" in _shown_imports()


@pytest.mark.parametrize("statement", _shown_imports())
def test_every_import_the_docs_show_runs(statement):
    exec(statement, {})
