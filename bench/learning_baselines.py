"""Baseline trading rules for ``bench/learning.py``: target positions from price paths.

Every rule maps episodes' bars to target positions in lots, one per decision, with the
env's timing: decision ``j`` (``j = 0..L-1``) is taken after bar ``t = W + j`` closes,
may read bars ``0..t`` only, and fills at bar ``t+1``'s open. Arrays are ``[m, B]``
(m episodes of ``B = W + L + 1`` bars) in, ``[m, L]`` lots out. The rules do not trade
themselves: ``bench/learning.py`` drives the env's own ``TradingCore`` with them, so
fills, fees and slippage are the env's.

* ``buy_and_hold``: +K from the first decision.
* ``ma_crossover``: +K while the fast (10) MA of closes is above the slow (40) MA,
  else -K (0 with ``no_short``). While fewer than ``slow`` bars exist (a simulated
  episode's first decisions), each MA averages the bars there are.
* ``random_positions``: a uniformly random action at every decision (seeded).
* ``regime_oracle``: knows the hidden drift of the current bar ``t`` (not of ``t+1``,
  which a 2 % switch may change) and holds its sign, +-K.
* ``regime_filter``: the HMM forward filter with the process's true parameters
  (``p_stay``, ``drift``, ``sigma``); its signal is the expected next-bar log return,
  ``drift * (2 P(up at t+1 | bars <= t) - 1) - sigma^2 / 2``.
* ``ou_signal``: the OU process's expected next-bar log return given its known mean
  (the path's first open, or a given one) and rate: ``-theta * (log close_t - log open_0)``.
* ``hysteresis``: a signal to positions: +K once it exceeds ``+threshold``, -K once it
  falls below ``-threshold`` (0 instead with ``no_short``), else the position held;
  flat until the first crossing.
"""
from __future__ import annotations

import numpy as np


def decision_bars(window: int, length: int) -> np.ndarray:
    """Bar index ``t = W + j`` of each decision ``j`` [L]."""
    return window + np.arange(length)


def buy_and_hold(m: int, length: int, max_position: int = 1) -> np.ndarray:
    """+K lots at every decision [m, L]."""
    return np.full((m, length), float(max_position))


def moving_average(close: np.ndarray, n: int) -> np.ndarray:
    """Trailing mean [m, B] of the last ``n`` closes at each bar (of the bars there are before bar n-1)."""
    csum = np.cumsum(close, axis=1)
    out = np.empty_like(csum)
    out[:, :n] = csum[:, :n] / np.arange(1, min(n, close.shape[1]) + 1)
    out[:, n:] = (csum[:, n:] - csum[:, :-n]) / n
    return out


def ma_crossover(close: np.ndarray, window: int, length: int, fast: int = 10, slow: int = 40,
                 max_position: int = 1, no_short: bool = False) -> np.ndarray:
    """+K while MA(fast) > MA(slow) at the decision bar, else -K (0 with ``no_short``) [m, L]."""
    t = decision_bars(window, length)
    up = moving_average(close, fast)[:, t] > moving_average(close, slow)[:, t]
    return np.where(up, float(max_position), 0.0 if no_short else -float(max_position))


def random_positions(m: int, length: int, rng: np.random.Generator, max_position: int = 1,
                     no_short: bool = False) -> np.ndarray:
    """A uniformly random target at every decision [m, L]."""
    low = 0 if no_short else -max_position
    return rng.integers(low, max_position + 1, size=(m, length)).astype(np.float64)


def regime_oracle(drift: np.ndarray, window: int, length: int, max_position: int = 1) -> np.ndarray:
    """+-K by the sign of the hidden drift of the decision bar [m, L] (``drift`` [m, B])."""
    return np.sign(drift[:, decision_bars(window, length)]) * float(max_position)


def forward_filter(logret: np.ndarray, p_stay: float, drift: float, sigma: float) -> np.ndarray:
    """P(up state at bar b | log returns of bars 0..b) [m, B], from a 50/50 prior.

    Model: the state is +-1, kept with ``p_stay`` per bar (the switch applies before
    the bar's return); a bar's log return is normal, mean ``state * drift - sigma^2/2``,
    sd ``sigma``.
    """
    m, B = logret.shape
    post = np.empty((m, B))
    prior = np.full(m, 0.5)  # P(up) of bar 0
    shift = -0.5 * sigma * sigma
    for b in range(B):
        x = logret[:, b] - shift
        # likelihood ratio up/down: exp(((x+d)^2 - (x-d)^2) / 2s^2) = exp(2xd / s^2)
        llr = np.clip(2.0 * x * drift / (sigma * sigma), -50.0, 50.0)
        up = prior * np.exp(llr)
        post[:, b] = up / (up + 1.0 - prior)
        prior = p_stay * post[:, b] + (1.0 - p_stay) * (1.0 - post[:, b])
    return post


def regime_filter(open_: np.ndarray, close: np.ndarray, window: int, length: int, p_stay: float = 0.98,
                  drift: float = 0.002, sigma: float = 0.01) -> np.ndarray:
    """Expected next-bar log return [m, L] at each decision, by the forward filter."""
    post = forward_filter(np.log(close / open_), p_stay, drift, sigma)[:, decision_bars(window, length)]
    up_next = p_stay * post + (1.0 - p_stay) * (1.0 - post)
    return drift * (2.0 * up_next - 1.0) - 0.5 * sigma * sigma


def ou_signal(open_: np.ndarray, close: np.ndarray, window: int, length: int, theta: float = 0.05,
              log_mean: float | None = None) -> np.ndarray:
    """Expected next-bar log return [m, L] of an OU path reverting to its first open (or to
    ``exp(log_mean)``, the mean of a path these bars continue)."""
    mean = np.log(open_[:, :1]) if log_mean is None else log_mean
    dev = np.log(close[:, decision_bars(window, length)]) - mean
    return -theta * dev


def hysteresis(signal: np.ndarray, threshold: float, max_position: int = 1, no_short: bool = False) -> np.ndarray:
    """Positions [m, L] from a signal [m, L] with a dead band of +-``threshold`` (see the module doc)."""
    m, L = signal.shape
    out = np.empty((m, L))
    pos = np.zeros(m)
    short = 0.0 if no_short else -float(max_position)
    for j in range(L):
        s = signal[:, j]
        pos = np.where(s > threshold, float(max_position), np.where(s < -threshold, short, pos))
        out[:, j] = pos
    return out
