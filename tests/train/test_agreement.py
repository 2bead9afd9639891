"""The iteration's one collective: rollout rows and agreement row travel together, bit for bit.

The real two-process path (gloo) runs in tests/distributed/test_distributed.py (spawned workers end
bitwise equal, episode split end to end); here the packing is checked exactly, for odd and even
N * F (float32 rows followed by a float64 row), and one odd-sized run goes through 2 gloo workers.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import SPAWN2, run_cli

from ppo_lstm.train.agreement import RankReport, exchange
from ppo_lstm.algo.buffer import RolloutBatch
from ppo_lstm.distributed import LocalComm

T, N, D, H = 4, 3, 5, 2
CAPACITY = T * N


def make_batch(seed: int, T: int = T, N: int = N, D: int = D) -> RolloutBatch:
    """A batch ``[T, N]`` of random values (``packed()`` rows ``[N, T * (D + 7) + 2H]``)."""
    g = torch.Generator().manual_seed(seed)
    tn = lambda: torch.randn(T, N, generator=g)  # noqa: E731
    return RolloutBatch(obs=torch.randn(T, N, D, generator=g), actions=torch.randint(0, 3, (T, N), generator=g).float(),
                        log_probs=tn(), values=tn(), rewards=tn(), episode_starts=(tn() > 1).float(),
                        advantages=tn(), returns=tn(), initial_h=torch.randn(1, N, H, generator=g),
                        initial_c=torch.randn(1, N, H, generator=g))


def records(k: int, offset: float) -> np.ndarray:
    """``[k, 6]`` episode records with values float32 cannot hold exactly."""
    return np.arange(k * 6, dtype=np.float64).reshape(k, 6) / 3.0 + offset


class TwoRanks:
    """A stand-in for rank 0 of two: ``gather`` puts the other rank's payload after ours,
    as all_gather does (the payload of rank 1 is prepared by the test)."""

    rank, world_size = 0, 2

    def __init__(self, other_payload: torch.Tensor) -> None:
        self.other = other_payload

    def gather(self, tensor: torch.Tensor, dim: int = 0) -> torch.Tensor:
        return torch.cat([tensor, self.other], dim=dim)


class Capture:
    """A one-rank Comm that keeps what it was asked to gather."""

    rank, world_size = 0, 1

    def gather(self, tensor: torch.Tensor, dim: int = 0) -> torch.Tensor:
        self.payload = tensor
        return tensor


def assert_batches_equal(a: RolloutBatch, b: RolloutBatch) -> None:
    for name in a.__dataclass_fields__:
        assert torch.equal(getattr(a, name), getattr(b, name)), name


def test_one_rank_gets_its_own_batch_and_records_back_exactly():
    batch, mine = make_batch(1), records(2, 1e6 + 0.1)
    combined, agreed = exchange(LocalComm(), batch, RankReport(mine, CAPACITY, True, 0, 0.5))
    assert_batches_equal(combined, batch)
    assert agreed.records == mine.tolist()  # float64 through a byte view: not rounded to float32
    assert agreed.finished and agreed.signum == 0 and agreed.bad_update_ranks == []
    assert agreed.rank_sps == [CAPACITY / 0.5]


def test_two_ranks_side_by_side_in_rank_order():
    ours, theirs = make_batch(1), make_batch(2)
    capture = Capture()
    exchange(capture, theirs, RankReport(records(1, 7.0), CAPACITY, False, 15, 0.25, bad_update=True))  # rank 1's payload
    combined, agreed = exchange(TwoRanks(capture.payload), ours, RankReport(records(3, 0.0), CAPACITY, True, 0, 0.5))
    for name in ours.__dataclass_fields__:  # [T, 2N] (or [1, 2N, H]): rank 0's envs, then rank 1's
        expected = torch.cat([getattr(ours, name), getattr(theirs, name)], dim=1)
        assert torch.equal(getattr(combined, name), expected), name
    assert agreed.records == records(3, 0.0).tolist() + records(1, 7.0).tolist()
    assert not agreed.finished  # rank 1 has not finished its share
    assert agreed.signum == 15  # the signal one rank received stops every rank
    assert agreed.rank_sps == [CAPACITY / 0.5, CAPACITY / 0.25]
    assert agreed.bad_update_ranks == [1]  # rank 1 judged its previous update non-finite: every rank learns it


def test_no_records_and_a_full_rollout_of_them():
    batch = make_batch(3)
    _, none = exchange(LocalComm(), batch, RankReport(np.zeros((0, 6)), CAPACITY, False, 0, 1.0))
    assert none.records == []
    full = records(CAPACITY, 0.5)
    _, every = exchange(LocalComm(), batch, RankReport(full, CAPACITY, False, 0, 1.0))
    assert every.records == full.tolist()


@pytest.mark.parametrize("steps, envs, obs_dim", [(3, 3, 2), (1, 3, 4), (5, 3, 4), (4, 3, 5), (2, 2, 3)])
def test_any_rows_size_odd_or_even_one_rank_and_two(steps, envs, obs_dim):
    """``N * F`` float32 values may be an odd number of 4 bytes: the float64 agreement row after
    them must still be readable (a view needs an 8-byte aligned offset)."""
    capacity = steps * envs
    ours, theirs = make_batch(1, steps, envs, obs_dim), make_batch(2, steps, envs, obs_dim)
    combined, agreed = exchange(LocalComm(), ours, RankReport(records(1, 0.25), capacity, True, 0, 0.5))
    assert_batches_equal(combined, ours)
    assert agreed.records == records(1, 0.25).tolist() and agreed.finished
    capture = Capture()
    exchange(capture, theirs, RankReport(records(2, 9.0), capacity, False, 2, 0.25))
    combined, agreed = exchange(TwoRanks(capture.payload), ours, RankReport(records(1, 0.25), capacity, True, 0, 0.5))
    for name in ours.__dataclass_fields__:
        assert torch.equal(getattr(combined, name), torch.cat([getattr(ours, name), getattr(theirs, name)], dim=1))
    assert agreed.records == records(1, 0.25).tolist() + records(2, 9.0).tolist()
    assert agreed.signum == 2 and agreed.rank_sps == [capacity / 0.5, capacity / 0.25]


@pytest.mark.e2e
def test_odd_envs_and_steps_train_on_two_gloo_workers(cwd):
    """3 envs x 3 steps per env with a 9-bar window: ``N * F`` is odd on every rank."""
    result = run_cli(cwd, "--market", "regime", "--num-envs", "3", "--update-interval", "18", "--window", "9",
                     "--minibatches", "1", "--episode-length", "16", "--hidden-size", "16", "--lstm-size", "16",
                     "--device", "cpu", "--seed", "3", "--no-progress", "--episodes", "6", *SPAWN2, timeout=120)
    assert result.returncode == 0, result.output
    assert "Training finished: 6 episodes" in result.stdout
