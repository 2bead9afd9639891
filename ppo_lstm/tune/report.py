"""The study's results: ``best.yaml`` (the best trial's full settings, a training config
file), the table of the top trials with their seeds' spread, parameter importances and the
optimisation history as ``history.png``; ``report.txt`` holds what is printed."""
from __future__ import annotations

import dataclasses
import math
import warnings
from pathlib import Path
from typing import Any, Optional

import optuna
from optuna.trial import FrozenTrial, TrialState

from ..config import TrainConfig, build_parser, config_yaml
from ..config_file import keyed_options
from ..errors import one_line
from ..rundir.checkpoint import atomic_write_bytes
from .queue import FAIL_REASON
from .storage import SETTINGS_ATTR, shown_url

TOP = 10


def run_settings(config: TrainConfig) -> dict[str, Any]:
    """The settings of a run (not its launch fields), keyed by dest (``"env.fee_bps"``)."""
    out = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
           if f.name != "env" and not f.metadata.get("launch")}
    out.update({"env." + f.name: getattr(config.env, f.name) for f in dataclasses.fields(config.env)})
    return out


def trial_config(study: optuna.Study, trial: FrozenTrial) -> TrainConfig:
    """The full settings ``trial`` trained with (its first seed's), launch fields at their defaults."""
    base = study.user_attrs[SETTINGS_ATTR]["base"]
    options = keyed_options(build_parser())
    values = dict(base)
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
    header = (f"Best trial {best.number} of study '{study.study_name}' (score {best.value:.6g}); its full settings.",
              "Train with: train-ppo-lstm --config best.yaml --checkpoint-dir DIR (launch settings such as "
              "--device are at their defaults)")
    text = config_yaml(trial_config(study, best), header)
    atomic_write_bytes(out / "best.yaml", lambda handle: handle.write(text.encode("utf-8")))
    return best


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def report_lines(study: optuna.Study, url: str, out: Path) -> list[str]:
    """The report: counts, the best trial, the top trials, importances, failures; writes
    best.yaml and history.png on the way."""
    trials = study.get_trials(deepcopy=False)
    counts = {state: sum(t.state == state for t in trials) for state in TrialState}
    settings = study.user_attrs.get(SETTINGS_ATTR, {})
    metric = settings.get("metric", "return")
    lines = [f"Study '{study.study_name}' in {shown_url(url)}: {len(trials)} trials: "
             f"{counts[TrialState.COMPLETE]} complete, {counts[TrialState.PRUNED]} pruned, "
             f"{counts[TrialState.FAIL]} failed, {counts[TrialState.RUNNING]} running, "
             f"{counts[TrialState.WAITING]} waiting",
             f"Objective: best hold-out {'return (%)' if metric == 'return' else 'Sharpe ratio'}, mean over "
             f"{settings.get('seeds', 1)} seed(s) per trial"]
    best = write_best(study, out)
    if best is None:
        lines.append("No complete trial yet: no best.yaml")
    else:
        lines.append(f"Best trial: {best.number}, score {best.value:.4g}; its settings: {out / 'best.yaml'}")
    ranked = sorted((t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)),
                    key=lambda t: (t.state != TrialState.COMPLETE, -(t.value if t.value is not None else -math.inf)))
    if ranked:
        names = sorted({name for t in ranked[:TOP] for name in t.params})
        lines += ["", f"Top trials (of {len(ranked)} complete or pruned; pruned ones score their last report):",
                  "  trial  state     score    seed std  sharpe  " + "  ".join(names)]
        for t in ranked[:TOP]:
            std = t.user_attrs.get("score_std")
            sharpe = t.user_attrs.get("holdout_sharpe")
            std_text = _fmt(std) if std is not None else "-"
            sharpe_text = _fmt(sharpe) if sharpe is not None else "-"
            lines.append(f"  {t.number:5d}  {t.state.name.lower():8s} {_fmt(t.value):>8s}  {std_text:>8s}  "
                         f"{sharpe_text:>6s}  " + "  ".join(f"{_fmt(t.params.get(n, '-')):>{len(n)}s}" for n in names))
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
