"""The study's results: ``best.yaml`` (the best trial's full settings, a training config
file, with the span of bars the study read), the table of the top trials with their seeds'
spread and buy-and-hold on the same hold-out, parameter importances and the optimisation
history as ``history.png``; ``report.txt`` holds what is printed.

``best.yaml`` leaves ``--data-start`` and ``--data-end`` out: it holds the settings, not the
bars, so ``train-ppo-lstm --config best.yaml`` trains on the file's bars and the walk-forward
cuts its folds from them. Its ``tuned-span`` key (a walk-forward setting, which the training
command skips) names the bars the study read: the walk-forward refuses a test window among them.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import warnings
from pathlib import Path
from typing import Any, Optional

import optuna
import yaml
from optuna.trial import FrozenTrial, TrialState

from ..config.command_line import build_parser, config_yaml
from ..config.migrate import migrate_settings_by_dest
from ..config.schema import TrainConfig
from ..config.files import keyed_options
from ..errors import one_line
from ..rundir.checkpoint import atomic_write_bytes
from .queue import FAIL_REASON
from .storage import SETTINGS_ATTR, SPAN_ATTR, shown_url

TOP = 10


def run_settings(config: TrainConfig) -> dict[str, Any]:
    """The settings of a run (not its launch fields), keyed by dest (``"env.fee_bps"``)."""
    out = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
           if f.name != "env" and not f.metadata.get("launch")}
    out.update({"env." + f.name: getattr(config.env, f.name) for f in dataclasses.fields(config.env)})
    return out


def trial_config(study: optuna.Study, trial: FrozenTrial) -> TrainConfig:
    """The full settings ``trial`` trained with (its first seed's), launch fields at their defaults."""
    recorded = study.user_attrs[SETTINGS_ATTR]
    options = keyed_options(build_parser())
    values = migrate_settings_by_dest(recorded["base"], recorded.get("settings_format"), f"study '{study.study_name}'")
    values.update({options[name].dest: value for name, value in trial.params.items()})
    config = TrainConfig()
    for dest, value in values.items():
        target, attr = (config.env, dest[4:]) if dest.startswith("env.") else (config, dest)
        setattr(target, attr, value)
    return config


def write_best(study: optuna.Study, out: Path) -> Optional[FrozenTrial]:
    """``<out>/best.yaml`` from the best COMPLETE trial; None (nothing written) without one."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        return None
    best = max(complete, key=lambda t: (t.value, -t.number))
    span = study.user_attrs.get(SPAN_ATTR)
    header = (f"Best trial {best.number} of study '{study.study_name}' (score {best.value:.6g}); its full settings.",
              "Train with: train-ppo-lstm --config best.yaml --checkpoint-dir DIR (launch settings such as "
              "--device are at their defaults)",
              "data-start and data-end are left out: choose the bars to train on"
              + (f"; the study read {span} (tuned-span, at the end, which walkforward-ppo-lstm reads and the "
                 f"training command skips)" if span else ""))
    config = dataclasses.replace(trial_config(study, best), data_start=None, data_end=None)
    text = config_yaml(config, header)
    if span:
        text += ("\n# walk-forward: a test window among the bars the study read is refused\n"
                 + yaml.safe_dump({"tuned-span": span}, default_flow_style=False))
    atomic_write_bytes(out / "best.yaml", lambda handle: handle.write(text.encode("utf-8")))
    return best


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _cell(value: Any) -> str:
    return "-" if value is None else _fmt(value)


# The trial table's figures beside the score: header, width, and how to read one from a trial.
def _alpha_annual(t: FrozenTrial) -> Optional[float]:
    per_bar, years = t.user_attrs.get("holdout_alpha_sharpe"), t.user_attrs.get("periods_per_year")
    return None if per_bar is None or not years else per_bar * math.sqrt(years)


COLUMNS = (("seed std", 8, lambda t: t.user_attrs.get("score_std")),
           ("b&h ret", 7, lambda t: t.user_attrs.get("holdout_buy_and_hold_pct")),
           ("sharpe", 6, lambda t: t.user_attrs.get("holdout_sharpe")),
           ("b&h sharpe", 10, lambda t: t.user_attrs.get("holdout_buy_and_hold_sharpe")),
           ("alpha sharpe", 12, _alpha_annual))


def objective_lines(study: optuna.Study, metric: str, seeds: int, time_limit: Optional[str] = None,
                    train_for: Optional[str] = None) -> list[str]:
    """What a trial's score is (with ``time_limit`` or ``train_for``, at equal wall time), and that
    it is a selection on the bars it is scored on."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    counts = [n for t in done for n in t.user_attrs.get("holdout_backtests", [])]
    among = f"the best of its run's {int(statistics.median(counts))} hold-out backtests" if counts else \
        "the best of its run's hold-out backtests"
    budget = "" if time_limit is None else f", each seed trained for at most {time_limit} of wall time (--time-limit)"
    if train_for is not None:
        budget = f", each seed trained for {train_for} of wall time, its episodes fitted to it (--train-for)" + (
            "" if time_limit is None else f", and stopped at {time_limit} at most (--time-limit)")
    return [f"Objective: the hold-out {'return (%)' if metric == 'return' else 'Sharpe ratio'} of each seed's "
            f"best.pt, mean over {seeds} seed(s) per trial{budget}",
            f"A selection: each seed's best.pt is {among} by hold-out return, on the very bars it is scored on, "
            f"and the best trial the best of the study's trials there: the scores are optimistic and none is out "
            f"of sample; judge the best settings on later bars (walkforward-ppo-lstm, docs/tuning.md)"]


def trial_table(ranked: list[FrozenTrial]) -> list[str]:
    """The top trials: score, the figures of :data:`COLUMNS`, parameters; and how to read them."""
    names = sorted({name for t in ranked[:TOP] for name in t.params})
    header = "  trial  state     score  " + "".join(f"  {h:>{w}s}" for h, w, _ in COLUMNS)
    lines = [f"Top trials (of {len(ranked)} complete or pruned; pruned ones score their last report):",
             header + "  " + "  ".join(names)]
    for t in ranked[:TOP]:
        figures = "".join(f"  {_cell(read(t)):>{w}s}" for _, w, read in COLUMNS)
        lines.append(f"  {t.number:5d}  {t.state.name.lower():8s} {_fmt(t.value):>8s}{figures}  "
                     + "  ".join(f"{_fmt(t.params.get(n, '-')):>{len(n)}s}" for n in names))
    return lines + ["b&h: buy-and-hold on the same hold-out bars (return in %, Sharpe ratio); a trial whose score "
                    "equals b&h's held the stock.",
                    "alpha sharpe: the annualised Sharpe ratio of best.pt's hold-out returns less beta x "
                    "buy-and-hold's (0: a fixed exposure, no timing skill); the walk-forward's DSR takes its spread "
                    "over the complete trials. -: not measured (a pruned trial stopped early)."]


def report_lines(study: optuna.Study, url: str, out: Path) -> list[str]:
    """The report: counts, the best trial, the top trials, importances, failures; writes
    best.yaml and history.png on the way."""
    trials = study.get_trials(deepcopy=False)
    counts = {state: sum(t.state == state for t in trials) for state in TrialState}
    settings = study.user_attrs.get(SETTINGS_ATTR, {})
    lines = [f"Study '{study.study_name}' in {shown_url(url)}: {len(trials)} trials: "
             f"{counts[TrialState.COMPLETE]} complete, {counts[TrialState.PRUNED]} pruned, "
             f"{counts[TrialState.FAIL]} failed, {counts[TrialState.RUNNING]} running, "
             f"{counts[TrialState.WAITING]} waiting",
             *objective_lines(study, settings.get("metric", "return"), settings.get("seeds", 1),
                              settings.get("time_limit"), settings.get("train_for"))]
    best = write_best(study, out)
    if best is None:
        lines.append("No complete trial yet: no best.yaml")
    else:
        lines.append(f"Best trial: {best.number}, score {best.value:.4g}; its settings: {out / 'best.yaml'}")
    if study.user_attrs.get(SPAN_ATTR):
        lines.append(f"Bars read by the study: {study.user_attrs[SPAN_ATTR]} (best.yaml's tuned-span)")
    ranked = sorted((t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)),
                    key=lambda t: (t.state != TrialState.COMPLETE, -(t.value if t.value is not None else -math.inf)))
    if ranked:
        lines += ["", *trial_table(ranked)]
    lines += ["", *importance_lines(study)]
    lines.append(history_line(study, out))
    failed = [t for t in trials if t.state == TrialState.FAIL]
    if failed:
        lines += ["", "Failed trials:"]
        killed = "its process was killed or interrupted; its slot is queued again"
        lines += [f"  {t.number}: {t.user_attrs.get(FAIL_REASON, killed)}" for t in failed]
    return lines


def importance_lines(study: optuna.Study) -> list[str]:
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(complete) < 2:
        return ["Parameter importances: need at least 2 complete trials"]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "all importances equal" on a flat study: the numbers say so
            importances = optuna.importance.get_param_importances(study)
    except (RuntimeError, ValueError) as err:
        return [f"Parameter importances: not available ({one_line(err)})"]
    lines = ["Parameter importances (optuna.importance.get_param_importances, its default evaluator):"]
    ranked = sorted(importances.items(), key=lambda item: (-round(item[1], 3), item[0]))  # ties: by name
    lines += [f"  {name:24s} {value:.3f}" for name, value in ranked]
    return lines


def history_line(study: optuna.Study, out: Path) -> str:
    """Write ``<out>/history.png`` (the optimisation history); the line that says where, or why not."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            axes = optuna.visualization.matplotlib.plot_optimization_history(study)
    except ImportError:
        return "Optimisation history: needs matplotlib (pip install 'ppo-lstm-trader[tune]')"
    except (ValueError, RuntimeError) as err:
        return f"Optimisation history: not drawn ({one_line(err)})"
    path = out / "history.png"
    axes.figure.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(axes.figure)
    return f"Optimisation history: {path}"
