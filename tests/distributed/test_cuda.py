"""CUDA and NCCL, end to end: these run wherever a GPU is visible and are skipped elsewhere
(`python bench/gpu_check.py` runs them, and more, on a GPU machine).

 - NCCL collectives take CPU tensors too (the exchange's agreement row): TorchComm moves
   every tensor to the worker's GPU and back; fused Adam keeps its state on the GPU.
 - With 2 GPUs, a drift between ranks is repaired from rank 0, Adam state included.
 - The rollout makes one device -> host sync per step; the update's first minibatch
   replays the rollout's log-probs (IEEE float32 in cuDNN's LSTM, not TF32).
 - A non-finite policy raises the usual TrainingError and leaves the CUDA context usable.
 - Under --autocast bf16 the update's LSTM runs in bfloat16, everything stored in float32.
 - A short training run on 1 GPU (and on 2 with NCCL, when there are 2); its checkpoints
   hold only CPU tensors; two runs with one seed end bitwise equal; resume GPU -> CPU and CPU -> GPU finish with one warning line.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from conftest import TINY, assert_models_equal, env_for_child, episode_lines, load_state, run_cli
from ppo_lstm.distributed.cuda import count_syncs

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
              pytest.mark.timeout(300)]

TINY_CUDA = [a if a != "cpu" else "cuda" for a in TINY]  # TINY with --device cuda

NCCL_SCRIPT = """
import sys
import torch
from ppo_lstm.train.build import build_agent, build_optimizer
from ppo_lstm.config.plan import learning_rates
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.distributed import launch, parameters_in_sync

def worker(config, w):
    comm = w.comm
    assert w.device.type == "cuda" and comm.device == w.device
    step = torch.tensor(float(comm.rank))  # a CPU tensor, like the exchange's agreement row
    comm.broadcast_(step, src=0)
    assert step.device.type == "cpu" and float(step) == 0.0
    total = comm.sum(torch.ones(2))
    assert total.device.type == "cpu" and total.tolist() == [float(comm.world_size)] * 2
    rows = comm.gather(torch.full((1, 2), float(comm.rank), device=w.device))
    assert rows.device == w.device and rows[:, 0].tolist() == [float(r) for r in range(comm.world_size)]

    train = TrainConfig(hidden_size=8, lstm_size=8)
    torch.manual_seed(0)
    model = build_agent(train).to(w.device)
    optimizer = build_optimizer(model, learning_rates(train))  # the project's optimizer: fused Adam, state on the GPU
    obs = torch.ones(3, 2, train.env.obs_dim, device=w.device)
    for _ in range(2):
        optimizer.zero_grad()
        logits, values, _ = model(obs, model.initial_state(2, w.device), torch.zeros(3, 2, device=w.device))
        (logits.sum() + values.sum()).backward()
        optimizer.step()
    head = model.policy_head.weight
    assert all(v.device == w.device for v in optimizer.state[head].values())
    if comm.rank == 1:
        with torch.no_grad():
            head[0, 0] += 1.0
        optimizer.state[head]["step"] += 5
    assert parameters_in_sync(comm, model, optimizer) == (comm.world_size == 1)
    assert parameters_in_sync(comm, model, optimizer)
    torch.save({"model": {k: v.cpu() for k, v in model.state_dict().items()},
                "step": float(optimizer.state[head]["step"]),
                "exp_avg": optimizer.state[head]["exp_avg"].cpu()}, f"rank{comm.rank}.pt")
    return 0

if __name__ == "__main__":
    n = int(sys.argv[1])
    sys.exit(launch(TrainConfig(distributed=True, num_workers=n, device="cuda"), "cuda", worker))
