"""Rank 0's outputs: the episode line (console, ``--log-file`` and the run dir's own
``training.log``), ``metrics.csv``, the tqdm progress bar and optional TensorBoard curves.
Other ranks use :class:`NullLogger`.
"""
from __future__ import annotations

import csv
import datetime
import io
import json
import os
import sys
from pathlib import Path
from typing import Any, Optional, TextIO

from tqdm import tqdm

from ..algo.episodes import EpisodeTotals
from ..errors import UsageError
from .checkpoint import CheckpointError, atomic_write_bytes

UPDATE_COLUMNS = (
    "update", "episodes", "env_steps", "wall_time_s", "policy_loss", "value_loss", "entropy", "approx_kl",
    "clip_fraction", "explained_variance", "epochs_run", "lr_actor", "lr_critic", "skipped",
    "sps_global", "sps_per_rank", "episodes_finished", "mean_reward", "mean_return", "win_rate",
    "closed_trades", "open_lots", "mean_steps",
)
# the hold-out backtest's figures, on the rows of updates that wrote a checkpoint (ppo_lstm.train.holdout)
HOLDOUT_COLUMNS = ("holdout_return_pct", "holdout_sharpe", "holdout_max_drawdown_pct", "holdout_trades",
                   "holdout_exposure_pct", "holdout_buy_and_hold_pct")
METRIC_COLUMNS = UPDATE_COLUMNS + HOLDOUT_COLUMNS


def format_episode_line(episode: int, total: Optional[int], totals: EpisodeTotals, world_size: int = 1,
                        device_type: str = "cuda") -> str:
    """``Episode 100/1000 - Reward: 45.23, Return: $234.56, Win Rate: 65.0% (20 closed, 3 open), Steps: 234``
    (``Episode 100 - ...`` while ``total`` is not known: a ``--train-for`` run before its fit).

    Figures are means over ``totals``' episodes; trade counts are totals. With more
    than one worker, the world size is appended: `` | GPUs: N`` for GPU workers,
    `` | Workers: N`` for CPU workers (``device_type`` ``"cpu"``).
    """
    m = totals.means()
    sign = "-" if m["mean_return"] < 0 else ""
    line = (f"Episode {episode}{'' if total is None else f'/{total}'} - Reward: {m['mean_reward']:.2f}, "
            f"Return: {sign}${abs(m['mean_return']):.2f}, Win Rate: {100 * m['win_rate']:.1f}% "
            f"({int(totals.closed)} closed, {int(totals.open_lots)} open), Steps: {m['mean_steps']:.0f}")
    if world_size == 1:
        return line
    return line + (f" | Workers: {world_size}" if device_type == "cpu" else f" | GPUs: {world_size}")


