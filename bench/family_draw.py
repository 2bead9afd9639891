"""The market family of ``bench/market_family.py``: variants of each simulated process, drawn
from a fixed seed, and the CSV files of each.

Kinds (``KINDS``) and the parameters each variant draws (log-uniform unless said; the
ranges are ``RANGES``; every kind also draws its fee, 1 to 20 bps, slippage 0):

* ``regime``: a hidden up/down trend (``envs.markets.processes``' regime process) with
  volatility ``sigma`` 0.5-2 %/bar, drift ``drift_over_sigma`` x sigma (uniform 0.1-0.3)
  and a mean regime length ``duration`` of 20-200 bars (``persistence = 1 - 1/duration``).
* ``ou``: Ornstein-Uhlenbeck mean reversion of the log price to its start, ``sigma``
  0.5-2 %/bar, reversion speed ``theta`` 0.01-0.2 (half-lives of 69 to 3.5 bars).
* ``signal``: the edge is only in a feature column (``write_signal_csv``): an AR(1)
  ``signal`` whose ``half_life`` is 2-200 bars (fast to slow), next bar's log return
  ``strength x noise_sd x signal + noise_sd x e``, ``strength`` (the per-bar information
  ratio) 0.02-0.3 (weak to strong), ``noise_sd`` 0.5-2 %; beside it a ``noise`` column of the
  same law, related to nothing.

A draw that cannot pay its costs is drawn again (its fee kept): a position's characteristic
move (regime: drift x duration; ou: the deviation's stationary sd, sigma / sqrt(2 theta);
signal: the edge one unit of signal carries until it decays, edge / (1 - phi)) must be at
least ``EDGE_OVER_COST`` fees, and a regime must be visible in the bars (duration x
(drift / sigma)^2 >= 1).

Variant ``i`` of a kind draws from ``np.random.default_rng([FAMILY_SEED, kind, i])`` alone, so
the first N variants are the same whatever N. The split is fixed: every ``HOLD_OUT_EVERY``-th
variant (i = 3, 7, 11, 15) is HELD OUT, a test set no default may be chosen on; the rest
are the tuning set.

Files: a ``TRAIN_BARS``-bar training file and, after it on the same path, a test file of
``TEST_WARMUP`` bars (the features' and the filter's warm-up, never scored) then ``CHUNKS``
episodes of ``CHUNK`` bars, the bars scored. Every path starts at ``START_PRICE`` (the ou kind's
mean). The signal kind's files hold ``Date,Open,High,Low,Close,Volume,signal,noise``; the
others' the first six. ``write_extra_tests`` adds test files of the same law on fresh paths,
each with its own warm-up, to score more episodes than one test file holds.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import math  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from bench.learning_markets import write_process_csv, write_signal_csv  # noqa: E402

FAMILY_SEED = 58
KINDS: tuple[str, ...] = ("regime", "ou", "signal")
VARIANTS_PER_KIND = 16
HOLD_OUT_EVERY = 4  # variants HOLD_OUT_EVERY - 1, 2 HOLD_OUT_EVERY - 1, ... are held out
EDGE_OVER_COST = 5.0
MAX_DRAWS = 1000
FEATURES = "signal,noise"  # the signal kind's columns, as --features takes them
TRAIN_BARS = 60_000
TEST_WARMUP = 4_096
CHUNK, CHUNKS = 128, 160
TEST_BARS = TEST_WARMUP + CHUNK * CHUNKS + 1  # the last episode's last bar
START_PRICE = 30.0  # every path's first open: the ou kind's mean

# name: (low, high, log-uniform?)
RANGES: dict[str, dict[str, tuple[float, float, bool]]] = {
    "all": {"fee_bps": (1.0, 20.0, True)},
    "regime": {"sigma": (0.005, 0.02, True), "drift_over_sigma": (0.1, 0.3, False), "duration": (20.0, 200.0, True)},
    "ou": {"sigma": (0.005, 0.02, True), "theta": (0.01, 0.2, True)},
    "signal": {"half_life": (2.0, 200.0, True), "strength": (0.02, 0.3, True), "noise_sd": (0.005, 0.02, True)},
}


@dataclass(frozen=True)
class Variant:
    """One member of the family: its kind, index, drawn parameters and fee."""

    kind: str
    index: int
    fee_bps: float
    params: dict[str, float] = field(hash=False)
    redraws: int = 0

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.index:02d}"

    @property
    def held_out(self) -> bool:
        return self.index % HOLD_OUT_EVERY == HOLD_OUT_EVERY - 1

    @property
    def split(self) -> str:
        return "held-out" if self.held_out else "tuning"

    @property
    def data_seed(self) -> int:
        """The seed of this variant's price path (distinct for every kind and index)."""
        return FAMILY_SEED * 1_000_000 + KINDS.index(self.kind) * 1000 + self.index

    def process_params(self) -> dict[str, float]:
        """The process's own parameters (``processes.DEFAULTS`` names; the signal's AR and edge)."""
        p = self.params
        if self.kind == "regime":
            return {"sigma": p["sigma"], "drift": p["drift_over_sigma"] * p["sigma"],
                    "persistence": 1.0 - 1.0 / p["duration"]}
        if self.kind == "ou":
            return {"sigma": p["sigma"], "theta": p["theta"]}
        return {"phi": 0.5 ** (1.0 / p["half_life"]), "edge": p["strength"] * p["noise_sd"], "noise_sd": p["noise_sd"]}

    def flags(self) -> list[str]:
        """The market's own flags: its fee, no slippage, and the signal kind's columns."""
        out = ["--fee-bps", f"{self.fee_bps:.6g}", "--slippage-bps", "0"]
        return out + (["--features", FEATURES] if self.kind == "signal" else [])

    def describe(self) -> str:
        """A short line of the parameters, as the table prints them."""
        p = self.params
        if self.kind == "regime":
            text = f"sigma {100 * p['sigma']:.2f}% drift {p['drift_over_sigma']:.2f}sd len {p['duration']:.0f}"
        elif self.kind == "ou":
            text = f"sigma {100 * p['sigma']:.2f}% theta {p['theta']:.3f}"
        else:
            text = f"half-life {p['half_life']:.0f} strength {p['strength']:.3f} noise {100 * p['noise_sd']:.2f}%"
        return f"{text} fee {self.fee_bps:.1f}bps"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "index": self.index, "split": self.split,
                "fee_bps": self.fee_bps, "params": self.params, "process_params": self.process_params(),
                "redraws": self.redraws}


