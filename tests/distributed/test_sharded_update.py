"""The sharded PPO update on 2 real gloo processes: each rank computes the gradient of its
share of every minibatch, and one sum per step gives both the whole minibatch's update.

The reference is the same update in this process (one rank computing every share). The
cases cover equal shares, ``--micro-batches 2``, unequal shares (3 sequences a minibatch:
2 on rank 0, 1 on rank 1, and an empty micro-batch), a target-KL stop, and a NaN in one
rank's share only, which both ranks must undo.
"""
from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import ROOT, load_state
from envs.config import EnvConfig
from ppo_lstm.algo.buffer import RolloutBatch
from ppo_lstm.algo.ppo import PPOSettings, ppo_update
from ppo_lstm.algo.value_norm import RunningMeanStd
from ppo_lstm.config.plan import share
from ppo_lstm.algo.rollout import RolloutCollector
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.distributed import LocalComm
from ppo_lstm.rundir.logger import NullLogger
from ppo_lstm.train.build import build_agent, build_optimizer
from ppo_lstm.config.plan import learning_rates
from ppo_lstm.train.guard import UpdateGuard, outputs_finite

pytestmark = pytest.mark.timeout(180)

# name: (env sequences, minibatches, micro-batches, target KL, NaN in rank 1's share)
REPLICATED = "equal"  # also run with --shard-update off: every rank computes the whole minibatches
CASES = {
    "equal": (8, 2, 1, None, False),
    "micro-batches": (8, 2, 2, None, False),
    "unequal": (6, 2, 2, None, False),
    "target-kl": (8, 2, 1, 3e-7, False),
    "nan-on-rank-1": (8, 2, 1, None, True),
}


def settings_for(config: TrainConfig, minibatches: int, micro: int, target_kl, shard: bool = True) -> PPOSettings:
    return PPOSettings(config.clip, config.epochs, minibatches, config.ent_coef, config.vf_coef, config.max_grad_norm,
                       config.clip_vloss, config.norm_adv, target_kl, False, micro, shard)


def case_inputs(envs: int, nan: bool) -> tuple[TrainConfig, dict, RolloutBatch]:
    """A config, initial weights and one real rollout of ``envs`` sequences (the combined batch)."""
    config = TrainConfig(num_envs=envs, hidden_size=16, lstm_size=16, epochs=1 if nan else 4,
                         env=EnvConfig(episode_length=12, window=8))
    torch.manual_seed(0)
    agent = build_agent(config)
    collector = RolloutCollector(config, agent, 0, 16, torch.device("cpu"), None)
    collector.collect(0)
    batch = collector.finish()
    if nan:  # in one epoch, only rank 1 reads this sequence: in the last minibatch's share and in the output check
        last = int(torch.randperm(envs, generator=torch.Generator().manual_seed(5))[-1])
        assert last >= envs // 2
        batch.obs[:, last] = float("nan")
    return config, agent.state_dict(), batch


def guarded_update(config: TrainConfig, weights: dict, batch: RolloutBatch, settings: PPOSettings, comm,
                   value_norm: RunningMeanStd | None = None) -> dict:
    """One update as the trainer runs it (guard, sharded update, shared output check); ``value_norm``:
    --norm-value's statistics, whose state after the update is returned too."""
    agent = build_agent(config)
    agent.load_state_dict(weights)
    optimizer = build_optimizer(agent, learning_rates(config))
    guard = UpdateGuard(agent, optimizer, comm.world_size, NullLogger())
    snapshot = guard.snapshot()
    starts = batch.episode_starts.cpu()
    pending = ppo_update(agent, optimizer, batch, settings, torch.Generator().manual_seed(5), comm, starts, value_norm)
    stats = pending.fetch()
    ok = stats.finite and bool(outputs_finite(agent, batch, starts, comm, settings.shard))
    skipped = guard.judge(1, ok, snapshot)
    return {"model": agent.state_dict(), "optimizer": optimizer.state_dict(), "skipped": skipped,
            "epochs_run": stats.epochs_run, "stats": [stats.policy_loss, stats.value_loss, stats.entropy,
                                                      stats.approx_kl, stats.clip_fraction],
            "value_norm": None if value_norm is None else value_norm.state()}


