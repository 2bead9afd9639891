"""The backtest run at every checkpoint on what is held out of training
(:mod:`ppo_lstm.data_split` says which bars that is): by rank 0, or, for simulated episodes on
CPU workers, by every rank, each playing its share of the episodes for rank 0 to chain.

With ``--data``, the hold-out backtest is :func:`ppo_lstm.evaluation.backtest.backtest_history`
on bars ``split..hi-1``: its first decision is taken at the close of the first held-out bar
``split`` (its window: the bars before it, past and so no look-ahead) and its first trade
fills at bar ``split+1``'s open, so the bars after ``split`` are scored and none is trained
on. ``evaluate-ppo-lstm --data FILE --start <bar split> --end <bar hi-1>`` runs exactly that
backtest (:meth:`Holdout.evaluate_command`).

With several instruments, each instrument's hold-out is backtested on its own; the hold-out
line gives the mean over instruments of each figure, metrics.csv adds every instrument's
figures (columns ``<file name>:holdout_...``) and best.pt is the best mean return. An
instrument the cut leaves fewer than ``window + 2`` held-out bars is warned about at
start-up and left out of the means (unless all are).

Without ``--data``, the hold-out is :func:`ppo_lstm.evaluation.backtest.backtest_simulated` on
``--holdout-episodes`` paths of the training market seeded by
``evaluation_seeds(seed, episodes)``, seeds that no training env ever draws.
"""
from __future__ import annotations

import dataclasses
import math
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

import torch

from envs.data.instruments import instrument_name

from ..algo.agent import RecurrentActorCritic
from ..config.plan import share
from ..distributed.comm import Comm
from ..evaluation.backtest import (BacktestResult, SimulatedRows, backtest_history, backtest_simulated, chain_simulated,
                                   evaluation_seeds, iso_stamp, play_simulated)
from ..config.schema import TrainConfig
from ..data_split import DataSplit, day
from ..rundir.logger import HOLDOUT_COLUMNS

if TYPE_CHECKING:
    from envs.data import MarketData



@dataclass
class InstrumentsResult:
    """The hold-out backtests of several instruments, by instrument name; ``counted``: the names
    the means are taken over (None: all)."""

    results: dict[str, BacktestResult]
    counted: Optional[tuple[str, ...]] = None

    def mean(self, figure: str, of: str = "agent") -> Optional[float]:
        """Equal-weight mean of one figure over the counted instruments where it is defined (None if nowhere)."""
        names = self.results if self.counted is None else self.counted
        values = [getattr(getattr(self.results[n], of), figure) for n in names]
        values = [float(v) for v in values if v is not None and math.isfinite(v)]
        return sum(values) / len(values) if values else None


HoldoutResult = Union[BacktestResult, InstrumentsResult]


