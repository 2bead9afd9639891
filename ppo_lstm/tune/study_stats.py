"""How many trials a tuned configuration was chosen from, and how their hold-out Sharpe
ratios spread: what the walk-forward verdict's Deflated Sharpe Ratio needs.

``spec`` is ``STORAGE:NAME``, split at its LAST colon (storage URLs hold colons, study names
may not): ``sqlite:///runs/tune/study.db:tune``, ``journal:/shared/tune.log:tune``,
``postgresql://user@host:5432/optuna:tune``. STORAGE may also be a study's ``--out``
directory, meaning its default SQLite file: ``runs/tune:tune``.

Counted trials: COMPLETE and PRUNED. A pruned trial was backtested on the hold-out and
judged worse than others there, so it is one of the configurations the choice was made
among; a FAILED trial gave no hold-out score, and a RUNNING or WAITING one none yet.

The spread in the Deflated Sharpe Ratio's units, ``alpha_sharpes``: the per-bar Sharpe ratio of
each COMPLETE trial's hedged hold-out returns (``holdout_alpha_sharpe``, measured on the
checkpoint the trial is scored by, ``ppo_lstm.tune.holdout_alpha``), over ``holdout_bars`` bars.
A pruned trial stopped part way, so its partial figures stay out of the spread; studies made
before these were recorded give none.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from optuna.trial import TrialState

from ..errors import UsageError
from .storage import SPAN_ATTR, default_storage, load_existing, make_storage

COUNTED = (TrialState.COMPLETE, TrialState.PRUNED)


@dataclass(frozen=True)
class TrialStats:
    """``trials``: COMPLETE + PRUNED trials; ``sharpes``: their annualised hold-out Sharpe
    ratios (each trial's mean over seeds, at its best checkpoint); ``sharpe_variance``: their
    sample variance (ddof 1; 0.0 with fewer than 2), in annualised units squared;
    ``periods_per_year``: the bars per year those Sharpe ratios were annualised with;
    ``alpha_sharpes``: the per-bar Sharpe ratios of the COMPLETE trials' hedged hold-out returns
    (module docstring); ``holdout_bars``: the median of the bars they were measured over (0
    without any); ``tuned_span``: ``START..END``, the bars the study read (None: not recorded,
    or a simulated market)."""

    trials: int
    sharpes: tuple[float, ...]
    sharpe_variance: float
    periods_per_year: float
    alpha_sharpes: tuple[float, ...] = ()
    holdout_bars: int = 0
    tuned_span: Optional[str] = None

    @property
    def per_period_variance(self) -> float:
        """The variance of the per-bar (not annualised) Sharpe ratios: ``sharpe_variance / periods_per_year``."""
        return self.sharpe_variance / self.periods_per_year


def parse_spec(spec: str) -> tuple[str, str]:
    """``STORAGE:NAME`` -> (storage URL, study name), split at the last colon."""
    storage, sep, name = spec.rpartition(":")
    if not sep or not storage or not name or name.startswith("//"):
        raise UsageError(f"--study {spec!r}: give STORAGE:NAME, e.g. sqlite:///runs/tune/study.db:tune or "
                         f"runs/tune:tune (the study's --out directory)")
    if Path(storage).is_dir():
        storage = default_storage(storage)
    return storage, name


def trial_stats(spec: str) -> TrialStats:
    """The :class:`TrialStats` of the study ``spec``; UsageError (one line) when it cannot be read."""
    url, name = parse_spec(spec)
    study = load_existing(make_storage(url), name, url)
    trials = study.get_trials(deepcopy=False, states=COUNTED)
    sharpes = tuple(float(t.user_attrs["holdout_sharpe"]) for t in trials
                    if _finite(t.user_attrs.get("holdout_sharpe")))
    years = {float(t.user_attrs["periods_per_year"]) for t in trials if "periods_per_year" in t.user_attrs}
    if len(years) > 1:
        raise UsageError(f"study '{name}': its trials' Sharpe ratios were annualised with different bars per year "
                         f"({sorted(years)}); a variance across them means nothing")
    variance = statistics.variance(sharpes) if len(sharpes) > 1 else 0.0
    measured = [t for t in trials if t.state == TrialState.COMPLETE
                and _finite(t.user_attrs.get("holdout_alpha_sharpe"))
                and isinstance(t.user_attrs.get("holdout_bars"), int)]
    alphas = tuple(float(t.user_attrs["holdout_alpha_sharpe"]) for t in measured)
    bars = int(statistics.median(t.user_attrs["holdout_bars"] for t in measured)) if measured else 0
    return TrialStats(len(trials), sharpes, variance, years.pop() if years else math.nan, alphas, bars,
                      study.user_attrs.get(SPAN_ATTR))


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