def _uniform(rng: np.random.Generator, low: float, high: float, log: bool) -> float:
    u = float(rng.random())
    return math.exp(math.log(low) + u * (math.log(high) - math.log(low))) if log else low + u * (high - low)


def characteristic_move(kind: str, process: dict[str, float]) -> float:
    """The log move one position of a known-model rule can hope for (see the module doc)."""
    if kind == "regime":
        return process["drift"] / (1.0 - process["persistence"])
    if kind == "ou":
        return process["sigma"] / math.sqrt(2.0 * process["theta"])
    return process["edge"] / (1.0 - process["phi"])


def tradeable(kind: str, params: dict[str, float], fee_bps: float) -> bool:
    """Whether a draw can pay its costs (and, for a regime, be seen): see the module doc."""
    probe = Variant(kind, 0, fee_bps, params)
    if characteristic_move(kind, probe.process_params()) < EDGE_OVER_COST * fee_bps / 1e4:
        return False
    return kind != "regime" or params["duration"] * params["drift_over_sigma"] ** 2 >= 1.0


def draw_variant(kind: str, index: int, seed: int = FAMILY_SEED) -> Variant:
    """Variant ``index`` of ``kind``, a function of (seed, kind, index) alone."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose from {', '.join(KINDS)}")
    rng = np.random.default_rng([seed, KINDS.index(kind), index])
    fee = _uniform(rng, *RANGES["all"]["fee_bps"])
    for redraws in range(MAX_DRAWS):
        params = {name: _uniform(rng, *spec) for name, spec in RANGES[kind].items()}
        if tradeable(kind, params, fee):
            return Variant(kind, index, fee, params, redraws)
    raise RuntimeError(f"{kind} variant {index}: no tradeable draw in {MAX_DRAWS}")


def draw_family(seed: int = FAMILY_SEED, per_kind: int = VARIANTS_PER_KIND,
                kinds: tuple[str, ...] = KINDS) -> list[Variant]:
    """Every variant of the family, kind by kind."""
    return [draw_variant(kind, i, seed) for kind in kinds for i in range(per_kind)]


def pick(variants: list[Variant], split: str, per_kind: int) -> list[Variant]:
    """The first ``per_kind`` variants of each kind in ``split`` ("tuning", "held-out" or "all")."""
    out: list[Variant] = []
    for kind in dict.fromkeys(v.kind for v in variants):
        mine = [v for v in variants if v.kind == kind and split in ("all", v.split)]
        out += mine[:per_kind]
    return out


def write_variant(variant: Variant, directory: Path) -> tuple[Path, Path]:
    """The training and test CSV files of ``variant`` in ``directory``."""
    p = variant.process_params()
    if variant.kind == "signal":
        train, test, _, _ = write_signal_csv(directory, variant.data_seed, phi=p["phi"], edge=p["edge"],
                                             noise_sd=p["noise_sd"], train_bars=TRAIN_BARS, test_bars=TEST_BARS,
                                             prefix=variant.name, start_price=START_PRICE)
        return train, test
    return write_process_csv(directory, variant.data_seed, variant.kind, p, TRAIN_BARS, TEST_BARS, variant.name,
                             START_PRICE)


def write_extra_tests(variant: Variant, directory: Path, count: int) -> list[Path]:
    """``count`` more test files of ``variant``: fresh paths of the same process and parameters,
    ``TEST_BARS`` bars each (its own ``TEST_WARMUP`` bars, then ``CHUNKS`` scored episodes), from
    seeds no variant's path uses; the training and first test files are left as they are."""
    p = variant.process_params()
    out = []
    for j in range(1, count + 1):
        seed, prefix = variant.data_seed * 1000 + j, f"{variant.name}-extra{j:02d}"
        if variant.kind == "signal":
            _, test, _, _ = write_signal_csv(directory, seed, phi=p["phi"], edge=p["edge"], noise_sd=p["noise_sd"],
                                             train_bars=0, test_bars=TEST_BARS, prefix=prefix,
                                             start_price=START_PRICE)
        else:
            _, test = write_process_csv(directory, seed, variant.kind, p, 0, TEST_BARS, prefix, START_PRICE)
        out.append(test)
    return out


def chunk_bounds(first: int = TEST_WARMUP, length: int = CHUNK, count: int = CHUNKS) -> list[tuple[int, int]]:
    """The scored episodes of a test file: bars (start, end) of each, one decision per bar
    start..end-2 (as ``backtest_history(start=, end=)`` takes them)."""
    return [(first + k * length, first + (k + 1) * length + 1) for k in range(count)]
