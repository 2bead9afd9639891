"""python -m ppo_lstm.plot_training: the real CLI in a subprocess on small synthetic metrics.csv files."""
from __future__ import annotations

import csv
import math
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest
from conftest import env_for_child

from ppo_lstm.rundir.logger import METRIC_COLUMNS
from ppo_lstm.evaluation.plot_training import REQUIRED, smoothing_window

# The trainer's metrics.csv header today (the hold-out columns come from another change).
COLUMNS = ["update", "episodes", "env_steps", "wall_time_s", "policy_loss", "value_loss", "entropy", "approx_kl",
           "clip_fraction", "explained_variance", "epochs_run", "lr_actor", "lr_critic", "skipped", "sps_global",
           "sps_per_rank", "episodes_finished", "mean_reward", "mean_return", "win_rate", "closed_trades",
           "open_lots", "mean_steps"]
HOLDOUT_COLUMNS = ["holdout_return_pct", "holdout_buy_and_hold_pct"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
EXTRA_HINT = "pip install 'ppo-lstm-trader[plot]'"


def metric_rows(updates: int, holdout_every: int = 0) -> list[dict[str, object]]:
    """Rows like the trainer's: every 3rd update finishes no episode (empty episode cells)."""
    rows = []
    for u in range(1, updates + 1):
        finished = 0 if u % 3 == 0 else 2
        row: dict[str, object] = {
            "update": u, "episodes": 2 * (u - u // 3), "env_steps": 32 * u, "wall_time_s": 0.1 * u,
            "policy_loss": -0.001 * math.sin(u), "value_loss": 1.0 / u, "entropy": 1.0986 - 0.001 * u,
            "approx_kl": 1e-4 * (1 + math.sin(u)), "clip_fraction": 0.0, "explained_variance": 0.01 * u,
            "epochs_run": 4, "lr_actor": 3e-4, "lr_critic": 1e-3, "skipped": 0, "sps_global": 200.0 + u % 7,
            "sps_per_rank": "100.0;100.0", "episodes_finished": finished,
        }
        if finished:
            row.update(mean_reward=math.sin(u / 3), mean_return=100 * math.sin(u / 3),
                       win_rate=0.5 + 0.4 * math.cos(u), closed_trades=10, open_lots=1, mean_steps=16)
        if holdout_every and u % holdout_every == 0:
            row.update(holdout_return_pct=2.0 * math.sin(u), holdout_buy_and_hold_pct=1.5)
        rows.append(row)
    return rows


def write_metrics(directory: Path, rows: list[dict[str, object]], columns: Optional[list[str]] = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "metrics.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns or COLUMNS)
        writer.writeheader()
        writer.writerows([{key: row.get(key, "") for key in columns or COLUMNS} for row in rows])
    return path


def plot_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return run_python(cwd, "-m", "ppo_lstm.plot_training", *args)


def plot_in_process(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The command's ``main()`` in this process, from ``cwd``, without a Python start-up of its
    own; the real command runs in the tests that call :func:`plot_cli`."""
    import contextlib
    import io
    import os

    from ppo_lstm.evaluation.plot_training import main

    out, err, previous = io.StringIO(), io.StringIO(), os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        os.chdir(previous)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def run_python(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env_for_child(),
                          capture_output=True, text=True, timeout=120)


def assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0]


def assert_small_png(path: Path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) < 200_000
    image = pytest.importorskip("matplotlib.image").imread(path)
    assert image.shape[:2] == (1000, 1100)


def test_trainer_writes_the_required_columns():
    assert set(REQUIRED) <= set(METRIC_COLUMNS)
    assert list(METRIC_COLUMNS)[:len(COLUMNS)] == COLUMNS


def test_smoothing_window():
    assert smoothing_window(49) == 1  # short runs: raw points only
    assert smoothing_window(50) == 5
    assert smoothing_window(10_000) == 50


def test_plot_without_holdout_columns(tmp_path):
    pytest.importorskip("matplotlib")
    write_metrics(tmp_path / "ck", metric_rows(90))
    out = tmp_path / "curves.png"
    result = plot_in_process(tmp_path, "--checkpoint-dir", "ck", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(out)
    assert_small_png(out)


@pytest.mark.e2e
def test_plot_with_holdout_columns_and_default_out(tmp_path):
    pytest.importorskip("matplotlib")
    write_metrics(tmp_path / "ck", metric_rows(40, holdout_every=5), COLUMNS + HOLDOUT_COLUMNS)
    result = plot_cli(tmp_path, "--checkpoint-dir", "ck")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(Path("ck") / "training_curves.png")
    assert_small_png(tmp_path / "ck" / "training_curves.png")


def test_holdout_panel(tmp_path):
    plt = pytest.importorskip("matplotlib.pyplot")
    import pandas as pd

    from ppo_lstm.evaluation.plot_training import draw_holdout

    frame = pd.DataFrame(metric_rows(10, holdout_every=5))
    fig, (with_holdout, without, empty) = plt.subplots(1, 3)
    draw_holdout(with_holdout, frame)
    draw_holdout(without, frame.drop(columns=HOLDOUT_COLUMNS))
    draw_holdout(empty, frame.assign(holdout_return_pct=float("nan")))
    agent, buy_and_hold = with_holdout.get_lines()[:2]
    assert list(agent.get_xdata()) == [8, 14] and list(agent.get_ydata()) == pytest.approx(
        [2 * math.sin(5), 2 * math.sin(10)])
    assert buy_and_hold.get_linestyle() == "--" and list(buy_and_hold.get_ydata()) == [1.5, 1.5]
    for ax in (without, empty):
        assert [text.get_text() for text in ax.texts] == ["no hold-out evaluations"]
        assert not ax.get_lines()
    plt.close(fig)


def test_empty_panels_still_plot(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [row for row in metric_rows(6) if row["episodes_finished"] == 0]  # no episode stats at all
    write_metrics(tmp_path / "ck", rows, COLUMNS + HOLDOUT_COLUMNS)  # hold-out columns present, all empty
    result = plot_in_process(tmp_path, "--checkpoint-dir", "ck", "--out", "c.png")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "c.png").read_bytes().startswith(PNG_SIGNATURE)


def _no_dir(path: Path) -> None:
    pass


def _no_csv(path: Path) -> None:
    path.mkdir()


def _empty_csv(path: Path) -> None:
    path.mkdir()
    (path / "metrics.csv").write_bytes(b"")


def _header_only(path: Path) -> None:
    write_metrics(path, [])


def _binary_csv(path: Path) -> None:
    path.mkdir()
    (path / "metrics.csv").write_bytes(b"\xff\xfe\x00\x01" * 64)


def _ragged_csv(path: Path) -> None:
    write_metrics(path, metric_rows(3))
    with open(path / "metrics.csv", "a") as handle:
        handle.write(",".join(["1"] * (len(COLUMNS) + 5)) + "\n")


def _missing_columns(path: Path) -> None:
    write_metrics(path, metric_rows(3), [c for c in COLUMNS if c not in ("entropy", "sps_global")])


def _not_numeric(path: Path) -> None:
    rows = metric_rows(3)
    rows[1]["approx_kl"] = "oops"
    write_metrics(path, rows)


@pytest.mark.parametrize("make, needles", [
    (_no_dir, ["does not exist"]),
    (_no_csv, ["no metrics.csv"]),
    (_empty_csv, ["empty"]),
    (_header_only, ["no rows"]),
    (_binary_csv, ["cannot read"]),
    (_ragged_csv, ["cannot read"]),
    (_missing_columns, ["entropy, sps_global"]),
    (_not_numeric, ["not numeric"]),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, make, needles):
    make(tmp_path / "ck")
    result = plot_in_process(tmp_path, "--checkpoint-dir", "ck", "--out", "c.png")
    assert_one_line_error(result, *needles)
    assert not (tmp_path / "c.png").exists()


@pytest.mark.e2e
def test_unwritable_out_is_one_line_and_exit_2(tmp_path):
    write_metrics(tmp_path / "ck", metric_rows(6))
    result = plot_cli(tmp_path, "--checkpoint-dir", "ck", "--out", str(tmp_path / "no" / "such" / "dir.png"))
    assert_one_line_error(result, "cannot write")


@pytest.mark.e2e
def test_without_matplotlib_names_the_extra(tmp_path):
    write_metrics(tmp_path / "ck", metric_rows(6))
    code = ("import sys; sys.modules['matplotlib'] = None; from ppo_lstm.plot_training import main; "
            "sys.exit(main(['--checkpoint-dir', 'ck', '--out', 'c.png']))")
    result = run_python(tmp_path, "-c", code)
    assert_one_line_error(result, EXTRA_HINT)
    assert not (tmp_path / "c.png").exists()


@pytest.mark.parametrize("argv, message", [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--checkpoint-dir", "ck", "--bogus"], "unrecognized arguments: --bogus"),
    (["--out"], "argument --out: expected one argument"),
    ([], "the following arguments are required: --checkpoint-dir"),
])
def test_a_bad_flag_is_the_one_line_error_of_every_command(capsys, argv, message):
    """The flag that is wrong is named first, in the form evaluate and predict use (with the --help hint)."""
    from ppo_lstm.evaluation.cli import main as evaluate
    from ppo_lstm.evaluation.plot_training import main

    for command in (main, evaluate):
        with pytest.raises(SystemExit) as exited:
            command(argv if command is main else ["--bogus"])
        assert exited.value.code == 2
    plot_error, evaluate_error = capsys.readouterr().err.splitlines()
    assert plot_error == f"python -m ppo_lstm.plot_training: error: {message} (see --help)"
    if "--bogus" in argv:
        assert plot_error == evaluate_error.replace("ppo_lstm.evaluate", "ppo_lstm.plot_training")
