"""Seeded simulated OHLCV price paths.

``simulate(market, rngs, length)`` returns ``open/high/low/close/volume`` arrays,
each ``[n, length]`` float64, where path ``i`` draws ONLY from ``rngs[i]``: a batch
of n paths equals n separate one-path calls bit for bit. The per-path draws are
the only Python loop over paths; everything else is vectorised across paths
(elementwise ops; cumulative sums/products along time, which also solve the
OU and GARCH recursions in closed form). ``paths_from_noise`` is that vectorised
part alone: ``envs.markets.simulated`` feeds it variates it drew ahead of time.

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

from envs.accumulate import accumulate

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

_BLOCK = 256  # bars per closed-form block of the OU/GARCH recursions
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


def _log_returns(
    process: int, p: dict[str, np.ndarray], z: np.ndarray, ext: np.ndarray | None, jump_z: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Close-to-close log returns [m, length] and per-bar vol ([m, length] or [m, 1]).

    ``ext`` holds the process's extra uniforms (regime switches, jump arrivals) and
    ``jump_z`` the jump sizes' normals. The OU and GARCH recursions are solved in
    closed form along time, in blocks of ``_BLOCK`` bars: no Python loop over bars.
    """
    sigma = p["sigma"][:, None]
    vol = sigma
    if process == GBM:
        r = sigma * z
        r -= 0.5 * sigma * sigma
    elif process == OU:
        # dev[t+1] = keep * dev[t] + shock[t]; within a block of bars starting at s:
        # dev[t+1] = keep^(t-s) * (keep * dev[s] + sum_{s<=k<=t} shock[k] * keep^-(k-s))
        keep = 1.0 - p["theta"]
        shocks = sigma * z
        dev = np.empty_like(shocks)  # dev[:, t] = deviation after shock t
        before = np.zeros(len(z))
        for s in range(0, z.shape[1], _BLOCK):
            e = min(s + _BLOCK, z.shape[1])
            powers = np.multiply.outer(np.log(keep), np.arange(e - s, dtype=np.float64))
            np.exp(powers, out=powers)  # keep^j >= 0.9^_BLOCK: no underflow
            block = dev[:, s:e]
            np.divide(shocks[:, s:e], powers, out=block)
            block[:, 0] += keep * before
            np.cumsum(block, axis=1, out=block)
            block *= powers
            before = block[:, -1]
        r = shocks
        r[:, 1:] -= p["theta"][:, None] * dev[:, :-1]  # shock - theta * deviation before it
    elif process == REGIME:
        r = sigma * z
        r -= 0.5 * sigma * sigma
        r += _regime_drift(p, ext)
    elif process == JUMP:
        mean, std = p["jump_mean"], p["jump_std"]
        compensator = p["rate"] * (np.exp(mean + 0.5 * std * std) - 1.0)
        hit = ext < p["rate"][:, None]  # at most one jump per bar
        jumps = np.where(hit, mean[:, None] + std[:, None] * jump_z, 0.0)
        r = sigma * z - 0.5 * sigma * sigma - compensator[:, None] + jumps
    elif process == GARCH:
        # var[t] = omega + alpha eps[t-1]^2 + beta var[t-1] = omega + a[t] var[t-1], a[t] = alpha z[t-1]^2 + beta;
        # within a block of bars starting at s: var[t] = A[t] (var[s-1] + omega sum_{s<=k<=t} 1/A[k]),
        # A[t] = a[s] ... a[t] >= beta^_BLOCK > 0
        alpha, beta = p["alpha"][:, None], p["beta"][:, None]
        var0 = p["sigma"] * p["sigma"]
        omega = (1.0 - alpha - beta) * var0[:, None]
        prod = np.multiply(z[:, :-1], z[:, :-1])
        prod *= alpha
        prod += beta  # prod[:, t-1] = a[t]
        var = np.empty_like(z)
        var[:, 0] = var0
        for s in range(1, z.shape[1], _BLOCK):
            e = min(s + _BLOCK, z.shape[1])
            a = prod[:, s - 1 : e - 1]
            np.cumprod(a, axis=1, out=a)
            block = var[:, s:e]
            np.divide(1.0, a, out=block)
            np.cumsum(block, axis=1, out=block)
            block *= omega
            block += var[:, s - 1 : s]
            block *= a
        vol = np.sqrt(var)
        r = vol * z  # eps
        r -= 0.5 * var
    else:
        raise ValueError(f"unknown process index {process}")
    return r, vol


