"""Each run writes its own ``<checkpoint-dir>/training.log`` beside the ``--log-file`` that every
run started in a directory appends to (``./training.log``, for ``tail -f``)."""
from __future__ import annotations

import contextlib
import io
from pathlib import Path

from ppo_lstm.cli import main
from ppo_lstm.rundir.checkpoint import CheckpointDir
from ppo_lstm.rundir.logger import RunLogger

TINY = ["--num-envs", "2", "--update-interval", "32", "--episode-length", "16", "--window", "8",
        "--hidden-size", "16", "--lstm-size", "16", "--minibatches", "2", "--holdout-episodes", "2",
        "--no-progress", "--device", "cpu", "--market", "regime", "--log-interval", "2"]


def episode_lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("Episode ")]


def test_two_runs_in_one_directory_keep_their_own_logs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["--episodes", "4", "--seed", "1", "--checkpoint-dir", "a", *TINY]) == 0
    assert main(["--episodes", "6", "--seed", "2", "--checkpoint-dir", "b", *TINY]) == 0
    shared, first, second = (episode_lines(Path(p)) for p in ("training.log", "a/training.log", "b/training.log"))
    assert [line.split(" - ")[0] for line in first] == ["Episode 2/4", "Episode 4/4"]
    assert [line.split(" - ")[0] for line in second] == ["Episode 2/6", "Episode 4/6", "Episode 6/6"]
    assert shared == first + second  # ./training.log keeps every run's lines, in order
    header = Path("b/training.log").read_text(encoding="utf-8").splitlines()[0]
    assert header.startswith("# ") and '"checkpoint_dir": "b"' in header and '"seed": 2' in header
    assert Path("b/training.log") in CheckpointDir("b").run_files()  # --overwrite moves it aside with the run


def test_resume_appends_to_the_run_log(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["--episodes", "2", "--checkpoint-dir", "a", "--checkpoint-interval", "2", *TINY]) == 0
    assert main(["--episodes", "4", "--checkpoint-dir", "a", "--resume", *TINY]) == 0
    assert [line.split(" - ")[0] for line in episode_lines(Path("a/training.log"))] == \
        ["Episode 2/2", "Episode 4/4"]


def test_a_log_file_that_is_the_run_log_gets_each_line_once(tmp_path):
    log = RunLogger(str(tmp_path / "training.log"), tmp_path / "metrics.csv", 4, 0, progress=False,
                    run_log=tmp_path / "." / "training.log")
    log.line("Episode 1/4")
    log.close()
    assert (tmp_path / "training.log").read_text(encoding="utf-8") == "Episode 1/4\n"


def test_console_lines_follow_a_redirection_of_stdout_made_after_the_logger(tmp_path):
    log = RunLogger(str(tmp_path / "training.log"), tmp_path / "metrics.csv", 4, 0, progress=False)
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        log.line("Episode 1/4")
    log.close()
    assert captured.getvalue() == "Episode 1/4\n"
    chosen = io.StringIO()
    log = RunLogger(str(tmp_path / "training.log"), tmp_path / "metrics.csv", 4, 0, progress=False, console=chosen)
    with contextlib.redirect_stdout(io.StringIO()):
        log.line("Episode 2/4")
    log.close()
    assert chosen.getvalue() == "Episode 2/4\n"


def test_a_resume_drops_the_metrics_rows_written_after_its_checkpoint(tmp_path, monkeypatch):
    """A run stopped between checkpoints (here: its last checkpoint removed, as after a kill)
    wrote metrics rows past the checkpoint it resumes from; the resume makes those updates
    again, and metrics.csv then holds each update once."""
    import csv

    monkeypatch.chdir(tmp_path)
    assert main(["--episodes", "12", "--checkpoint-dir", "a", "--checkpoint-interval", "8", *TINY]) == 0
    (Path("a") / "checkpoint_u00000006.pt").unlink()
    (Path("a") / "latest").write_text("checkpoint_u00000004.pt\n")
    with open("a/metrics.csv", newline="") as handle:
        before = list(csv.DictReader(handle))
    assert [row["update"] for row in before] == ["1", "2", "3", "4", "5", "6"]
    assert main(["--episodes", "12", "--checkpoint-dir", "a", "--resume", *TINY]) == 0
    with open("a/metrics.csv", newline="") as handle:
        after = list(csv.DictReader(handle))
    assert [row["update"] for row in after] == ["1", "2", "3", "4", "5", "6"]
    assert after[:4] == before[:4]  # the rows up to the checkpoint, as they were
    assert [row["policy_loss"] for row in after[4:]] == [row["policy_loss"] for row in before[4:]]  # made again