class Holdout:
    """The backtest rank 0 runs at every checkpoint: held-out bars of the instruments ``datas``
    (one split each), or held-out simulated episodes when ``datas`` is None. Greedy actions,
    the training env's costs."""

    def __init__(self, config: TrainConfig, datas: Optional[Sequence[MarketData]],
                 splits: Optional[Sequence[DataSplit]]) -> None:
        self.config = config
        self.datas = None if datas is None else list(datas)
        self.splits = None if splits is None else list(splits)
        self.env = config.env

    @property
    def instruments(self) -> int:
        """How many instruments are held out (0: simulated)."""
        return len(self.datas) if self.datas else 0

    def short_holdouts(self) -> dict[str, int]:
        """Instruments the cut leaves fewer than ``window + 2`` held-out bars, by name: their held-out bars."""
        if self.instruments < 2:
            return {}
        assert self.datas is not None and self.splits is not None
        return {instrument_name(d.source): s.holdout_bars for d, s in zip(self.datas, self.splits)
                if s.holdout_bars < self.env.window + 2}

    def counted(self) -> Optional[tuple[str, ...]]:
        """The instruments the hold-out means (and so best.pt) are taken over: those with at
        least ``window + 2`` held-out bars, or all when none has (None: all)."""
        short = self.short_holdouts()
        assert self.datas is not None or not short
        kept = tuple(n for n in map(instrument_name, (d.source for d in self.datas or ())) if n not in short)
        return kept if short and kept else None

    def warnings(self) -> list[str]:
        """One start-up line per instrument with a short hold-out: its numbers and what is done with it."""
        short, kept = self.short_holdouts(), self.counted()
        need = self.env.window + 2
        fate = ("its figures are in metrics.csv, but it is left out of the mean that picks best.pt" if kept else
                "every instrument has as few, so the mean counts them all")
        return [f"Warning: {name} keeps {bars} held-out bars after the one cut in time, fewer than window + 2 = "
                f"{need}; {fate} (lower --data-end to a date every instrument reaches, or raise --holdout)"
                for name, bars in short.items()]

    @classmethod
    def of(cls, config: TrainConfig, datas: Optional[Sequence[MarketData]], splits: Optional[Sequence[DataSplit]],
           rank: int = 0, device: torch.device = torch.device("cpu")) -> Optional["Holdout"]:
        """The run's hold-out as ``rank`` plays it on ``device``: rank 0's, another rank's share where
        every rank plays one (:meth:`played_by_every_rank`), else None; None for a run without one
        (``--holdout 0``, or ``--holdout-episodes 0``)."""
        if config.holdout <= 0 or (rank != 0 and not cls.played_by_every_rank(config, device)):
            return None
        if datas is not None:  # the splits keep at least MIN_HOLDOUT_BARS out whenever holdout > 0
            assert splits is not None
            return cls(config, datas, splits)
        return cls(config, None, None) if config.holdout_episodes > 0 else None

    @staticmethod
    def played_by_every_rank(config: TrainConfig, device: torch.device) -> bool:
        """Whether every rank plays a share of the hold-out: simulated episodes on CPU workers,
        where an episode's figures are the same bits whatever episodes it is played with."""
        return config.data is None and device.type == "cpu"

    def run(self, agent: RecurrentActorCritic, device: torch.device,
            comm: Optional[Comm] = None) -> Optional[HoldoutResult]:
        """The hold-out backtest of ``agent``'s current weights (touches no global RNG): one
        instrument's result, or every instrument's. Where several ranks of ``comm`` share it
        (:meth:`played_by_every_rank`), every rank calls this: each plays its share of the
        episodes, rank 0 gets the result, to the bit what one rank playing them all gives (one
        gather), and the others None."""
        if self.datas is None or self.splits is None:
            seeds = evaluation_seeds(self.config.seed, self.config.holdout_episodes)
            if comm is None or comm.world_size == 1 or not self.played_by_every_rank(self.config, device):
                return backtest_simulated(agent, self.env, len(seeds), self.config.seed, greedy=True, device=device)
            rows = play_simulated(agent, self.env, seeds[share(len(seeds), comm.rank, comm.world_size)],
                                  device=device)
            parts = comm.gather_objects(tuple(torch.from_numpy(a) for a in dataclasses.astuple(rows)))
            if comm.rank != 0:
                return None
            return chain_simulated(SimulatedRows.joined([SimulatedRows(*(t.numpy() for t in p)) for p in parts]),
                                   self.env)
        results = {instrument_name(data.source): backtest_history(agent, self.env, data, *split.backtest_span(),
                                                                  greedy=True, device=device)
                   for data, split in zip(self.datas, self.splits)}
        return InstrumentsResult(results, self.counted()) if len(results) > 1 else next(iter(results.values()))

    def extra_columns(self) -> tuple[str, ...]:
        """metrics.csv's per-instrument columns (none for one instrument or a simulated hold-out)."""
        if self.instruments < 2:
            return ()
        assert self.datas is not None
        return tuple(f"{instrument_name(d.source)}:{c}" for d in self.datas for c in HOLDOUT_COLUMNS)

    def describe(self) -> str:
        """The start-up line: what is held out and how best.pt is chosen."""
        if self.instruments > 1:
            assert self.datas is not None and self.splits is not None
            first = min(d.timestamps[s.split] for d, s in zip(self.datas, self.splits))
            parts = ", ".join(f"{instrument_name(d.source)} {s.holdout_bars} bars (training {s.train_span[1] - s.lo}"
                              + (f"; its bar of {day(d.timestamps[s.split - 1])} spans the cut: neither trained "
                                 f"on nor scored" if s.gap else "") + ")"
                              for d, s in zip(self.datas, self.splits))
            return (f"Hold-out: one cut in time for all {self.instruments} instruments: bars from {day(first)} on are "
                    f"kept out of training ({parts}). Each checkpoint is backtested on every instrument's hold-out; "
                    f"the line shows the mean over instruments, metrics.csv each one's figures; best.pt is the best "
                    f"mean hold-out return")
        if self.datas is not None and self.splits is not None:
            s, stamps = self.splits[0], self.datas[0].timestamps
            return (f"Hold-out: the last {s.holdout_bars} bars of {self.config.data} ({day(stamps[s.split])} to "
                    f"{day(stamps[s.hi - 1])}) are kept out of training; training uses bars "
                    f"{day(stamps[s.lo])} to {day(stamps[s.split - 1])}. Each checkpoint is backtested on the "
                    f"hold-out; best.pt is the best hold-out return")
        return (f"Hold-out: {self.config.holdout_episodes} simulated '{self.env.market}' episodes "
                f"on evaluation seeds no training "
                f"env draws, backtested at each checkpoint; best.pt is the best hold-out return")

    def evaluate_commands(self, checkpoint: str) -> list[str]:
        """The ``evaluate-ppo-lstm`` commands that run this backtest on ``checkpoint``: one,
        or one per instrument (each instrument's hold-out starts at its own bar)."""
        if self.instruments < 2:
            return [self.evaluate_command(checkpoint)]
        assert self.datas is not None and self.splits is not None
        out = []
        for data, split in zip(self.datas, self.splits):
            lo, hi = split.backtest_span()
            words = ["evaluate-ppo-lstm", "--checkpoint", checkpoint, "--data", data.source, "--start",
                     iso_stamp(data.timestamps[lo]), "--end", iso_stamp(data.timestamps[hi - 1])]
            if self.config.date_format:
                words += ["--date-format", self.config.date_format]
            out.append(" ".join(shlex.quote(w) for w in words))
        return out

    def evaluate_command(self, checkpoint: str) -> str:
        """The ``evaluate-ppo-lstm`` command that runs this backtest on ``checkpoint``."""
        words = ["evaluate-ppo-lstm", "--checkpoint", checkpoint]
        if self.datas is not None and self.splits is not None:
            lo, hi = self.splits[0].backtest_span()
            words += ["--data", str(self.config.data), "--start", iso_stamp(self.datas[0].timestamps[lo]),
                      "--end", iso_stamp(self.datas[0].timestamps[hi - 1])]
            if self.config.date_format:
                words += ["--date-format", self.config.date_format]
        else:
            words += ["--episodes", str(self.config.holdout_episodes), "--seed", str(self.config.seed)]
        return " ".join(shlex.quote(w) for w in words)


