"""The ledger of N trading accounts: positions, FIFO lots, fills, fees, slippage, equity.

Every array is [N] (one entry per env) or [N, K] (per lot slot). A decision sets a
target position in lots; the trade fills at the next bar's open with adverse
slippage (``fill``), pays ``fee`` on its notional, and lots close first in, first
out, each closed lot counting as one trade (a win when its PnL net of its entry and
exit fees is > 0). Equity is cash plus the open lots marked at the bar's close.

Positions and counters are float64 inside (no int/float casts per step) and int64 in
the state and the episode stats.
"""
from __future__ import annotations

import numpy as np

from envs.config import EnvConfig

STATE_ARRAYS = (
    "units", "cash", "equity", "pos", "head", "entry", "entry_fee", "cost", "held", "mark", "ep_reward",
    "closed", "wins",
)
_INT_STATE = frozenset({"pos", "head", "held", "closed", "wins"})  # float64 inside, int64 in the state


def _rowsum(a: np.ndarray) -> np.ndarray:
    """Sum of a [N, K] over K in a fixed order (bitwise independent of N)."""
    out = a[:, 0].copy()
    for k in range(1, a.shape[1]):
        out += a[:, k]
    return out


class Ledger:
    """Accounts of N envs with up to K lots each; ``step`` trades, marks and returns the reward.

    ``one_lot`` (default: K == 1) takes the K = 1 branch, which keeps only ``entry``
    per step (``cost`` and ``entry_fee`` follow from it, see ``sync``). It gives the
    general FIFO path's rewards, cash, equity, counts and open lots bit for bit
    (``tests/envs/test_ledger.py``); only the unused lot slots of flat accounts differ.
    """

    def __init__(self, num_envs: int, config: EnvConfig, one_lot: bool | None = None) -> None:
        n, K = num_envs, config.max_position
        self.n, self.K = n, K
        self.one_lot = K == 1 if one_lot is None else bool(one_lot)
        if self.one_lot and K != 1:
            raise ValueError(f"the one-lot branch needs max_position 1, got {K}")
        self.initial_cash = config.initial_cash
        self.full_fee, self.full_slip = config.fee_bps / 1e4, config.slippage_bps / 1e4
        self.fee, self.slip = self.full_fee, self.full_slip
        self.reward_per_dollar = config.reward_scale / config.initial_cash
        offset = 0 if config.no_short else K
        self._targets = np.arange(config.num_actions, dtype=np.float64) - offset  # action -> target lots
        self._slot = np.arange(K)
        self.units = np.zeros(n)  # units per lot
        self.cash = np.zeros(n)
        self.equity = np.zeros(n)
        self.pos = np.zeros(n)  # signed lots
        self.head = np.zeros(n, np.int64)  # FIFO ring-buffer head
        self.entry = np.zeros((n, K))  # entry fill price per lot slot
        self.entry_fee = np.zeros((n, K))  # fee paid at entry per lot slot
        self.cost = np.zeros(n)  # sum of the open lots' entry fills
        self.held = np.zeros(n)  # steps in the current position
        self.mark = np.ones(n)  # close of the current bar
        self.ep_reward = np.zeros(n)
        self._counts = np.zeros((2, n))  # closed += closing and wins += win in one add
        self.closed, self.wins = self._counts  # closed and winning trades this episode (views)
        self._flags = np.zeros((2, n), bool)
        self._traded = np.zeros(n, bool)
        self._tmp = [np.empty(n) for _ in range(4)]

    def scale_costs(self, fraction: float) -> None:
        """Charge ``fraction`` (0..1) of the configured fee and slippage on fills from now on: a
        training curriculum (``--cost-warmup``). Fees already paid stay paid; a lot closed
        while the rate changes is counted a win against the current rate for both its fees."""
        self.fee, self.slip = fraction * self.full_fee, fraction * self.full_slip

    def open(self, sel: np.ndarray | slice, ref: np.ndarray) -> None:
        """Fresh flat accounts for envs ``sel``; ``ref`` [m]: their close at the first decision.

        One lot is ``initial_cash / (K * ref)`` units, so K lots are worth the cash.
        """
        self.units[sel] = self.initial_cash / (self.K * ref)
        self.mark[sel] = ref
        self.head[sel] = 0
        for name in ("pos", "held", "closed", "wins", "entry", "entry_fee", "cost", "ep_reward"):
            getattr(self, name)[sel] = 0.0
        self.cash[sel] = self.initial_cash
        self.equity[sel] = self.initial_cash

    # ------------------------------------------------------------------- step
    def step(self, actions: np.ndarray, o: np.ndarray, c: np.ndarray) -> np.ndarray:
        """Trade to the targets of ``actions`` [N] int at opens ``o`` [N], mark at closes ``c`` [N].

        Returns the reward [N] float64: the change in equity * reward_scale / initial_cash.
        """
        target = self._targets.take(actions)  # float lots, a new array
        if self.one_lot:
            self._trade_one_lot(target, o)
        else:
            self._trade_lots(target, o)
        self.pos = target
        np.copyto(self.mark, c)
        equity = np.multiply(target, c)
        equity *= self.units
        equity += self.cash
        reward = np.subtract(equity, self.equity)
        reward *= self.reward_per_dollar
        self.equity = equity
        self.ep_reward += reward
        return reward

    def _pay(self, trade: np.ndarray, o: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Fill ``trade`` [N] lots at opens ``o`` [N]: cash pays the notional and the fees.

        The fill is the open with adverse slippage; every lot traded pays ``fee`` on its
        value at the fill. Returns the fill price [N] and one lot's value at it [N]
        (``_tmp[0]``: valid until the next step).
        """
        fill = np.sign(trade)
        fill *= self.slip
        fill += 1.0  # 1 + slip buying, 1 - slip selling (1 with no trade: unused)
        fill *= o
        value = np.multiply(fill, self.units, out=self._tmp[0])
        pay = np.abs(trade, out=self._tmp[1])
        pay *= self.fee
        pay += trade
        pay *= value  # trade * value + |trade| * fee * value
        self.cash -= pay
        return fill, value

    def _trade_one_lot(self, target: np.ndarray, o: np.ndarray) -> None:
        """K = 1: each env closes and/or opens at most one lot; only ``entry`` is kept.

        ``_trade_lots`` with K = 1, in the same arithmetic, by selects instead of masks.
        """
        pos, units, tmp = self.pos, self.units, self._tmp
        trade = target - pos
        fill, value = self._pay(trade, o)
        traded = np.not_equal(trade, 0.0, out=self._traded)
        flags = self._flags  # [2, N] bool: closing a lot, closing it at a profit
        closing = np.not_equal(pos, 0.0, out=flags[0])
        closing &= traded
        entry = self.entry[:, 0]  # contiguous [N] view
        was = np.multiply(entry, units, out=tmp[1])  # the open lot's value at its fill
        gain = np.subtract(value, was, out=tmp[2])
        gain *= pos
        fees = np.add(value, was, out=tmp[3])
        fees *= self.fee  # entry fee + exit fee
        win = np.greater(gain, fees, out=flags[1])  # the closed lot's PnL > 0
        win &= closing
        self._counts += flags  # closed += closing, wins += win
        untraded = ~traded
        np.multiply(fill, traded, out=tmp[0])  # arithmetic select: no branch on random masks
        entry *= untraded
        entry += tmp[0]  # the new lot's fill if traded (when flat: unused)
        held = self.held  # 0 while flat
        held *= untraded
        held += target != 0.0  # +1 holding on, 1 on a new position, 0 when flat

    def _trade_lots(self, target: np.ndarray, o: np.ndarray) -> None:
        """Any K: lots close FIFO from a ring buffer of K slots, then new lots open."""
        K, pos, units = self.K, self.pos, self.units
        trade = target - pos  # signed lots bought (+) or sold (-), all at one fill
        same = target * pos > 0
        keep = np.where(same, np.minimum(np.abs(pos), np.abs(target)), 0.0)  # lots carried over
        fill, value = self._pay(trade, o)
        n_close = np.abs(pos) - keep
        if n_close.any():
            closing = (self._slot - self.head[:, None]) % K < n_close[:, None]  # the oldest n_close lots
            was = self.entry * units[:, None]  # each lot's value at its fill
            gain = (value[:, None] - was) * np.sign(pos)[:, None]
            fees = (value[:, None] + was) * self.fee  # entry fee + exit fee
            self.closed += n_close
            self.wins += np.count_nonzero(closing & (gain > fees), axis=1)
            self.cost = np.where(keep == 0, 0.0, self.cost - _rowsum(np.where(closing, self.entry, 0.0)))
            self.head = (self.head + n_close.astype(np.int64)) % K
        n_open = np.abs(target) - keep
        if n_open.any():
            off = (self._slot - self.head[:, None]) % K
            opening = (off >= keep[:, None]) & (off < (keep + n_open)[:, None])  # [N, K]
            self.entry = np.where(opening, fill[:, None], self.entry)
            self.entry_fee = np.where(opening, (value * self.fee)[:, None], self.entry_fee)
            self.cost += n_open * fill
        self.held = np.where(same, self.held + 1.0, target != 0)

    # ------------------------------------------------------------ read outs
    def unrealised(self, out: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Unrealised PnL ($) [m] of the open lots of envs ``rows`` (all if None), into ``out``."""
        if rows is None:
            pos, units, mark = self.pos, self.units, self.mark
        else:
            pos, units, mark = self.pos[rows], self.units[rows], self.mark[rows]
        if self.one_lot:  # sign(pos) = pos, |pos| * mark = mark and cost = entry while a lot is open
            np.subtract(mark, self.entry[:, 0] if rows is None else self.entry[rows, 0], out=out)
            out *= pos
        else:
            np.abs(pos, out=out)
            out *= mark
            out -= self.cost if rows is None else self.cost[rows]
            out *= np.sign(pos)
        out *= units
        return out

    def episode_stats(self, rows: np.ndarray | slice) -> dict[str, np.ndarray]:
        """Episode summary of ``rows``: reward, return ($), closed and winning trades, open lots."""
        return {
            "reward": self.ep_reward[rows].copy(),
            "return": self.equity[rows] - self.initial_cash,
            "closed_trades": self.closed[rows].astype(np.int64),
            "winning_trades": self.wins[rows].astype(np.int64),
            "open_lots": np.abs(self.pos[rows]).astype(np.int64),
        }

    # ------------------------------------------------------------------ state
    def sync(self) -> None:
        """One-lot branch: ``cost`` and ``entry_fee`` from ``entry`` (the step keeps only ``entry``)."""
        if self.one_lot:
            np.multiply(self.entry[:, 0], np.abs(self.pos), out=self.cost)
            self.entry_fee[:, 0] = self.entry[:, 0] * self.units * self.fee * np.abs(self.pos)

    def arrays(self) -> dict[str, np.ndarray]:
        """The state arrays by name, as held (float64 counters; not copies)."""
        return {name: getattr(self, name) for name in STATE_ARRAYS}

    def get_state(self) -> dict[str, np.ndarray]:
        """Copies of the state arrays (counters as int64)."""
        self.sync()
        return {name: value.astype(np.int64) if name in _INT_STATE else value.copy()
                for name, value in self.arrays().items()}

    def set_state(self, arrays: dict[str, np.ndarray]) -> None:
        """Restore ``get_state()`` arrays (shapes checked by the caller), in place."""
        for name in STATE_ARRAYS:
            getattr(self, name)[...] = arrays[name]
