"""VariatePool: what env i reads depends on its generator alone; states redraw the buffers exactly."""
from __future__ import annotations

import copy

import numpy as np

from envs.markets.variates import VariatePool


def _rngs(n: int, seed: int = 0) -> list[np.random.Generator]:
    return [np.random.default_rng(seed + i) for i in range(n)]


def test_normal_pool_reads_the_generators_standard_normals() -> None:
    pool = VariatePool(2, 10, normal=True)
    rngs = _rngs(2)
    got = np.concatenate([pool.take(np.arange(2), 4, rngs) for _ in range(2)], axis=1)  # 8 of 10: no refill
    want = np.stack([np.random.default_rng(i).standard_normal(10)[:8] for i in range(2)])
    np.testing.assert_array_equal(got, want)
    third = pool.take(np.arange(2), 4, rngs)  # 2 left < 4: refilled, the rest dropped
    np.testing.assert_array_equal(third[0], np.random.default_rng(0).standard_normal(20)[10:14])


def test_rows_read_the_same_whatever_the_grouping() -> None:
    n, width = 4, 3
    together, alone = VariatePool(n, 8, normal=False), VariatePool(n, 8, normal=False)
    a, b = _rngs(n), _rngs(n)
    order = np.random.default_rng(9)
    for _ in range(20):
        rows = np.sort(order.choice(n, int(order.integers(1, n + 1)), replace=False))
        got = together.take(rows, width, a)
        for k, i in enumerate(rows):
            np.testing.assert_array_equal(got[k], alone.take(np.array([i]), width, b)[0])


def test_state_round_trip_and_clear() -> None:
    pool, rngs = VariatePool(3, 7, normal=True), _rngs(3)
    rows = np.arange(3)
    for _ in range(4):
        pool.take(rows, 3, rngs)
    state, later = pool.get_state(), copy.deepcopy(rngs)
    other = VariatePool(3, 7, normal=True)
    other.set_state(state)
    for _ in range(5):  # the redrawn buffers, then the refills from the generators, agree
        np.testing.assert_array_equal(pool.take(rows, 3, rngs), other.take(rows, 3, later))
    pool.clear(1)
    fresh = np.random.default_rng(42)
    np.testing.assert_array_equal(pool.take(np.array([1]), 3, [None, fresh, None])[0],
                                  np.random.default_rng(42).standard_normal(7)[:3])
