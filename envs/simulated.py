"""Seeded simulated OHLCV price paths.

``simulate(market, rngs, length)`` returns ``open/high/low/close/volume`` arrays,
each ``[n, length]`` float64, where path ``i`` draws ONLY from ``rngs[i]``: a batch
of n paths equals n separate one-path calls bit for bit. The per-path draws are
the only Python loop over paths; everything else is vectorised across paths
(elementwise ops, cumulative sums along time, a loop over time for OU/GARCH).

Processes (per bar, on log close; volatility ``sigma`` ~0.5-2 %):

* ``gbm``    martingale geometric Brownian motion (driftless: no free edge).
* ``ou``     Ornstein-Uhlenbeck mean reversion of log price towards its start.
* ``regime`` hidden up/down trend (drift +-0.2 %/bar, vol 1 %/bar) that persists
  (stay probability 0.98 per bar, ~50-bar regimes) and must be inferred from history.
* ``jump``   Merton jump diffusion (normal jump sizes, Bernoulli arrivals: at most
  one jump per bar), compensated to be a martingale.
* ``garch``  GARCH(1,1) volatility clustering (martingale).
* ``mixed``  one of the five per path, with randomised parameters.

Every path has a random start price (log-uniform 0.5..2000: FX-like and
stock-like scales both occur). Bars open at the previous close (no gaps).
Draw order per path: 8 uniforms (parameters), ``length`` normals (shocks), the
process's extra draws, then (only with ``ohlcv=True``) 3x``length`` normals for
the wicks and volume -- so ``ohlcv=False`` gives the same open/close.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

PROCESSES: tuple[str, ...] = ("gbm", "ou", "regime", "jump", "garch")
GBM, OU, REGIME, JUMP, GARCH = range(5)
FIELDS: tuple[str, ...] = ("open", "high", "low", "close", "volume")

# Default parameters (per bar) used unless the market is "mixed".
DEFAULTS: dict[str, dict[str, float]] = {
    "gbm": {"sigma": 0.01},
    "ou": {"sigma": 0.01, "theta": 0.05},
    "regime": {"sigma": 0.01, "drift": 0.002, "persistence": 0.98},
    "jump": {"sigma": 0.008, "rate": 0.02, "jump_mean": 0.0, "jump_std": 0.04},
    "garch": {"sigma": 0.01, "alpha": 0.10, "beta": 0.85},
}

_N_UNIFORMS = 8  # 0 start price, 1 volume, 2 sigma, 3-5 process params, 6 process, 7 regime start
_LOG_PRICE = (math.log(0.5), math.log(2000.0))
_LOG_VOLUME = (math.log(1e3), math.log(1e6))
_LOG_SIGMA = (math.log(0.005), math.log(0.02))


def _params(process: int, u: np.ndarray, randomise: bool) -> dict[str, np.ndarray]:
    """Parameters [m] of one process's paths from their uniforms u [8, m]."""
    name = PROCESSES[process]
    m = u.shape[1]
    p = {k: np.full(m, v) for k, v in DEFAULTS[name].items()}
    p["log_p0"] = _LOG_PRICE[0] + (_LOG_PRICE[1] - _LOG_PRICE[0]) * u[0]
    p["log_volume"] = _LOG_VOLUME[0] + (_LOG_VOLUME[1] - _LOG_VOLUME[0]) * u[1]
    if randomise:
        sigma = np.exp(_LOG_SIGMA[0] + (_LOG_SIGMA[1] - _LOG_SIGMA[0]) * u[2])
        p["sigma"] = sigma
        if process == OU:
            p["theta"] = 0.02 + 0.08 * u[3]
        elif process == REGIME:
            p["drift"] = (0.15 + 0.15 * u[3]) * sigma
            p["persistence"] = 0.95 + 0.04 * u[4]
        elif process == JUMP:
            p["rate"] = 0.005 + 0.045 * u[3]
            p["jump_std"] = (2.0 + 3.0 * u[4]) * sigma
            p["jump_mean"] = (2.0 * u[5] - 1.0) * sigma
        elif process == GARCH:
            p["alpha"] = 0.05 + 0.10 * u[3]
            p["beta"] = np.minimum(0.75 + 0.15 * u[4], 0.97 - p["alpha"])
    if process == REGIME:
        p["start"] = np.where(u[7] < 0.5, 1.0, -1.0)
    return p