"""


@pytest.mark.e2e
@pytest.mark.parametrize("gpus", [1, 2])
def test_nccl_collectives_take_cpu_tensors_and_repair_drift(tmp_path, gpus):
    if torch.cuda.device_count() < gpus:
        pytest.skip(f"needs {gpus} GPUs")
    (tmp_path / "nccl.py").write_text(NCCL_SCRIPT)
    result = subprocess.run([sys.executable, "nccl.py", str(gpus)], capture_output=True, text=True, timeout=240,
                            cwd=tmp_path, env=env_for_child())  # the repository before the user's PYTHONPATH
    assert result.returncode == 0, result.stdout + result.stderr
    if gpus == 2:
        rank0, rank1 = load_state(tmp_path / "rank0.pt"), load_state(tmp_path / "rank1.pt")
        assert_models_equal(rank0["model"], rank1["model"])
        assert rank0["step"] == rank1["step"] == 2.0 and torch.equal(rank0["exp_avg"], rank1["exp_avg"])
        assert result.stderr.count("parameters diverged across ranks") == 1


def _collector(device: str, num_envs: int = 8, steps: int = 16):
    from ppo_lstm.train.build import build_agent
    from ppo_lstm.config.schema import TrainConfig
    from ppo_lstm.distributed.cuda import configure_numerics
    from ppo_lstm.algo.rollout import RolloutCollector

    configure_numerics(deterministic=True)
    config = TrainConfig(num_envs=num_envs)
    config.env.episode_length = 8  # truncations inside the rollout
    torch.manual_seed(0)
    agent = build_agent(config).to(device)
    return config, agent, RolloutCollector(config, agent, 0, steps, torch.device(device), None)


def test_rollout_syncs_once_per_step_and_the_update_once():
    from ppo_lstm.distributed import LocalComm
    from ppo_lstm.train.build import build_optimizer
    from ppo_lstm.config.plan import learning_rates
    from ppo_lstm.algo.ppo import PPOSettings, ppo_update

    config, agent, collector = _collector("cuda")
    collector.collect(0)  # warm-up (cuBLAS handles, first allocations)
    collector.finish()
    steps = collector.steps
    assert count_syncs(lambda: collector.collect(1)) <= steps  # the actions' device -> host copy, once per step
    batch = collector.finish()
    settings = PPOSettings(config.clip, config.epochs, config.minibatches, config.ent_coef, config.vf_coef,
                           config.max_grad_norm, config.clip_vloss, config.norm_adv, None)
    optimizer = build_optimizer(agent, learning_rates(config))
    starts = batch.episode_starts.cpu()
    pending = ppo_update(agent, optimizer, batch, settings, torch.Generator().manual_seed(0), LocalComm(), starts)
    pending.fetch()
    syncs = count_syncs(lambda: ppo_update(agent, optimizer, batch, settings, torch.Generator().manual_seed(1),
                                           LocalComm(), starts).fetch())
    assert syncs <= 1, syncs  # the statistics come back once per update (the starts were copied before)


def test_first_minibatch_replays_the_rollout_log_probs_in_ieee_float32():
    from ppo_lstm.train.build import build_optimizer
    from ppo_lstm.config.plan import learning_rates
    from ppo_lstm.distributed import LocalComm
    from ppo_lstm.algo.ppo import PPOSettings, ppo_update

    config, agent, collector = _collector("cuda")
    with torch.no_grad():
        agent.policy_head.weight.mul_(100.0)  # logits of order 1, so rounding shows in the KL
    collector.collect(0)
    batch = collector.finish()
    settings = PPOSettings(config.clip, 1, 1, config.ent_coef, config.vf_coef, config.max_grad_norm,
                           config.clip_vloss, config.norm_adv, None)
    stats = ppo_update(agent, build_optimizer(agent, learning_rates(config)), batch, settings, torch.Generator().manual_seed(0),
                       LocalComm()).fetch()
    assert torch.backends.cudnn.rnn.fp32_precision == "ieee"
    assert abs(stats.approx_kl) < 1e-7, stats.approx_kl


def test_non_finite_policy_raises_and_leaves_cuda_usable():
    from ppo_lstm.errors import TrainingError
    from ppo_lstm.algo.rollout import sample_actions

    logits = torch.zeros(4, 3, device="cuda")
    logits[2, 1] = float("nan")
    with pytest.raises(TrainingError, match="non-finite outputs after update 5"):
        sample_actions(logits, torch.Generator("cuda").manual_seed(0), True, 5)
    assert torch.ones(3, device="cuda").sum().item() == 3.0  # no device-side assert fired


def test_bf16_update_runs_the_lstm_in_bfloat16_and_stores_float32():
    from ppo_lstm.train.build import build_optimizer
    from ppo_lstm.config.plan import learning_rates
    from ppo_lstm.distributed import LocalComm
    from ppo_lstm.distributed.cuda import require_bf16
    from ppo_lstm.algo.ppo import PPOSettings, ppo_update

    require_bf16(torch.device("cuda"))
    config, agent, collector = _collector("cuda")
    collector.collect(0)
    batch = collector.finish()
    seen = []
    original = torch.lstm

    def spy(*args):
        seen.append((args[0].dtype, args[2][0].dtype))
        return original(*args)

    settings = PPOSettings(config.clip, 1, 2, config.ent_coef, config.vf_coef, config.max_grad_norm,
                           config.clip_vloss, config.norm_adv, None, autocast=True)
    optimizer = build_optimizer(agent, learning_rates(config))
    torch.lstm = spy
    try:
        stats = ppo_update(agent, optimizer, batch, settings, torch.Generator().manual_seed(0), LocalComm()).fetch()
    finally:
        torch.lstm = original
    assert seen and set(seen) == {(torch.bfloat16, torch.bfloat16)}
    assert stats.finite
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in agent.parameters())
    assert all(v.dtype == torch.float32 for s in optimizer.state.values() for v in s.values())


@pytest.mark.e2e
def test_single_gpu_run_and_its_checkpoints_hold_only_cpu_tensors(cwd):
    result = run_cli(cwd, *TINY_CUDA, "--episodes", "4", "--log-interval", "2", timeout=240)
    assert result.returncode == 0, result.output
    assert "Workers: 1 on cuda, 1 torch thread" in result.stdout
    assert "Training finished: 4 episodes" in result.stdout
    code = ("import sys, torch\n"
            "s = torch.load(sys.argv[1], weights_only=True)\n"
            "bad = []\n"
            "def walk(x, at):\n"
            "    if torch.is_tensor(x):\n"
            "        if x.device.type != 'cpu': bad.append(at)\n"
            "    elif isinstance(x, dict): [walk(v, f'{at}.{k}') for k, v in x.items()]\n"
            "    elif isinstance(x, (list, tuple)): [walk(v, f'{at}[{i}]') for i, v in enumerate(x)]\n"
            "walk(s, 'checkpoint')\n"
            "assert not bad, bad\n")
    for path in (cwd / "checkpoints").glob("*.pt"):
        out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
        assert out.returncode == 0, out.stderr


@pytest.mark.e2e
def test_two_gpu_runs_with_one_seed_end_bitwise_equal(tmp_path):
    """Deterministic mode without the NaN fill of fresh memory (configure_numerics) still
    repeats a run bit for bit: weights and Adam state."""
    saved = []
    for name in ("first", "second"):
        run_dir = tmp_path / name
        run_dir.mkdir()
        result = run_cli(run_dir, *TINY_CUDA, "--episodes", "6", timeout=240)
        assert result.returncode == 0, result.output
        checkpoints = run_dir / "checkpoints"
        saved.append(load_state(checkpoints / (checkpoints / "latest").read_text().strip()))
    assert_models_equal(saved[0]["model"], saved[1]["model"])
    first, second = saved[0]["optimizer"]["state"], saved[1]["optimizer"]["state"]
    assert first.keys() == second.keys()
    for key in first:
        for name in first[key]:
            assert torch.equal(first[key][name], second[key][name]), (key, name)


@pytest.mark.e2e
def test_resume_gpu_to_cpu_and_back_with_one_warning_each(cwd):
    first = run_cli(cwd, *TINY_CUDA, "--episodes", "4", timeout=240)
    assert first.returncode == 0, first.output
    for device, episodes, written_on in (("cpu", "8", "cuda"), ("cuda", "12", "cpu")):
        args = [a if a not in ("cpu", "cuda") else device for a in TINY]
        result = run_cli(cwd, *args, "--resume", "--episodes", episodes, timeout=240)
        assert result.returncode == 0, result.output
        warning_lines = [line for line in result.output.splitlines() if "warning" in line]
        assert len(warning_lines) == 1, result.output
        assert f"written on {written_on} and this run is on {device}" in warning_lines[0]
        assert f"Training finished: {episodes} episodes" in result.stdout


@pytest.mark.e2e
def test_two_gpu_nccl_run(cwd):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    result = run_cli(cwd, *TINY_CUDA, "--distributed", "--num-gpus", "2", "--episodes", "8", "--log-interval", "4",
                     "--sync-check-interval", "1", timeout=240)
    assert result.returncode == 0, result.output
    assert "Workers: 2 on cuda (nccl), 1 torch thread each" in result.stdout
    assert "diverged" not in result.output
    lines = episode_lines(cwd / "training.log")
    assert lines and all(line.endswith(" | GPUs: 2") for line in lines)
