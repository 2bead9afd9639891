"""``walkforward-ppo-lstm`` (``python -m ppo_lstm.walkforward``): plan the folds, check every
input, run the (fold, seed) trainings, trade the test windows and write the reports.

    walkforward-ppo-lstm --data GOOGL.csv --folds 5 --test-size 1y --seeds 3 --out wf/ --episodes 300

Bad input: one ``error: ...`` line on stderr and exit code 2, before any job starts.
Rerunning the same command resumes: finished jobs are skipped, interrupted ones resumed.
"""
from __future__ import annotations

import dataclasses
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import numpy as np
import pandas as pd

from envs.data import DataError, MarketData, date_span
from envs.data.calendar import basket_bars_per_year
from envs.data.instruments import data_paths, instrument_name, load_instruments

from ..config.resolve import resolve_config
from ..config.command_line import flag_settings
from ..config.schema import TrainConfig
from ..config.files import dump_settings
from ..errors import EXIT_USAGE, UsageError
from ..data_split import split_instruments
from .config import WalkForwardConfig, build_parser, parse_command_line, validate
from .agreement import ensemble_agreement
from .costs import cost_sensitivity
from .folds import Fold, make_folds, parse_size
from .jobs import Job, JobFailed, job_config, run_jobs, threads_per_job
from .report import figures_table, fold_rows, summary_dict, write_reports
from .results import StudyTrials, basket, capital_frame, instrument_alphas, oos_frame, verdict_of
from .state import JOBS_DIR, check_or_write, settings_of
from .trading import finish_job, trade_fold, window_bars
from .tuned_span import check_test_windows, parse_span

if TYPE_CHECKING:  # the [tune] extra may be missing; load_study says so in one line
    from ..tune.study_stats import TrialStats


@dataclasses.dataclass
class Plan:
    """What a walk-forward runs: its data (selected bars), calendar ``[N]``, folds and jobs."""

    datas: list[MarketData]
    files: list[str]
    calendar: np.ndarray
    folds: list[Fold]
    jobs: list[Job]


def load_selected(train: TrainConfig) -> tuple[list[MarketData], list[str], np.ndarray]:
    """The instruments, their files and the calendar of the bars --data-start/--data-end select."""
    try:
        files = [str(Path(p).resolve()) for p in data_paths(train.data)]
        datas = load_instruments(files, train.date_format, min_rows=2, features=train.env.feature_names)
        spans = [date_span(d, train.data_start, train.data_end, flags=("--data-start", "--data-end")) for d in datas]
    except DataError as err:
        raise UsageError(str(err)) from None
    calendar = np.unique(np.concatenate([d.timestamps[lo:hi] for d, (lo, hi) in zip(datas, spans)]))
    return datas, files, calendar


def plan(wf: WalkForwardConfig, train: TrainConfig) -> Plan:
    """Folds and jobs; UsageError (one line) for anything that cannot run."""
    validate(wf, train)
    if not train.distributed:
        resolve_config(train, 1)  # a distributed job checks its own worker count when it starts
    datas, files, calendar = load_selected(train)
    test_size = parse_size(wf.test_size, "--test-size")
    train_size = parse_size(wf.train_size, "--train-size") if wf.train_size is not None else None
    folds = make_folds(calendar, wf.folds, test_size, wf.purge, train_size)
    if wf.tuned_span is not None:  # from --tuned-span, or best.yaml's tuned-span
        check_test_windows(parse_span(wf.tuned_span, "tuned-span"), folds, calendar, datas, train.data_end)
    need = train.env.window + 2
    for fold in folds:
        for data in datas:
            a, b = window_bars(data, calendar, fold)
            if b - a < need:
                raise UsageError(f"fold {fold.k}'s test window ({pd.Timestamp(calendar[fold.test_lo])} to "
                                 f"{pd.Timestamp(calendar[fold.test_hi - 1])}) holds {b - a} bars of "
                                 f"{instrument_name(data.source)}; a test window needs at least window + 2 = {need}; "
                                 f"use a longer --test-size or fewer --folds")
    threads = threads_per_job(train, wf.jobs)
    out = Path(wf.out).resolve()
    jobs = []
    for fold in folds:
        start, end = (pd.Timestamp(calendar[i]).isoformat() for i in (fold.train_lo, fold.train_hi - 1))
        for s in range(wf.seeds):
            seed = train.seed + s
            config = job_config(train, files, start, end, seed, threads)
            if s == 0:
                try:
                    split_instruments(datas, config)
                except UsageError as err:
                    raise UsageError(f"fold {fold.k} (training bars {start} to {end}): {err}") from None
            jobs.append(Job(fold, seed, out / JOBS_DIR / f"fold{fold.k:02d}-seed{seed}", config))
    return Plan(datas, files, calendar, folds, jobs)