SCRIPT = """
import sys
import torch
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.distributed import launch
from envs.config import EnvConfig
from ppo_lstm.algo.buffer import RolloutBatch
from ppo_lstm.algo.value_norm import RunningMeanStd
from test_sharded_update import CASES, REPLICATED, guarded_update, settings_for

def worker(config, w):
    out = {}
    for name, (envs, minibatches, micro, target_kl, nan) in CASES.items():
        saved = torch.load(f"{name}.pt", weights_only=True)
        case_config = TrainConfig.from_dict(saved["config"])
        out[name] = guarded_update(case_config, saved["weights"], RolloutBatch(**saved["batch"]),
                                   settings_for(case_config, minibatches, micro, target_kl), w.comm)
    envs, minibatches, micro, target_kl, _ = CASES[REPLICATED]
    saved = torch.load(f"{REPLICATED}.pt", weights_only=True)
    case_config = TrainConfig.from_dict(saved["config"])
    sums = []
    sum_ = w.comm.sum_
    w.comm.sum_ = lambda tensor: (sums.append(tensor.numel()), sum_(tensor))[1]  # counts the update's sums
    out["replicated"] = guarded_update(case_config, saved["weights"], RolloutBatch(**saved["batch"]),
                                       settings_for(case_config, minibatches, micro, target_kl, shard=False), w.comm)
    w.comm.sum_ = sum_
    out["replicated"]["sums"] = len(sums)
    out["norm-value"] = guarded_update(case_config, saved["weights"], RolloutBatch(**saved["batch"]),
                                       settings_for(case_config, minibatches, micro, target_kl), w.comm,
                                       RunningMeanStd())
    torch.save(out, f"rank{w.comm.rank}.pt")
    return 0

if __name__ == "__main__":
    sys.exit(launch(TrainConfig(distributed=True, num_workers=2, device="cpu"), "cpu", worker))
"""


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """Every case's inputs, and both ranks' results of the sharded update on them."""
    directory = tmp_path_factory.mktemp("sharded")
    inputs = {}
    for name, (envs, _, _, _, nan) in CASES.items():
        config, weights, batch = case_inputs(envs, nan)
        inputs[name] = (config, weights, batch)
        torch.save({"config": config.to_dict(), "weights": weights, "batch": vars(batch)}, directory / f"{name}.pt")
    (directory / "sharded.py").write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(Path(__file__).parent.parent),
                                                        str(Path(__file__).parent)]), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "sharded.py"], capture_output=True, text=True, timeout=150,
                            cwd=directory, env=env)
    assert result.returncode == 0, result.stderr
    return inputs, load_state(directory / "rank0.pt"), load_state(directory / "rank1.pt")


def test_share_splits_a_range_into_near_equal_contiguous_pieces():
    assert [share(6, r, 2) for r in range(2)] == [slice(0, 3), slice(3, 6)]
    assert [share(3, r, 2) for r in range(2)] == [slice(0, 2), slice(2, 3)]
    assert [share(1, r, 3) for r in range(3)] == [slice(0, 1), slice(1, 1), slice(1, 1)]
    pieces = [share(10, r, 4) for r in range(4)]
    assert [p.stop - p.start for p in pieces] == [3, 3, 2, 2] and pieces[-1].stop == 10


