"""Atomic writes create their temp file exclusively (``tempfile.mkstemp`` beside the target): a
symlink planted at a predictable temp name is never followed, a failed write leaves nothing,
and the file gets the mode a plain ``open`` would give it."""
from __future__ import annotations

import csv
import json
import os
import stat
import tempfile
from pathlib import Path

import pytest

from ppo_lstm.deploy.state import write_state_file
from ppo_lstm.rundir.checkpoint import CheckpointDir, atomic_write_bytes
from ppo_lstm.rundir.logger import METRIC_COLUMNS, upgrade_metrics_header


def plant(target: Path, victim: Path) -> Path:
    """A symlink to ``victim`` at the temp name a writer of ``target`` in this process used to
    pick (``.<name>.<pid>.tmp``)."""
    link = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    link.symlink_to(victim)
    return link


@pytest.fixture()
def victim(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    path = outside / "precious.txt"
    path.write_text("keep me\n")
    return path


def test_a_planted_symlink_is_not_followed(tmp_path: Path, victim: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    target = run / "latest"
    link = plant(target, victim)
    atomic_write_bytes(target, lambda handle: handle.write(b"checkpoint_u00000001.pt\n"))
    assert victim.read_text() == "keep me\n"
    assert target.read_bytes() == b"checkpoint_u00000001.pt\n" and not target.is_symlink()
    assert link.is_symlink()  # not ours: left alone
    assert sorted(p.name for p in run.iterdir()) == sorted([target.name, link.name])  # no temp file left


def test_the_state_file_and_metrics_upgrade_do_not_follow_symlinks(tmp_path: Path, victim: Path) -> None:
    state = tmp_path / "s.json"
    plant(state, victim)
    write_state_file(state, {"format": "x", "n": 1})
    assert json.loads(state.read_text()) == {"format": "x", "n": 1} and victim.read_text() == "keep me\n"

    metrics = tmp_path / "metrics.csv"
    metrics.write_text("update,episodes\n1,4\n")  # an older, shorter header: rewritten in place
    plant(metrics, victim)
    assert upgrade_metrics_header(metrics) == METRIC_COLUMNS
    assert victim.read_text() == "keep me\n"
    rows = list(csv.DictReader(metrics.open()))
    assert rows[0]["update"] == "1" and rows[0]["episodes"] == "4" and rows[0]["policy_loss"] == ""


def test_a_failed_write_leaves_no_temp_file_and_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "best.pt"
    target.write_bytes(b"old")

    def fail(handle):
        handle.write(b"half")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        atomic_write_bytes(target, fail)
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["best.pt"]


def test_the_mode_is_a_plain_opens_and_stale_temp_names_are_recognised(tmp_path: Path) -> None:
    atomic_write_bytes(tmp_path / "a", lambda handle: handle.write(b"x"))
    (tmp_path / "b").write_bytes(b"x")
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == stat.S_IMODE((tmp_path / "b").stat().st_mode)
    (tmp_path / "b").unlink()
    for name in ("latest", "best.pt", "checkpoint_u00000002.pt", "config.yaml", "metrics.csv"):
        fd, _ = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=tmp_path)
        os.close(fd)
    removed = CheckpointDir(tmp_path).remove_stale_temp_files()
    assert len(removed) == 5 and sorted(p.name for p in tmp_path.iterdir()) == ["a"]