def _pct(value: Optional[float], signed: bool = True) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:+.2f}%" if signed else f"{value:.2f}%"


def holdout_score(result: HoldoutResult) -> float:
    """What best.pt is chosen by: the hold-out return (the mean over instruments)."""
    if isinstance(result, InstrumentsResult):
        mean = result.mean("total_return_pct")
        return -math.inf if mean is None else mean
    return result.agent.total_return_pct


def holdout_line(episode: int, result: HoldoutResult) -> str:
    """``Holdout @ episode N - Return: x%, Sharpe: y, Max DD: z%, Buy&Hold: w%`` (with several
    instruments, each the mean over them, and `` (mean of K instruments)``). On simulated episodes
    the return is the chained account's, and the episodes' own mean (and sd) follow it."""
    if isinstance(result, InstrumentsResult):
        sharpe = result.mean("sharpe")
        return (f"Holdout @ episode {episode} - Return: {_pct(result.mean('total_return_pct'))}, Sharpe: "
                f"{'-' if sharpe is None else f'{sharpe:.2f}'}, "
                f"Max DD: {_pct(result.mean('max_drawdown_pct'), signed=False)}, "
                f"Buy&Hold: {_pct(result.mean('total_return_pct', 'buy_and_hold'))} "
                f"(mean of {_counted(result)}{len(result.results)} instruments)")
    agent = result.agent
    sharpe = "-" if agent.sharpe is None else f"{agent.sharpe:.2f}"
    spread = result.per_episode()
    chained = hold = ""
    if spread is not None:
        own, held = spread
        sd = "" if own.std_return_pct is None else f", {_pct(own.std_return_pct, signed=False)} sd"
        chained = f" ({result.episodes} episodes chained; per episode {_pct(own.mean_return_pct)} mean{sd})"
        hold = f" (per episode {_pct(held.mean_return_pct)} mean)"
    return (f"Holdout @ episode {episode} - Return: {_pct(agent.total_return_pct)}{chained}, Sharpe: {sharpe}, "
            f"Max DD: {_pct(agent.max_drawdown_pct, signed=False)}, "
            f"Buy&Hold: {_pct(result.buy_and_hold.total_return_pct)}{hold}")


def _counted(result: InstrumentsResult) -> str:
    return "" if result.counted is None else f"{len(result.counted)} of "


def holdout_columns(result: HoldoutResult) -> dict[str, Any]:
    """The :data:`HOLDOUT_COLUMNS` of a metrics.csv row (None where a figure is undefined); with
    several instruments, their means, then each instrument's as ``<name>:<column>``."""
    if isinstance(result, InstrumentsResult):
        means = {"holdout_return_pct": result.mean("total_return_pct"), "holdout_sharpe": result.mean("sharpe"),
                 "holdout_max_drawdown_pct": result.mean("max_drawdown_pct"), "holdout_trades": result.mean("trades"),
                 "holdout_exposure_pct": result.mean("exposure_pct"),
                 "holdout_buy_and_hold_pct": result.mean("total_return_pct", "buy_and_hold")}
        columns = {k: (None if v is None else round(v, 6)) for k, v in means.items()}
        for name, one in result.results.items():
            columns.update({f"{name}:{k}": v for k, v in holdout_columns(one).items()})
        return columns
    agent = result.agent
    columns = {"holdout_return_pct": round(agent.total_return_pct, 6), "holdout_sharpe": agent.sharpe,
            "holdout_max_drawdown_pct": round(agent.max_drawdown_pct, 6), "holdout_trades": agent.trades,
            "holdout_exposure_pct": agent.exposure_pct,
            "holdout_buy_and_hold_pct": round(result.buy_and_hold.total_return_pct, 6)}
    assert tuple(columns) == HOLDOUT_COLUMNS
    return columns