@pytest.mark.e2e
@pytest.mark.parametrize("name", [n for n in CASES if not CASES[n][4]])
def test_a_sharded_update_is_the_one_process_update(sharded, name):
    """Weights and Adam moments within 1e-5 relative of one process's update on the whole
    minibatches; the two ranks bitwise equal; the same statistics and epochs."""
    inputs, rank0, rank1 = sharded
    envs, minibatches, micro, target_kl, _ = CASES[name]
    config, weights, batch = inputs[name]
    reference = guarded_update(config, weights, copy.deepcopy(batch), settings_for(config, minibatches, 1, target_kl),
                               LocalComm())
    ours, theirs = rank0[name], rank1[name]
    assert not ours["skipped"] and not reference["skipped"]
    for key, value in ours["model"].items():
        assert torch.equal(value, theirs["model"][key]), key  # the ranks agree bit for bit
        torch.testing.assert_close(value, reference["model"][key], rtol=1e-5, atol=1e-7)
    assert not torch.equal(ours["model"]["policy_head.weight"], weights["policy_head.weight"])  # it trained
    for index, state in ours["optimizer"]["state"].items():
        for key, value in state.items():
            assert torch.equal(value, theirs["optimizer"]["state"][index][key]), (index, key)
            torch.testing.assert_close(value, reference["optimizer"]["state"][index][key], rtol=1e-5, atol=1e-9)
    assert ours["epochs_run"] == theirs["epochs_run"] == reference["epochs_run"]
    assert ours["stats"] == theirs["stats"]
    # the statistics are means over the batch whose terms cancel (a policy loss near -1e-4), so a sum
    # in another order moves them by an absolute amount (1.5e-8 on an Intel AVX-512 CPU), not a relative one
    assert ours["stats"] == pytest.approx(reference["stats"], rel=1e-4, abs=1e-7)
    if target_kl is not None:
        assert 1 <= reference["epochs_run"] < config.epochs  # the KL stop was taken, at the same epoch


@pytest.mark.e2e
def test_a_nan_in_one_ranks_share_undoes_the_update_on_both(sharded):
    """Rank 0 never reads the NaN sequence; it learns of it through the step's sum."""
    inputs, rank0, rank1 = sharded
    _, weights, _ = inputs["nan-on-rank-1"]
    for rank in (rank0, rank1):
        result = rank["nan-on-rank-1"]
        assert result["skipped"]
        for key, value in result["model"].items():
            assert torch.equal(value, weights[key]), key  # back to the weights before the update
        assert not result["optimizer"]["state"]  # and the optimizer to its state before (none)


@pytest.mark.e2e
def test_an_update_left_whole_on_every_rank_is_the_one_process_update_bit_for_bit(sharded):
    """--shard-update off: every rank computes every minibatch, so both ranks give exactly one process's
    update, with no sum in the update."""
    inputs, rank0, rank1 = sharded
    envs, minibatches, micro, target_kl, _ = CASES[REPLICATED]
    config, weights, batch = inputs[REPLICATED]
    reference = guarded_update(config, weights, copy.deepcopy(batch),
                               settings_for(config, minibatches, micro, target_kl, shard=False), LocalComm())
    for rank in (rank0, rank1):
        result = rank["replicated"]
        assert not result["skipped"] and result["sums"] == 0
        for key, value in result["model"].items():
            assert torch.equal(value, reference["model"][key]), key
        assert result["stats"] == reference["stats"]


@pytest.mark.e2e
def test_a_sharded_update_with_norm_value_keeps_the_ranks_and_their_statistics_bitwise_equal(sharded):
    """--norm-value: each rank takes the combined batch's returns into its own statistics, without a
    collective; both end with the same statistics (one process's) and the same weights."""
    inputs, rank0, rank1 = sharded
    envs, minibatches, micro, target_kl, _ = CASES[REPLICATED]
    config, weights, batch = inputs[REPLICATED]
    reference = guarded_update(config, weights, copy.deepcopy(batch), settings_for(config, minibatches, 1, target_kl),
                               LocalComm(), RunningMeanStd())
    ours, theirs = rank0["norm-value"], rank1["norm-value"]
    assert not ours["skipped"] and ours["value_norm"] == theirs["value_norm"] == reference["value_norm"]
    assert ours["value_norm"]["count"] > 1.0
    for key, value in ours["model"].items():
        assert torch.equal(value, theirs["model"][key]), key
        torch.testing.assert_close(value, reference["model"][key], rtol=1e-5, atol=1e-7)
    assert not torch.equal(ours["model"]["value_head.weight"], rank0[REPLICATED]["model"]["value_head.weight"])
