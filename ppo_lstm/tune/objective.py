"""One trial: its settings sampled from the space, then one ordinary training run per seed,
each in a process of its own, whose hold-out backtests are followed in ``metrics.csv``.

A trial of ``--seeds 1`` trains in ``<out>/trial-NNNN/``; with more seeds, in
``<out>/trial-NNNN/seed-S/``, one run dir per seed. Each is what ``train-ppo-lstm
--checkpoint-dir DIR`` writes (``config.yaml``, checkpoints, ``best.pt``, ``metrics.csv``,
``training.log``), so every other command works on it.

A seed is scored by its ``best.pt``, the checkpoint whose hold-out return was the best of its
run's hold-out backtests (the trainer's choice, and what the walk-forward trades): the score is
that checkpoint's hold-out figure (``--metric``: return in %, or the annualised Sharpe ratio; a
hold-out without a Sharpe ratio, as when the policy stayed flat, counts 0). Picked among the
backtests on the very bars it is scored on, the score is a selection, and the report says so.
At every hold-out backtest the trial reports the mean of its finished seeds' scores and the
running seed's so far, at step ``seed index x --episodes + episode`` (with ``--train-for``, whose
runs train their own episode counts, ``seed index x 10,000 + the ten-thousandths of the time
passed``, so trials are compared at equal wall time); from its second backtest
on (:data:`WARMUP_HOLDOUTS`: one noisy first backtest prunes nothing) the pruner may stop it:
the training process gets SIGTERM, checkpoints and exits, and the trial ends PRUNED. A seed
whose run ends backtests its ``best.pt`` again in its own process, for the hold-out's per-bar
alpha Sharpe ratio (:mod:`ppo_lstm.tune.holdout_alpha`). Settings that are invalid together
fail the trial before any training, and a training run that fails (non-finite updates, exit
code not 0) fails it with the run's last error line; the study goes on.

The trial beats every ``--heartbeat`` seconds while its training runs, and while a stopped run
checkpoints. Should another process have ended the trial meanwhile (it judged the trial's
heartbeat stale), the next beat or report raises Optuna's UpdateFinishedTrialError, and the
training run is stopped before it propagates.
"""
from __future__ import annotations

import csv
import ctypes
import dataclasses
import math
import multiprocessing
import os
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import optuna

from ..config.resolve import resolve_config
from ..config.command_line import config_yaml
from ..config.schema import TrainConfig
from ..errors import UsageError, one_line
from ..config.values import limit_seconds
from .holdout_alpha import HoldoutMeasure, read_measure, write_measure
from .queue import beat
from .space import Space, apply

TIME_STEPS = 10_000  # --train-for: a seed's report steps, the ten-thousandths of its time


def report_step(config: TrainConfig, index: int, row: dict[str, str]) -> int:
    """The pruner's step of seed ``index``'s hold-out ``row`` of ``metrics.csv``: its episode, after
    every earlier seed's ``--episodes``; with ``--train-for`` (runs of their own episode counts),
    its share of the time, in :data:`TIME_STEPS`, after every earlier seed's."""
    if config.train_for is None:
        return index * config.episodes + int(float(row["episodes"]))
    seconds = limit_seconds(config.train_for, "--train-for") or 1.0
    return index * TIME_STEPS + min(TIME_STEPS - 1, int(TIME_STEPS * float(row["wall_time_s"]) / seconds))


WARMUP_HOLDOUTS = 1  # a trial's first hold-out backtests that the pruner never judges
POLL_S = 0.25
STOP_WAIT_S = 60.0
PR_SET_PDEATHSIG = 1


class TrialFailed(Exception):
    """The trial cannot give a score; ``str`` is the reason, recorded with the trial."""


class Interrupted(BaseException):
    """SIGINT or SIGTERM reached the tuning process."""


@dataclass
class SeedRun:
    """What one seed's training run gave so far: the hold-out figures of its best checkpoint
    (best hold-out return; ``best`` is its score, ``sharpe`` its annualised Sharpe ratio,
    ``buy_and_hold`` buy-and-hold's return in %), the hold-out backtests and rows of
    ``metrics.csv`` read, and, once the run has ended, its :class:`HoldoutMeasure`."""

    best: float = -math.inf
    best_return: float = -math.inf
    sharpe: float = 0.0
    buy_and_hold: Optional[float] = None
    backtests: int = 0
    rows_read: int = 0
    measure: Optional[HoldoutMeasure] = None