def _log_returns(process: int, p: dict[str, np.ndarray], z: np.ndarray, extra: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Close-to-close log returns [m, length] and per-bar vol ([m, length] or [m, 1])."""
    sigma = p["sigma"][:, None]
    vol = sigma
    if process == GBM:
        r = sigma * z
        r -= 0.5 * sigma * sigma
    elif process == OU:
        keep = 1.0 - p["theta"]
        shocks = np.ascontiguousarray((sigma * z).T)  # [length, m]
        dev = np.zeros((z.shape[1] + 1, z.shape[0]))
        for t in range(z.shape[1]):
            dev[t + 1] = keep * dev[t] + shocks[t]
        r = np.ascontiguousarray((dev[1:] - dev[:-1]).T)
    elif process == REGIME:
        flips = np.where(extra["switch"] < 1.0 - p["persistence"][:, None], -1.0, 1.0)
        state = np.cumprod(flips, axis=1)
        state *= p["start"][:, None] * p["drift"][:, None]  # +-drift
        r = sigma * z
        r -= 0.5 * sigma * sigma
        r += state
    elif process == JUMP:
        mean, std = p["jump_mean"], p["jump_std"]
        compensator = p["rate"] * (np.exp(mean + 0.5 * std * std) - 1.0)
        hit = extra["arrival"] < p["rate"][:, None]  # at most one jump per bar
        jumps = np.where(hit, mean[:, None] + std[:, None] * extra["jump_z"], 0.0)
        r = sigma * z - 0.5 * sigma * sigma - compensator[:, None] + jumps
    elif process == GARCH:
        alpha, beta = p["alpha"], p["beta"]
        omega = (1.0 - alpha - beta) * p["sigma"] * p["sigma"]
        zt = np.ascontiguousarray(z.T)  # [length, m]
        var = np.empty_like(zt)
        eps = np.empty_like(zt)
        var[0] = p["sigma"] * p["sigma"]
        eps[0] = np.sqrt(var[0]) * zt[0]
        for t in range(1, len(zt)):
            var[t] = omega + alpha * eps[t - 1] * eps[t - 1] + beta * var[t - 1]
            eps[t] = np.sqrt(var[t]) * zt[t]
        r = np.ascontiguousarray((eps - 0.5 * var).T)
        vol = np.ascontiguousarray(np.sqrt(var).T)
    else:
        raise ValueError(f"unknown process index {process}")
    return r, vol


def simulate(
    market: str, rngs: Sequence[np.random.Generator], length: int, ohlcv: bool = True
) -> dict[str, np.ndarray]:
    """One price path per generator, each a function of ``rngs[i]`` alone.

    Returns ``open, high, low, close, volume`` (``open, close`` when ``ohlcv`` is
    False), each ``[len(rngs), length]`` float64, all > 0, high >= max(open, close),
    low <= min(open, close).
    """
    if market != "mixed" and market not in PROCESSES:
        raise ValueError(f"unknown market {market!r}; choose one of {', '.join(PROCESSES + ('mixed',))}")
    if length < 1:
        raise ValueError(f"length must be at least 1, got {length}")
    n = len(rngs)
    randomise = market == "mixed"
    fixed = -1 if randomise else PROCESSES.index(market)
    u = np.empty((n, _N_UNIFORMS))
    z = np.empty((n, length))
    proc = np.full(n, fixed, np.int64)
    extra: dict[str, np.ndarray] = {}
    if fixed in (-1, REGIME):
        extra["switch"] = np.empty((n, length))
    if fixed in (-1, JUMP):
        extra["arrival"] = np.empty((n, length))
        extra["jump_z"] = np.empty((n, length))
    aux = np.empty((n, 3, length)) if ohlcv else None
    pick = len(PROCESSES)
    for i, rng in enumerate(rngs):  # per-path draws only
        rng.random(out=u[i])
        rng.standard_normal(out=z[i])
        p = fixed if fixed >= 0 else min(int(u[i, 6] * pick), pick - 1)
        proc[i] = p
        if p == REGIME:
            rng.random(out=extra["switch"][i])
        elif p == JUMP:
            rng.random(out=extra["arrival"][i])
            rng.standard_normal(out=extra["jump_z"][i])
        if aux is not None:
            rng.standard_normal(out=aux[i])
    u = np.ascontiguousarray(u.T)  # [8, n]
    fields = FIELDS if ohlcv else ("open", "close")
    out = {f: np.empty((n, length)) for f in fields} if fixed < 0 else {}
    for process in range(len(PROCESSES)) if fixed < 0 else (fixed,):
        rows = np.flatnonzero(proc == process) if fixed < 0 else slice(None)  # [m] or all
        if fixed < 0 and len(rows) == 0:
            continue
        needs = {REGIME: ("switch",), JUMP: ("arrival", "jump_z")}.get(process, ())
        p = _params(process, u[:, rows], randomise)
        r, vol = _log_returns(process, p, z[rows], {k: extra[k][rows] for k in needs})
        close = np.cumsum(r, axis=1)
        close += p["log_p0"][:, None]
        np.exp(close, out=close)
        open_ = np.empty_like(close)
        open_[:, 0] = np.exp(p["log_p0"])
        open_[:, 1:] = close[:, :-1]
        group = {"open": open_, "close": close}
        if aux is not None:
            a = aux[rows]
            half = 0.5 * vol
            group["high"] = np.maximum(open_, close) * np.exp(half * np.abs(a[:, 0]))
            group["low"] = np.minimum(open_, close) * np.exp(-(half * np.abs(a[:, 1])))
            group["volume"] = np.exp(p["log_volume"][:, None] + 0.5 * a[:, 2]) * (1.0 + np.abs(r) / vol)
        if fixed >= 0:
            return group
        for f in fields:
            out[f][rows] = group[f]
    return out
