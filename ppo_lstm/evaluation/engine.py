"""The backtests' engine: a policy stepped one bar at a time beside buy-and-hold on one
``TradingCore``, and the closed trades rebuilt from the positions it held."""
from __future__ import annotations

import numpy as np
import torch

from envs.config import EnvConfig
from envs.core import TradingCore

from ..algo.agent import RecurrentActorCritic


def play(core: TradingCore, agent: RecurrentActorCritic, n: int, steps: int, greedy: bool, seed: int,
          device: torch.device | str) -> tuple[np.ndarray, np.ndarray]:
    """Step ``core``'s 2n envs ``steps`` times: envs 0..n-1 by the agent, n..2n-1 buy-and-hold.

    The LSTM state starts at zero and is carried through every step. Returns the
    equity ``[steps+1, 2n]`` (row 0: the starting cash) and positions ``[steps, 2n]``.
    """
    config = core.config
    flat = 0 if config.no_short else config.max_position  # action index of 0 lots
    actions = np.full(2 * n, config.num_actions - 1, np.int64)  # the last action is +K lots
    equity = np.empty((steps + 1, 2 * n))
    position = np.empty((steps, 2 * n))
    equity[0] = core.ledger.equity
    bust = np.zeros(2 * n, bool)
    generator = None if greedy else torch.Generator(device).manual_seed(seed)
    policy = PolicyStepper(agent, n, device)
    with torch.inference_mode():
        for t in range(steps):
            logits = policy(core.observe()[:n])
            if greedy:
                chosen = logits.argmax(-1)
            else:
                chosen = torch.multinomial(logits.softmax(-1), 1, generator=generator)[:, 0]
            actions[:n] = chosen.cpu().numpy()
            if bust.any():
                actions[bust] = flat
            core.step(actions)
            equity[t + 1] = core.ledger.equity
            position[t] = core.ledger.pos
            bust |= core.ledger.equity <= 0.0
    return equity, position


class PolicyStepper:
    """The agent's policy one time step at a time, its LSTM state carried from call to call.

    ``__call__(obs [n, D] float32 numpy) -> logits [n, A]``, starting from the zero state,
    through :meth:`RecurrentActorCritic.step` (``torch.lstm_cell``: logits equal to
    ``agent.forward``'s up to float32 rounding). Call it under ``torch.inference_mode()``
    or ``torch.no_grad()``, and make a new one after the agent's parameters change: for a
    :class:`RecurrentActorCritic` it holds them (``step_weights``) and steps with no episode
    start (nothing to reset), which saves about a fifth of a long backtest's time and changes
    no bit of the logits. Any other policy with the agent's ``initial_state`` and ``step(obs,
    state, starts)`` (the walk-forward's ensemble and rules) is called as it is.
    """

    def __init__(self, agent: RecurrentActorCritic, n: int, device: torch.device | str) -> None:
        self.agent, self.device = agent, device
        self.held = {"any_start": False, "weights": agent.step_weights()} \
            if isinstance(agent, RecurrentActorCritic) else {}
        self.state = agent.initial_state(n, device)  # (h, c), each [1, n, H]
        self.starts = torch.zeros(n, device=device)  # the zero state needs no reset

    def __call__(self, obs: np.ndarray) -> torch.Tensor:
        logits, _, self.state = self.agent.step(torch.from_numpy(obs).to(self.device), self.state, self.starts,
                                                **self.held)
        return logits


def closed_trades(position: np.ndarray, opens: np.ndarray, units: float, config: EnvConfig) -> tuple[np.ndarray, float]:
    """Net PnLs ``[k]`` of the lots closed over ``position [T]`` (lots held during each bar,
    entered at ``opens [T]`` of the same bar), and the fees plus slippage paid, in money.

    The ledger's rules: fills at the open with adverse slippage, ``fee`` on each lot's
    value at its fill, lots closed first in, first out; a lot's PnL is its price change
    times its units less its entry and exit fees. Lots still open at the end are not trades.
    """
    fee, slip = config.fee_bps / 1e4, config.slippage_bps / 1e4
    before = np.concatenate(([0.0], position[:-1]))
    trade = position - before
    at = np.flatnonzero(trade)
    fills = opens[at] * (1.0 + np.sign(trade[at]) * slip)
    lots = np.abs(trade[at])
    fees = float(np.sum(lots * units * (fills * fee + opens[at] * slip)))
    pnls: list[float] = []
    book: list[float] = []  # entry fills of the open lots, oldest first
    side = 0.0
    for i, fill in zip(at.tolist(), fills.tolist()):
        target = float(position[i])
        keep = min(abs(before[i]), abs(target)) if target * before[i] > 0 else 0.0
        for _ in range(int(abs(before[i]) - keep)):
            entry = book.pop(0)
            pnls.append(side * (fill - entry) * units - fee * units * (fill + entry))
        book += [fill] * int(abs(target) - keep)
        side = float(np.sign(target))
    return np.asarray(pnls, dtype=np.float64), fees