class RunLogger:
    """Writes rank 0's console lines, the log files, ``metrics.csv`` and TensorBoard."""

    def __init__(self, log_file: str, metrics_file: Path, total_episodes: Optional[int], done_episodes: int,
                 progress: bool, tensorboard_dir: Optional[Path] = None, console: Optional[TextIO] = None,
                 extra_columns: tuple[str, ...] = (), run_log: Optional[Path] = None,
                 resumed_at_update: Optional[int] = None) -> None:
        """``log_file`` is ``--log-file`` (``./training.log``, which every run started in a
        directory appends to); ``run_log`` the run dir's own log, which holds this run's
        lines only (once, when it is ``log_file`` itself). ``extra_columns``: metrics.csv
        columns after :data:`METRIC_COLUMNS` (per-instrument hold-out figures); an existing file
        that lacks some is rewritten with them. ``console``: where the console lines go
        (default: whatever ``sys.stdout`` is when a line is written, so a redirection of it
        made after this logger was built is followed). ``resumed_at_update``: the update of the
        checkpoint a resume starts from; metrics.csv's rows of later updates are dropped."""
        self._console = console
        paths = [Path(log_file)]
        if run_log is not None:
            run_log.parent.mkdir(parents=True, exist_ok=True)
            if run_log.resolve() != paths[0].resolve():
                paths.append(run_log)
        # line-buffered, appended: tail -f friendly, and each line reaches a shared log whole
        self._logs = [open(path, "a", buffering=1, encoding="utf-8") for path in paths]
        metrics_file.parent.mkdir(parents=True, exist_ok=True)
        new_metrics = not metrics_file.exists() or metrics_file.stat().st_size == 0
        columns = (METRIC_COLUMNS + extra_columns if new_metrics
                   else upgrade_metrics_header(metrics_file, extra_columns, resumed_at_update))
        self._metrics = open(metrics_file, "a", newline="", encoding="utf-8")
        self._csv = csv.DictWriter(self._metrics, fieldnames=columns)
        if new_metrics:
            self._csv.writeheader()
        self._bar = tqdm(total=total_episodes, initial=done_episodes, unit="ep", dynamic_ncols=True,
                         disable=None if progress else True, file=sys.stderr)
        self._tb = _tensorboard_writer(tensorboard_dir) if tensorboard_dir is not None else None

    @property
    def console(self) -> TextIO:
        return self._console if self._console is not None else sys.stdout

    def header(self, config: dict[str, Any], world_size: int, note: str = "") -> None:
        """One line recording when and with what config the run (re)started."""
        stamp = datetime.datetime.now().isoformat(timespec="seconds")
        self._write(f"# {stamp} run started (pid {os.getpid()}, world_size {world_size}){note} "
                    f"config: {json.dumps(config, sort_keys=True)}\n")

    def _write(self, text: str) -> None:
        """Append ``text`` (whole lines) to every log file, in one write each."""
        for log in self._logs:
            log.write(text)
            log.flush()

    def line(self, text: str, to_log: bool = True) -> None:
        """Print ``text`` above the progress bar and append it to the log file."""
        console = self.console
        self._bar.write(text, file=console)
        console.flush()
        if to_log:
            self._write(text + "\n")

    def progress(self, episodes_done: int) -> None:
        self._bar.update(episodes_done - self._bar.n)

    def set_total(self, total_episodes: int) -> None:
        """The progress bar's total, once known (``--train-for``)."""
        self._bar.total = total_episodes
        self._bar.refresh()

    def metrics(self, row: dict[str, Any]) -> None:
        """Append one row per update to metrics.csv (and TensorBoard)."""
        self._csv.writerow({key: row.get(key, "") for key in self._csv.fieldnames})
        self._metrics.flush()
        if self._tb is not None:
            for key, value in row.items():
                if isinstance(value, (int, float)) and key != "update":
                    self._tb.add_scalar(key, value, row["update"])

    def close(self) -> None:
        self._bar.close()
        for log in self._logs:
            log.close()
        self._metrics.close()
        if self._tb is not None:
            self._tb.close()


def upgrade_metrics_header(path: Path, extra_columns: tuple[str, ...] = (),
                           through_update: Optional[int] = None) -> tuple[str, ...]:
    """The columns to append to an existing metrics.csv with. A file that lacks some of
    today's columns or of ``extra_columns`` (written by an older version, or before an
    instrument was added) is rewritten in place, atomically, under today's header and the
    extra columns, its rows' new cells empty; columns it has that those lack are kept at the end.
    ``through_update``: a resume's checkpoint update; rows of later updates, which a run stopped
    between checkpoints wrote and the resume makes again, are dropped the same way."""
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        old = tuple(reader.fieldnames or ())
        rows = list(reader)
    kept = [row for row in rows if through_update is None or not _after(row, through_update)]
    if set(METRIC_COLUMNS + extra_columns) <= set(old) and len(kept) == len(rows):
        return old
    wanted = METRIC_COLUMNS + tuple(extra_columns)
    columns = wanted + tuple(c for c in old if c not in wanted)
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=columns)
    writer.writeheader()
    writer.writerows({key: row.get(key) or "" for key in columns} for row in kept)
    try:
        atomic_write_bytes(path, lambda handle: handle.write(text.getvalue().encode("utf-8")))
    except CheckpointError as err:
        raise UsageError(str(err)) from None
    return columns


def _after(row: dict[str, str], update: int) -> bool:
    """Whether metrics.csv ``row`` is of an update after ``update``."""
    try:
        return int(row.get("update") or 0) > update
    except ValueError:
        return False


class NullLogger:
    """The logger of ranks other than 0: writes nothing."""

    def header(self, *_: Any, **__: Any) -> None: ...
    def line(self, *_: Any, **__: Any) -> None: ...
    def progress(self, *_: Any) -> None: ...
    def set_total(self, *_: Any) -> None: ...
    def metrics(self, *_: Any) -> None: ...
    def close(self) -> None: ...


def _tensorboard_writer(directory: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise UsageError("--tensorboard needs the tensorboard package: pip install 'ppo-lstm-trader[plot]'") from None
    return SummaryWriter(str(directory))
