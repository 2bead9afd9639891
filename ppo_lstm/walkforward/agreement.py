"""How often the seed ensemble holds the position each of its seeds holds, on the test bars.

The ensemble trades the most likely action of the seeds' mean action probabilities
(:class:`~ppo_lstm.walkforward.policies.EnsemblePolicy`). That is not a vote: it can stay
flat while every seed is long, or follow a minority. :func:`ensemble_agreement` compares
the positions (signed lots held during each scored bar, i.e. the target of the decision
before it) bar by bar:

* per seed, the share of the bars where the ensemble's position equals the seed's;
* the seeds' majority: on the bars where more than half of the seeds hold one position,
  the share where the ensemble holds it too.

Per fold (every instrument's bars of that fold pooled) and overall (every fold's). A seed
whose ``test.json`` was written before positions were kept has none: its share is
unavailable (None) for that fold and overall, and so is the majority.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from .trading import FoldTrades


@dataclass
class _Counts:
    """Bars compared and matches: per seed (None once a seed's positions are missing) and the majority's."""

    bars: int
    seeds: dict[int, Optional[int]]
    majority_bars: Optional[int]
    majority_agree: Optional[int]

    def add(self, other: "_Counts") -> None:
        self.bars += other.bars
        for seed, hits in other.seeds.items():
            mine = self.seeds.get(seed, 0)
            self.seeds[seed] = None if mine is None or hits is None else mine + hits
        if self.majority_bars is None or other.majority_bars is None:
            self.majority_bars = self.majority_agree = None
        else:
            self.majority_bars += other.majority_bars
            self.majority_agree += other.majority_agree  # type: ignore[operator]

    def as_dict(self) -> dict[str, Any]:
        """Shares (fractions, None where unavailable) and the bar counts behind them."""
        return {"bars": self.bars,
                "seeds": {str(s): _share(hits, self.bars) for s, hits in self.seeds.items()},
                "majority": _share(self.majority_agree, self.majority_bars), "majority_bars": self.majority_bars}


def _share(hits: Optional[int], bars: Optional[int]) -> Optional[float]:
    return None if hits is None or not bars else hits / bars


def fold_counts(one: FoldTrades, seeds: Sequence[int]) -> _Counts:
    """The matches of one fold on one instrument (its ``T`` bars)."""
    bars = len(one.time)
    ensemble = one.ensemble_positions
    held = {s: one.seed_positions.get(s) for s in seeds}
    if ensemble is None:
        return _Counts(bars, {s: None for s in seeds}, None, None)
    hits = {s: None if p is None else int(np.count_nonzero(np.asarray(p) == ensemble)) for s, p in held.items()}
    if any(p is None for p in held.values()):
        return _Counts(bars, hits, None, None)
    stack = np.stack([np.asarray(held[s]) for s in seeds])  # [S, T]
    counts = (stack[:, None, :] == stack[None, :, :]).sum(axis=0)  # [S, T]: seeds holding seed i's position
    has = counts.max(axis=0) * 2 > len(seeds)  # [T] a strict majority exists
    winner = stack[counts.argmax(axis=0), np.arange(bars)]  # [T] the position most seeds hold
    return _Counts(bars, hits, int(np.count_nonzero(has)), int(np.count_nonzero(has & (winner == ensemble))))


def ensemble_agreement(trades: dict[str, list[tuple[int, FoldTrades]]],
                       seeds: Sequence[int]) -> tuple[dict[str, Any], list[str]]:
    """The agreement of the ensemble with its seeds; ``trades[instrument] = [(fold k, FoldTrades), ...]``.

    Returns the summary (``{"per_fold": [{"fold", "bars", "seeds": {seed: share}, "majority",
    "majority_bars"}, ...], "overall": {...}, "available": bool}``, shares as fractions, None
    where unavailable) and the report's markdown lines (a ``## ...`` section with a table).
    """
    folds: dict[int, _Counts] = {}
    for parts in trades.values():
        for k, one in parts:
            counts = fold_counts(one, seeds)
            if k in folds:
                folds[k].add(counts)
            else:
                folds[k] = counts
    overall = _Counts(0, {s: 0 for s in seeds}, 0, 0)
    for counts in folds.values():
        overall.add(counts)
    per_fold = [{"fold": k, **folds[k].as_dict()} for k in sorted(folds)]
    summary = {"per_fold": per_fold, "overall": overall.as_dict(),
               "available": all(hits is not None for hits in overall.seeds.values())}
    return summary, _lines(summary, seeds)


def _cell(share: Optional[float]) -> str:
    return "n/a" if share is None else f"{100 * share:.1f} %"


def _lines(summary: dict[str, Any], seeds: Sequence[int]) -> list[str]:
    lines = ["", "## Does the ensemble do what its seeds do?", "",
             "The ensemble trades the most likely action of the seeds' mean action probabilities, which is not a "
             "vote: it can stay flat while its seeds are long. Share of the test bars on which the ensemble holds "
             "the same position as each seed, and as the seeds' majority (on the bars where more than half of the "
             "seeds hold one position; their count in brackets).", ""]
    if not summary["available"]:
        lines += ["n/a: a seed's test.json predates the positions it now keeps (rerun in a new --out to get them).",
                  ""]
    lines += ["| fold | bars | " + " | ".join(f"seed {s}" for s in seeds) + " | seeds' majority |",
              "|---|---|" + "---|" * (len(seeds) + 1)]
    for row in [*summary["per_fold"], {"fold": "all", **summary["overall"]}]:
        majority = _cell(row["majority"]) + ("" if row["majority_bars"] is None else f" ({row['majority_bars']})")
        lines.append(f"| {row['fold']} | {row['bars']} | " + " | ".join(_cell(row["seeds"][str(s)]) for s in seeds)
                     + f" | {majority} |")
    return lines