def trial_dirs(out: str, number: int, seeds: int) -> list[Path]:
    base = Path(out) / f"trial-{number:04d}"
    return [base] if seeds == 1 else [base / f"seed-{i + 1}" for i in range(seeds)]


def _float(text: Optional[str]) -> Optional[float]:
    try:
        value = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def _train_child(argv: list[str], stderr_path: str, run_dir: Path) -> None:
    """A training run in a forked process: it dies with its parent, writes stderr to a file,
    and measures its ``best.pt`` when the run ends well (:func:`write_measure`)."""
    try:
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: a killed tuner leaves its run to finish
        pass
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)  # until the trainer installs its graceful stop
    err = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(err, 2)
    os.dup2(null, 1)
    code = 1
    try:
        from ..cli import main
        code = main(argv)
        if code == 0:
            write_measure(run_dir)
    except BaseException as error:  # noqa: BLE001 - whatever ends the run ends it with a line
        code = 1  # also when the run ended well but its best.pt could not be measured
        print(f"error: {one_line(error)}", file=sys.stderr)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class TrialRunner:
    """Runs one trial (:meth:`run`) for a worker process of the study."""

    def __init__(self, study: optuna.Study, base: TrainConfig, space: Space, out: str, seeds: int, metric: str,
                 heartbeat: float, periods_per_year: float, world_size: int) -> None:
        self.study, self.base, self.space, self.out = study, base, space, out
        self.seeds, self.metric, self.heartbeat = seeds, metric, heartbeat
        self.periods_per_year, self.world_size = periods_per_year, world_size

    def run(self, trial: optuna.trial.Trial) -> float:
        """The trial's score (the mean of its seeds'); raises TrialPruned or TrialFailed."""
        config = apply(self.base, self.space.suggest(trial))
        try:
            resolve_config(config, self.world_size)
        except UsageError as err:
            raise TrialFailed(f"invalid settings: {err}") from None
        dirs = trial_dirs(self.out, trial.number, self.seeds)
        trial.set_user_attr("run_dirs", [str(d) for d in dirs])
        trial.set_user_attr("periods_per_year", self.periods_per_year)
        done: list[SeedRun] = []
        for index, run_dir in enumerate(dirs):
            seed_config = dataclasses.replace(config, seed=self.base.seed + index, checkpoint_dir=str(run_dir),
                                              log_file=str(run_dir / "training.log"), progress=False,
                                              resume=False, overwrite=False)
            done.append(self._run_seed(trial, seed_config, index, done))
        self._record(trial, done)
        return statistics.fmean(s.best for s in done)

    def _record(self, trial: optuna.trial.Trial, seeds: list[SeedRun]) -> None:
        scores = [s.best for s in seeds]
        trial.set_user_attr("seed_scores", scores)
        trial.set_user_attr("score_std", statistics.stdev(scores) if len(scores) > 1 else 0.0)
        trial.set_user_attr("holdout_sharpe", statistics.fmean(s.sharpe for s in seeds))
        trial.set_user_attr("holdout_sharpe_seeds", [s.sharpe for s in seeds])
        trial.set_user_attr("holdout_backtests", [s.backtests for s in seeds])
        held = [s.buy_and_hold for s in seeds if s.buy_and_hold is not None]
        if held:
            trial.set_user_attr("holdout_buy_and_hold_pct", statistics.fmean(held))
        measures = [s.measure for s in seeds]
        if all(m is not None and m.alpha_sharpe is not None for m in measures):  # every seed's run ended
            trial.set_user_attr("holdout_alpha_sharpe", statistics.fmean(m.alpha_sharpe for m in measures))
            trial.set_user_attr("holdout_alpha_sharpe_seeds", [m.alpha_sharpe for m in measures])
            trial.set_user_attr("holdout_bars", int(statistics.median(m.bars for m in measures)))
            bench = [m.buy_and_hold_sharpe for m in measures if m.buy_and_hold_sharpe is not None]
            if bench:
                trial.set_user_attr("holdout_buy_and_hold_sharpe", statistics.fmean(bench))

    def _run_seed(self, trial: optuna.trial.Trial, config: TrainConfig, index: int, done: list[SeedRun]) -> SeedRun:
        """Train one seed, reporting each hold-out backtest; SIGTERM when the pruner says so."""
        run_dir = Path(config.checkpoint_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        fd, config_path = tempfile.mkstemp(suffix=".yaml", prefix=f".{run_dir.name}-", dir=run_dir.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(config_yaml(config, ("the trial's settings, read once by its training run",)))
        stderr_path = str(run_dir.parent / f".{run_dir.name}.stderr")
        context = multiprocessing.get_context("fork")  # inherits the imports: no second torch start-up
        child = context.Process(target=_train_child, args=(["--config", config_path], stderr_path, run_dir),
                                daemon=False)
        seed = SeedRun()
        last_beat = 0.0
        try:
            child.start()
            while True:
                alive = child.is_alive()
                if self._read(trial, run_dir / "metrics.csv", seed, index, done, config):
                    self._stop(child, trial)
                    self._record(trial, done + [seed])
                    raise optuna.TrialPruned()
                if not alive:
                    break
                if time.monotonic() - last_beat > self.heartbeat:
                    beat(self.study, trial._trial_id)
                    last_beat = time.monotonic()
                child.join(POLL_S)
        except BaseException:
            self._stop(child, trial)
            raise
        finally:
            os.unlink(config_path)
        code = child.exitcode
        reason = _last_line(stderr_path)
        os.unlink(stderr_path)
        if code != 0:
            raise TrialFailed(f"training in {run_dir} exited with code {code}: {reason or 'no error line'}")
        if seed.best == -math.inf:
            raise TrialFailed(f"training in {run_dir} ran no hold-out backtest")
        seed.measure = read_measure(run_dir)
        return seed

    def _read(self, trial: optuna.trial.Trial, metrics: Path, seed: SeedRun, index: int, done: list[SeedRun],
              config: TrainConfig) -> bool:
        """Report the hold-out rows of ``metrics`` not read yet; True when the pruner stops the trial."""
        try:
            with open(metrics, newline="", encoding="utf-8") as handle:
                rows = list(csv.DictReader(handle))
        except FileNotFoundError:
            return False
        complete = rows[:-1] if rows and None in rows[-1].values() else rows  # a row being written
        for row in complete[seed.rows_read:]:
            seed.rows_read += 1
            ret = _float(row.get("holdout_return_pct"))
            if ret is None:
                continue  # an update without a hold-out backtest
            seed.backtests += 1
            if ret > seed.best_return:  # the trainer's best.pt: strictly better hold-out return
                seed.best_return, seed.sharpe = ret, _float(row.get("holdout_sharpe")) or 0.0
                seed.buy_and_hold = _float(row.get("holdout_buy_and_hold_pct"))
                seed.best = ret if self.metric == "return" else seed.sharpe
            so_far = statistics.fmean([s.best for s in done] + [seed.best])
            trial.report(so_far, step=report_step(config, index, row))
            warm = sum(s.backtests for s in done) + seed.backtests > WARMUP_HOLDOUTS
            if warm and trial.should_prune():
                return True
        return False

    def _stop(self, child: multiprocessing.process.BaseProcess, trial: optuna.trial.Trial) -> None:
        """SIGTERM (the run checkpoints and exits), then SIGKILL if it does not; the trial beats
        while it waits, so that no other process takes it for stale meanwhile."""
        if child.pid is None or not child.is_alive():
            return
        os.kill(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_S
        beating = True
        while child.is_alive() and time.monotonic() < deadline:
            child.join(min(self.heartbeat, max(deadline - time.monotonic(), 0.0)))
            if beating and child.is_alive():
                try:
                    beat(self.study, trial._trial_id)
                except Exception:  # noqa: BLE001 - ended elsewhere, or the storage is away: stop all the same
                    beating = False
        if child.is_alive():
            child.kill()
            child.join()


def _last_line(path: str) -> str:
    try:
        lines = [line.strip() for line in Path(path).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or [""])[-1][:300]