def load_study(spec: Optional[str]) -> Optional[TrialStats]:
    """The finished trials of ``--study STORAGE:NAME``; UsageError (one line) when it cannot be read."""
    if spec is None:
        return None
    try:
        from ..tune.study_stats import trial_stats
    except ImportError:
        raise UsageError("--study reads an Optuna study: pip install 'ppo-lstm-trader[tune]'") from None
    stats = trial_stats(spec)
    if stats.trials == 0:
        raise UsageError(f"--study {spec}: the study has no finished trial yet; run tune-ppo-lstm first, "
                         f"or leave --study out")
    return stats


def report(wf: WalkForwardConfig, train: TrainConfig, p: Plan, command: str,
           study: Optional[StudyTrials] = None) -> str:
    """Trade every fold's ensemble and baselines, write the reports; returns the verdict line."""
    seeds = [train.seed + s for s in range(wf.seeds)]
    trades = {}
    for data in p.datas:
        name = instrument_name(data.source)
        trades[name] = [(fold.k, trade_fold([j for j in p.jobs if j.fold.k == fold.k], data, p.calendar))
                        for fold in p.folds]
    oos = oos_frame(trades, seeds)
    ppy = basket_bars_per_year([d.timestamps for d in p.datas])  # the basket's own calendar
    series = basket(oos, seeds)
    capital = capital_frame(oos, seeds)
    verdict = verdict_of(basket(capital, seeds), seeds, ppy, wf, study)
    table = figures_table(series, seeds, ppy)
    agreement, agreement_lines = ensemble_agreement(trades, seeds)
    costs, cost_lines = cost_sensitivity(trades, p.datas, train.env, ppy)
    sections = {"instrument_alphas": instrument_alphas(capital, ppy), "agreement": agreement, "costs": costs}
    summary = summary_dict(settings_of(wf, train), p.folds, p.calendar, table, verdict, ppy,
                           [instrument_name(d.source) for d in p.datas], sections)
    rows = fold_rows(oos, p.folds, p.calendar, seeds, ppy)
    write_reports(Path(wf.out), oos, rows, summary, command, seeds, [*agreement_lines, *cost_lines])
    return verdict.result.line()


def print_config(wf: WalkForwardConfig, train: TrainConfig) -> None:
    values = {name: value for name, (_, value) in flag_settings(train).items()}
    values.update({"wf." + f.name: getattr(wf, f.name) for f in dataclasses.fields(wf)})
    header = ("Resolved walk-forward settings; run with: --config FILE",)
    sys.stdout.write(dump_settings(build_parser(), values, header))


def main(argv: Optional[list[str]] = None, prog: Optional[str] = None) -> int:
    """Run the walk-forward; returns the exit code (2 bad input, 1 a job failed, 130/143 interrupted)."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        command = parse_command_line(argv, prog)
        wf, train = command.wf, command.train
        if command.print_config:
            print_config(wf, train)
            return 0
        p = plan(wf, train)
        study = load_study(wf.study)
        if study is not None and study.tuned_span is not None:
            check_test_windows(parse_span(study.tuned_span, f"--study {wf.study}"), p.folds, p.calendar, p.datas,
                               train.data_end)
        check_or_write(Path(wf.out), wf, train, p.files)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    left = sum(not j.done for j in p.jobs)
    print(f"Walk-forward: {len(p.folds)} folds x {wf.seeds} seeds = {len(p.jobs)} jobs ({left} to run, "
          f"{wf.jobs} at once, {p.jobs[0].config.threads} torch thread(s) each) under {Path(wf.out) / JOBS_DIR}")
    for fold in p.folds:
        c = p.calendar
        print(f"  fold {fold.k}: train {pd.Timestamp(c[fold.train_lo])} to {pd.Timestamp(c[fold.train_hi - 1])} "
              f"({fold.train_hi - fold.train_lo} bars, the last {train.holdout:g} its hold-out), test "
              f"{pd.Timestamp(c[fold.test_lo])} to {pd.Timestamp(c[fold.test_hi - 1])} "
              f"({fold.test_hi - fold.test_lo} bars)")
    sys.stdout.flush()
    try:
        stopped = run_jobs(p.jobs, wf.jobs, lambda job: finish_job(job, p.datas, p.calendar), train.progress)
    except JobFailed as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if stopped is not None:
        print("Walk-forward interrupted; rerun the same command to resume it", file=sys.stderr)
        return stopped
    line = report(wf, train, p, "walkforward-ppo-lstm " + " ".join(shlex.quote(a) for a in argv), study)
    print(line)
    print(f"Reports: {Path(wf.out) / 'report.md'}, summary.json, walkforward.csv, oos_returns.csv, report.png")
    return 0
