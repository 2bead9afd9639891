"""The ``test`` extra of setup.cfg installs every optional package a test imports with
``pytest.importorskip``, so CI (which installs ``.[test]``) skips only the CUDA tests."""
from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP_IMPORT = re.compile(r"""importorskip\(\s*["']([A-Za-z0-9_]+)""")


def extra(name: str) -> set[str]:
    """The distribution names of one extra of setup.cfg (``matplotlib>=3.7`` -> ``matplotlib``)."""
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    lines = parser["options.extras_require"][name].split("\n")
    return {re.split(r"[<>=!;\[ ]", line.strip(), maxsplit=1)[0].lower() for line in lines if line.strip()}


def test_the_test_extra_installs_every_package_a_test_skips_without():
    imported = {match.group(1).lower() for path in (ROOT / "tests").rglob("*.py")
                for match in SKIP_IMPORT.finditer(path.read_text(encoding="utf-8"))}
    assert {"matplotlib", "tensorboard", "onnx"} <= imported  # the scan finds them
    missing = imported - extra("test")
    assert not missing, f"add {sorted(missing)} to the test extra in setup.cfg, or CI skips their tests"
