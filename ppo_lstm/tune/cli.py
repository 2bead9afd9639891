"""The ``tune-ppo-lstm`` command line (also ``python -m ppo_lstm.tune``): check every input,
open or create the study, run its trials in ``--jobs`` processes, print the report."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

from ..errors import EXIT_USAGE, UsageError

INSTALL = "pip install 'ppo-lstm-trader[tune]'"


def main(argv: Optional[list[str]] = None, prog: Optional[str] = None) -> int:
    """Run the command; returns the exit code (2 for bad input)."""
    try:
        import optuna  # noqa: F401
        import sqlalchemy  # noqa: F401
    except ImportError as err:
        print(f"error: tune-ppo-lstm needs Optuna and SQLAlchemy ({err.name} is missing): {INSTALL}", file=sys.stderr)
        return EXIT_USAGE
    from .config import parse_command_line
    try:
        command = parse_command_line(argv, prog)
        if command.print_config:
            from ..config.command_line import config_yaml
            sys.stdout.write(config_yaml(command.base, ("The base configuration of the study's trials",)))
            return 0
        return _run(command)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE


def _run(command: Any) -> int:
    import optuna

    from ..config.resolve import resolve_config
    from ..config.migrate import SETTINGS_FORMAT
    from ..config.command_line import build_parser
    from ..distributed import resolve_device, world_size_for
    from .report import report_lines, run_settings
    from .runner import Job, run_jobs
    from .space import load_space
    from .storage import (check_settings, check_span, default_storage, load_existing, make_storage, open_study,
                          record_settings, record_span, wait_for_settings)
    from .queue import queue_slots

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    base, tune = command.base, command.tune
    out = Path(tune.out)
    url = tune.storage or default_storage(tune.out)
    if tune.report:
        if tune.storage is None and not (out / "study.db").is_file():
            raise UsageError(f"--out {out} holds no study (no {out / 'study.db'}); run the study first, or give "
                             f"--storage where it lives")
        storage = make_storage(url)
        _print_report(report_lines(load_existing(storage, tune.study_name, url), url, out), out)
        return 0
    space = load_space(tune.space, build_parser())
    resolve_config(base, world_size_for(base, resolve_device(base.device)))
    periods_per_year, span = _check_holdout(base)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"--out {out}: cannot create the directory ({err.strerror})") from None
    storage = make_storage(url)
    settings = {"settings_format": SETTINGS_FORMAT, "space": _json(space.canonical()), "metric": tune.metric, "seeds": tune.seeds,
                "time_limit": base.time_limit, "train_for": base.train_for, "base": run_settings(base)}
    study, created = open_study(storage, tune.study_name, url)
    if created:
        queue_slots(study, tune.trials)
        record_span(study, span)
        record_settings(study, settings)  # last: the others wait for it, so they find the slots queued
    else:
        recorded = wait_for_settings(study)
        if recorded is None:
            record_settings(study, settings)
        else:
            check_settings(tune.study_name, recorded, settings, frozenset(d.dest for d in space.dimensions))
        check_span(study, span)
    code = run_jobs(Job(base, tune, space, url, periods_per_year))
    _print_report(report_lines(study, url, out), out)
    return code


def _json(text: str) -> Any:
    import json
    return json.loads(text)


def _check_holdout(base: Any) -> tuple[float, Optional[str]]:
    """UsageError when the base configuration has no hold-out to score; its bars per year, and
    the span of bars its trials read (``START..END``; None on a simulated market)."""
    from envs.data.calendar import basket_bars_per_year

    from ..evaluation.backtest import SIMULATED_PERIODS_PER_YEAR
    from ..data_split import load_training_data
    from ..walkforward.tuned_span import span_text

    if base.holdout <= 0 or (base.data is None and base.holdout_episodes <= 0):
        raise UsageError("the study scores trials on the hold-out, and --holdout 0 or --holdout-episodes 0 turns it "
                         "off; keep a hold-out")
    if base.data is None:
        return SIMULATED_PERIODS_PER_YEAR, None
    datas, splits = load_training_data(base)  # bad files or dates: one line, before any trial
    span = span_text(min(d.timestamps[s.lo] for d, s in zip(datas, splits)),
                     max(d.timestamps[s.hi - 1] for d, s in zip(datas, splits)))
    return basket_bars_per_year([d.timestamps for d in datas]), span  # the basket's own calendar


def _print_report(lines: list[str], out: Path) -> None:
    text = "\n".join(lines) + "\n"
    (out / "report.txt").write_text(text, encoding="utf-8")
    sys.stdout.write(text)
