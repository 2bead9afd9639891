"""``--resume`` when the training data changed since the checkpoint: a file that grew, a directory
that gained an instrument. Refused with one line; with ``--allow-data-change``, best.pt is chosen
afresh on the new hold-out and metrics.csv gains the new instrument's columns, keeping its rows.
A checkpoint without a fingerprint (an older version's) resumes with one line. Runs the
command line in this process (single worker, tiny model)."""
from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd
import pytest
import torch

from conftest import TINY
from ppo_lstm.cli import main
from ppo_lstm.rundir.logger import METRIC_COLUMNS

from test_holdout import write_walk

RUN = [*TINY, "--checkpoint-interval", "8", "--log-file", "train.log", "--checkpoint-dir", "ck"]


def train(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, list[str]]:
    """``main(RUN + args)`` in the current directory: the exit code, the lines it added to
    train.log (the console's, as logged) and the stderr lines."""
    log = Path("train.log")
    before = log.stat().st_size if log.exists() else 0
    code = main([*RUN, *args])
    _, err = capsys.readouterr()
    out = log.read_bytes()[before:].decode() if log.exists() else ""
    return code, out, [line for line in err.splitlines() if line.strip()]


def grow(path: Path, bars: int, seed: int) -> None:
    """Append ``bars`` daily bars to the CSV ``path`` (a walk on from its last close)."""
    frame = pd.read_csv(path)
    more = path.with_name("more.csv")
    write_walk(more, bars, seed)
    extra = pd.read_csv(more)
    more.unlink()
    extra["date"] = pd.date_range(pd.Timestamp(frame["date"].iloc[-1]) + pd.Timedelta(days=1), periods=bars,
                                  freq="D").strftime("%Y-%m-%d")
    scale = frame["close"].iloc[-1] / 100.0
    for column in ("open", "high", "low", "close"):
        extra[column] *= scale
    pd.concat([frame, extra]).to_csv(path, index=False)


def checkpoint(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def test_a_grown_file_is_refused_then_rebaselined_with_the_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture) -> None:
    monkeypatch.chdir(tmp_path)
    write_walk(tmp_path / "p.csv", 120, seed=1)
    assert train(capsys, "--data", "p.csv", "--episodes", "8")[0] == 0
    saved = checkpoint(tmp_path / "ck" / "best.pt")
    assert [e["name"] for e in saved["data"]] == ["p.csv"] and saved["data"][0]["bars"] == 120
    assert saved["data"][0]["train_last"] == "2020-04-05T00:00:00"  # bar 95: the last 24 of 120 held out

    grow(tmp_path / "p.csv", 30, seed=2)
    before = (tmp_path / "ck" / "metrics.csv").read_text()
    code, out, err = train(capsys, "--resume", "--episodes", "16")
    assert code == 2 and len(err) == 1, (out, err)
    assert err[0].startswith("error: --resume: the training data changed since ck/checkpoint_u00000004.pt was "
                             "written (p.csv: 120 -> 150 bars, last bar 2020-04-29 -> 2020-05-29); "), err
    assert "pass --allow-data-change to go on" in err[0]
    assert (tmp_path / "ck" / "metrics.csv").read_text() == before  # nothing written

    code, out, err = train(capsys, "--resume", "--episodes", "16", "--allow-data-change")
    assert code == 0, (out, err)
    assert ("warning: --allow-data-change: the training data changed since ck/checkpoint_u00000004.pt was written "
            "(p.csv: 120 -> 150 bars, last bar 2020-04-29 -> 2020-05-29); best.pt is chosen afresh") in out
    best = checkpoint(tmp_path / "ck" / "best.pt")
    assert best["counters"]["global_episodes"] > 8  # scored on the new hold-out, not kept for its old score
    assert best["data"][0]["bars"] == 150 and best["data"][0]["sha256"] != saved["data"][0]["sha256"]
    assert "Reproduce it: evaluate-ppo-lstm --checkpoint ck/best.pt --data p.csv --start 2020-04-30T00:00:00" in out
    # the same data again: no line about it
    code, out, err = train(capsys, "--resume", "--episodes", "24")
    assert code == 0 and "training data" not in out, (out, err)


def test_a_directory_that_gained_an_instrument(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    for name, seed in (("a.csv", 1), ("b.csv", 2)):
        write_walk(tmp_path / "d" / name, 120, seed=seed)
    assert train(capsys, "--data", "d", "--episodes", "8")[0] == 0
    rows = list(csv.DictReader(open(tmp_path / "ck" / "metrics.csv", newline="")))
    write_walk(tmp_path / "d" / "c.csv", 120, seed=3)

    code, out, err = train(capsys, "--resume", "--episodes", "16")
    assert code == 2 and len(err) == 1 and "(instrument c.csv added)" in err[0], (out, err)

    code, out, err = train(capsys, "--resume", "--episodes", "16", "--allow-data-change")
    assert code == 0 and "(instrument c.csv added); best.pt is chosen afresh" in out, (out, err)
    with open(tmp_path / "ck" / "metrics.csv", newline="") as handle:
        reader = csv.DictReader(handle)
        header, after = tuple(reader.fieldnames or ()), list(reader)
    assert header[:len(METRIC_COLUMNS)] == METRIC_COLUMNS
    assert "c.csv:holdout_return_pct" in header and "a.csv:holdout_return_pct" in header
    assert [{k: r[k] for k in rows[0]} for r in after[:len(rows)]] == rows  # the old rows, kept
    assert all(r["c.csv:holdout_return_pct"] == "" for r in after[:len(rows)])
    assert after[-1]["c.csv:holdout_return_pct"] != ""
    assert [e["name"] for e in checkpoint(tmp_path / "ck" / "best.pt")["data"]] == ["a.csv", "b.csv", "c.csv"]


def test_a_checkpoint_without_a_fingerprint_resumes_and_records_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture) -> None:
    monkeypatch.chdir(tmp_path)
    write_walk(tmp_path / "p.csv", 120, seed=1)
    assert train(capsys, "--data", "p.csv", "--episodes", "8")[0] == 0
    path = tmp_path / "ck" / "checkpoint_u00000004.pt"
    old = checkpoint(path)
    del old["data"]  # as an older version wrote it
    torch.save(old, path)
    grow(tmp_path / "p.csv", 5, seed=2)  # undetectable without a fingerprint
    code, out, err = train(capsys, "--resume", "--episodes", "16")
    assert code == 0, (out, err)
    assert ("note: ck/checkpoint_u00000004.pt records no fingerprint of its training data (written by an older "
            "version)") in out
    assert checkpoint(tmp_path / "ck" / "checkpoint_u00000008.pt")["data"][0]["bars"] == 125