def _regime_drift(p: dict[str, np.ndarray], ext: np.ndarray) -> np.ndarray:
    """The hidden drift [m, length] (+-drift) of regime paths: bar t's state is the start
    state flipped at every bar k <= t whose uniform ``ext[:, k]`` is below 1 - persistence."""
    flips = np.where(ext < 1.0 - p["persistence"][:, None], -1.0, 1.0)
    state = np.cumprod(flips, axis=1)
    state *= p["start"][:, None] * p["drift"][:, None]
    return state


def regime_drift(market: str, u: np.ndarray, ext: np.ndarray) -> np.ndarray:
    """The hidden per-bar drift [m, length] of m regime paths (the ``state`` term of their
    log returns), from their parameter uniforms u [m, 8] and extra uniforms ext [m, length].

    ``market`` is "regime" or "mixed" (randomised parameters; every row must be a regime
    path). For baselines that know the hidden state (``bench/learning.py``).
    """
    return _regime_drift(_params(REGIME, u.T, market == "mixed"), ext)


def check_market(market: str) -> None:
    """Raise ValueError for a market name that is not a process or "mixed"."""
    if market != "mixed" and market not in PROCESSES:
        raise ValueError(f"unknown market {market!r}; choose one of {', '.join(PROCESSES + ('mixed',))}")


def process_index(market: str, u: np.ndarray) -> np.ndarray:
    """Process [m] int64 of each path from its 8 parameter uniforms u [m, 8]."""
    if market != "mixed":
        return np.full(len(u), PROCESSES.index(market), np.int64)
    pick = len(PROCESSES)
    proc = (u[:, 6] * pick).astype(np.int64)
    np.minimum(proc, pick - 1, out=proc)
    return proc


def process_groups(market: str, proc: np.ndarray) -> list[tuple[int, np.ndarray | slice]]:
    """(process, rows) of each process present in ``proc`` [m]; rows is a slice when all."""
    if market != "mixed":
        return [(PROCESSES.index(market), slice(None))]
    groups: list[tuple[int, np.ndarray | slice]] = []
    for process in range(len(PROCESSES)):
        rows = np.flatnonzero(proc == process)
        if len(rows) == len(proc):
            groups.append((process, slice(None)))
        elif len(rows):
            groups.append((process, rows))
    return groups


