"""The docs stay true to the code: the flags page is the parsers' own text, and every
relative link in README.md and docs/*.md (files and #anchors) resolves."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def _make_flags():
    spec = importlib.util.spec_from_file_location("make_flags", ROOT / "docs" / "make_flags.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _prose(text: str) -> str:
    """``text`` without fenced code blocks, indented code blocks and inline code."""
    text = FENCE.sub("", text)
    text = "\n".join(line for line in text.split("\n") if not line.startswith("    "))
    return INLINE_CODE.sub("", text)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading's text."""
    text = INLINE_CODE.sub(lambda m: m.group(0)[1:-1], heading.strip()).lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M):
        slug = _slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def test_flags_page_is_the_parsers_text():
    make_flags = _make_flags()
    page = (ROOT / "docs" / "flags.md").read_text()
    assert page == make_flags.render(), "docs/flags.md is stale: run python docs/make_flags.py"


def test_flags_page_lists_every_flag_of_every_parser():
    make_flags = _make_flags()
    page = (ROOT / "docs" / "flags.md").read_text()
    for _, _, _, modules in make_flags.COMMANDS:
        parser = make_flags._parser_of(*modules)()
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in page or f", {option}" in page, option


def test_slugs_follow_github():
    assert _slug("`evaluate-ppo-lstm` on several instruments") == "evaluate-ppo-lstm-on-several-instruments"
    assert _slug("Checkpoints and resume") == "checkpoints-and-resume"
    assert _slug("The hold-out: one cut in time") == "the-hold-out-one-cut-in-time"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target} (no {resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved})")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target} (no heading #{anchor})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


def test_link_checker_sees_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [bad](missing.md) [bad anchor](#nope)\n\n```\n[code](skip.md)\n```\n")
    targets = LINK.findall(_prose(page.read_text()))
    assert targets == ["#title", "missing.md", "#nope"]
    assert "title" in _anchors(page) and "nope" not in _anchors(page)


def test_batch_table_is_the_rules_output():
    spec = importlib.util.spec_from_file_location("make_batch_table", ROOT / "docs" / "make_batch_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = (ROOT / "docs" / "batch_scaling.md").read_text()
    assert module._current(page) == module.render(), "docs/batch_scaling.md's table is stale: run python docs/make_batch_table.py"
    assert "| 4,096 | 8 | 16 | 524,288 | 4 minibatches of 131072 |" in page