def _group_log_returns(
    market: str, process: int, u: np.ndarray, z: np.ndarray, ext: np.ndarray | None, jump_z: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    p = _params(process, u.T, market == "mixed")
    return _log_returns(process, p, z, ext, jump_z)


def process_log_returns(
    market: str, process: int, u: np.ndarray, z: np.ndarray, ext: np.ndarray | None, jump_z: np.ndarray | None
) -> np.ndarray:
    """Log returns [m, length] of m paths of one process (as ``paths_from_noise`` computes them).

    ``u`` [m, 8] parameter uniforms, ``z`` [m, length] shocks, ``ext`` extra uniforms
    (regime/jump only), ``jump_z`` jump normals (jump only).
    """
    return _group_log_returns(market, process, u, z, ext, jump_z)[0]


def log_first_open(u: np.ndarray) -> np.ndarray:
    """Log of the first open [m] of each path from its parameter uniforms u [m, 8]."""
    return _LOG_PRICE[0] + (_LOG_PRICE[1] - _LOG_PRICE[0]) * u[:, 0]


def paths_from_noise(
    market: str,
    u: np.ndarray,
    z: np.ndarray,
    ext: np.ndarray | None = None,
    jump_z: np.ndarray | None = None,
    aux: np.ndarray | None = None,
    proc: np.ndarray | None = None,
    with_open: bool = True,
    prices: bool = True,
) -> dict[str, np.ndarray]:
    """Price paths [m, length] from their variates, vectorised across paths.

    ``u`` [m, 8] parameter uniforms, ``z`` [m, length] shocks, ``ext`` [m, length]
    extra uniforms (read only in regime/jump rows), ``jump_z`` [m, length] jump
    normals (read only in jump rows), ``aux`` [m, 3, length] wick/volume normals
    (only with it are high/low/volume returned); ``proc`` defaults to
    ``process_index(market, u)``. Row i depends on row i of the inputs alone.
    Returns ``open`` (unless ``with_open`` is False), ``close`` (and ``high``, ``low``,
    ``volume``) [m, length], ``logret`` [m, length] (the log returns whose running sum
    from ``log(first_open)`` is ``log(close)``) and ``first_open`` [m]; with ``prices``
    False only ``logret`` and ``log_first_open`` [m].
    """
    check_market(market)
    m, length = z.shape
    if proc is None:
        proc = process_index(market, u)
    r = np.empty((m, length))
    vol = np.empty((m, length)) if aux is not None else None
    for process, rows in process_groups(market, proc):
        e = ext[rows] if process in (REGIME, JUMP) else None
        j = jump_z[rows] if process == JUMP else None
        rk, vk = _group_log_returns(market, process, u[rows], z[rows], e, j)
        r[rows] = rk
        if vol is not None:
            vol[rows] = vk
    log_p0 = log_first_open(u)
    if not prices:
        return {"logret": r, "log_first_open": log_p0}
    close = accumulate(np.add, r)
    close += log_p0[:, None]
    np.exp(close, out=close)
    out = {"close": close, "logret": r, "first_open": np.exp(log_p0)}
    if with_open or aux is not None:
        open_ = np.empty_like(close)
        open_[:, 0] = out["first_open"]
        open_[:, 1:] = close[:, :-1]
        out["open"] = open_
    if aux is not None:
        log_volume = _LOG_VOLUME[0] + (_LOG_VOLUME[1] - _LOG_VOLUME[0]) * u[:, 1]
        half = 0.5 * vol
        out["high"] = np.maximum(open_, close) * np.exp(half * np.abs(aux[:, 0]))
        out["low"] = np.minimum(open_, close) * np.exp(-(half * np.abs(aux[:, 1])))
        out["volume"] = np.exp(log_volume[:, None] + 0.5 * aux[:, 2]) * (1.0 + np.abs(r) / vol)
    return out


def simulate(
    market: str, rngs: Sequence[np.random.Generator], length: int, ohlcv: bool = True
) -> dict[str, np.ndarray]:
    """One price path per generator, each a function of ``rngs[i]`` alone.

    Returns ``open, high, low, close, volume`` (``open, close`` when ``ohlcv`` is
    False), each ``[len(rngs), length]`` float64, all > 0, high >= max(open, close),
    low <= min(open, close).
    """
    check_market(market)
    if length < 1:
        raise ValueError(f"length must be at least 1, got {length}")
    n = len(rngs)
    u = np.empty((n, _N_UNIFORMS))
    z = np.empty((n, length))
    ext = np.empty((n, length)) if market in ("mixed", "regime", "jump") else None
    jump_z = np.empty((n, length)) if market in ("mixed", "jump") else None
    aux = np.empty((n, 3, length)) if ohlcv else None
    proc = np.empty(n, np.int64)
    for i, rng in enumerate(rngs):  # per-path draws only
        rng.random(out=u[i])
        rng.standard_normal(out=z[i])
        proc[i] = p = process_index(market, u[i : i + 1])[0]
        if p == REGIME:
            rng.random(out=ext[i])
        elif p == JUMP:
            rng.random(out=ext[i])
            rng.standard_normal(out=jump_z[i])
        if aux is not None:
            rng.standard_normal(out=aux[i])
    out = paths_from_noise(market, u, z, ext, jump_z, aux, proc)
    return {f: out[f] for f in (FIELDS if ohlcv else ("open", "close"))}
