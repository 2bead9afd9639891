"""The CUDA path's decisions, checked on the CPU (GPU-only behaviour is in tests/distributed/test_cuda.py
and bench/gpu_check.py):

1. a rank state written on another device type (a CUDA sampler's 16-byte state) resumes
   with one warning line; any rank state that cannot be restored restarts that rank's envs;
2. the on-device finiteness check of the action sampler raises the usual TrainingError;
3. the rollout's staged host -> device inputs give bit for bit the unstaged values;
4. under autocast the LSTM runs explicitly in the autocast dtype;
5. GPU numerics: cuDNN RNNs and matmuls in IEEE float32, deterministic algorithms;
6. bf16 support is judged without emulation;
7. which GPU a worker takes (torchrun with one visible GPU per process, or too few);
8. checkpoints hold only CPU tensors.
"""
from __future__ import annotations

import copy
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import ROOT, TINY, assert_models_equal, cli_in_process, env_for_child, run_cli
from ppo_lstm.train.build import build_agent
from ppo_lstm.rundir.checkpoint import CheckpointDir, atomic_save, load_checkpoint
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.distributed import cuda as cuda_setup
from ppo_lstm.errors import TrainingError, UsageError
from ppo_lstm.algo.rollout import RolloutCollector, sample_actions

CUDA_SAMPLER_STATE = torch.tensor([7, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0], dtype=torch.uint8)  # seed, offset


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One finished 8-episode run (checkpoints every 4 episodes), shared by this module's resumes.
    Run in this process, as are the resumes (the CLI's main(): the same code path, no start-up)."""
    cwd = tmp_path_factory.mktemp("base")
    result = cli_in_process(cwd, *TINY, "--episodes", "8", "--checkpoint-interval", "4")
    assert result.returncode == 0, result.output
    return cwd


def copy_with_edited_rank_state(finished_run, cwd, edit) -> None:
    """``finished_run``'s files in ``cwd``, its newest checkpoint's rank-0 state changed by ``edit``."""
    shutil.copytree(finished_run, cwd, dirs_exist_ok=True)
    path = CheckpointDir(cwd / "checkpoints").latest()
    state = load_checkpoint(path)
    edit(state["ranks"][0])
    atomic_save(state, path)


def resumed(cwd):
    result = cli_in_process(cwd, *TINY, "--resume", "--episodes", "16")
    assert result.returncode == 0, result.output
    assert "Traceback" not in result.output and "Training finished: 16 episodes" in result.stdout
    return result


def from_cuda(rank) -> None:
    rank["sample_generator"], rank["sampler_device"] = CUDA_SAMPLER_STATE, "cuda"


def test_rank_state_records_its_device_type():
    config = TrainConfig(num_envs=2)
    collector = RolloutCollector(config, build_agent(config), 0, 4, torch.device("cpu"), None)
    assert collector.state()["sampler_device"] == "cpu"


def test_resume_of_a_rank_state_written_on_cuda_reseeds_the_sampler_with_one_warning(finished_run, tmp_path):
    """It finishes, with one warning line; the re-seeded stream is deterministic (two resumes
    give the same episodes); the checkpoints it writes say they came from the CPU."""
    episodes = []
    for name in ("a", "b"):
        cwd = tmp_path / name
        copy_with_edited_rank_state(finished_run, cwd, from_cuda)
        result = resumed(cwd)
        warnings = [line for line in result.output.splitlines() if "warning" in line]
        assert len(warnings) == 1, result.output
        assert ("the action sampler's state was written on cuda and this run is on cpu: the sampler was "
                "re-seeded" in warnings[0]) and "environments restored" in warnings[0]
        episodes.append([line.split(" | ")[:3] for line in (cwd / "training.log").read_text().splitlines()
                         if line.startswith("Episode")])
        latest = load_checkpoint(CheckpointDir(cwd / "checkpoints").latest())
        assert latest["ranks"][0]["sampler_device"] == "cpu" and latest["counters"]["global_episodes"] == 16
    assert episodes[0] == episodes[1] and len(episodes[0]) >= 2


@pytest.mark.parametrize("edit, reason", [
    (lambda rank: rank.update(sample_generator=CUDA_SAMPLER_STATE) or rank.pop("sampler_device"),
     "RNG state"),  # an older checkpoint that does not say where it was written
    (lambda rank: rank.update(lstm_h=torch.zeros(1, 5, 3)), "do not fit"),
    (lambda rank: rank.pop("env"), "'env'"),
])
def test_a_rank_state_that_cannot_be_restored_restarts_the_envs_with_a_warning(finished_run, cwd, edit, reason):
    copy_with_edited_rank_state(finished_run, cwd, edit)
    result = resumed(cwd)
    warnings = [line for line in result.output.splitlines() if "warning" in line]
    assert len(warnings) == 1, result.output
    assert "warning: rank 0's saved rollout state could not be restored" in warnings[0]
    assert reason in warnings[0] and "environments and action sampler restarted" in warnings[0]


def test_device_side_finiteness_check_raises_the_training_error():
    generator = torch.Generator().manual_seed(0)
    logits = torch.tensor([[0.0, 1.0, 2.0], [1.0, 1.0, 1.0]])
    on_device, host = sample_actions(logits, generator, True, 3)
    plain, plain_host = sample_actions(logits, torch.Generator().manual_seed(0), False, 3)
    assert torch.equal(on_device, plain) and np.array_equal(host, plain_host)  # the same draws either way
    for bad in (float("nan"), float("inf")):
        poisoned = logits.clone()
        poisoned[1, 2] = bad
        with pytest.raises(TrainingError, match="non-finite outputs after update 3"):
            sample_actions(poisoned, torch.Generator().manual_seed(0), True, 3)


def test_staged_rollout_is_bit_for_bit_the_values_of_plain_tensors():
    """Truncations happen (episode length 8, 24 steps): every stored field equals what
    tensors made straight from the env's arrays give, with the device-style path on."""
    config = TrainConfig(num_envs=3)
    config.env.episode_length, config.env.window = 8, 6
    torch.manual_seed(0)
    agent = build_agent(config)
    batches = []
    for check_on_device in (False, True):
        collector = RolloutCollector(config, copy.deepcopy(agent), 0, 24, torch.device("cpu"), None)
        collector.check_on_device = check_on_device
        collector.collect(0)
        batches.append(collector.finish())
    for name in batches[0].__dataclass_fields__:
        assert torch.equal(getattr(batches[0], name), getattr(batches[1], name)), name
    assert batches[0].episode_starts[1:].sum() >= 3  # episodes ended (by the time limit) inside the rollout


def test_staged_rewards_include_the_bootstrap_of_cut_episodes():
    config = TrainConfig(num_envs=2)
    config.env.episode_length, config.env.window = 4, 6
    torch.manual_seed(0)
    collector = RolloutCollector(config, build_agent(config), 0, 8, torch.device("cpu"), None)
    env_rewards = []
    original_step = collector.env.step

    def recording_step(actions):
        out = original_step(actions)
        env_rewards.append(out[1].astype(np.float32))
        return out

    collector.env.step = recording_step
    collector.collect(0)
    batch = collector.finish()
    stored = batch.rewards.numpy()
    cut = batch.episode_starts[1:].numpy().astype(bool)  # the step before an episode start was cut
    assert cut.any()
    assert np.array_equal(stored[:-1][~cut], np.stack(env_rewards)[:-1][~cut])
    assert not np.array_equal(stored[:-1][cut], np.stack(env_rewards)[:-1][cut])  # + gamma * V(final obs)


def test_lstm_under_autocast_runs_explicitly_in_the_autocast_dtype():
    config = TrainConfig(hidden_size=8, lstm_size=6)
    torch.manual_seed(0)
    agent = build_agent(config)
    obs = torch.randn(5, 3, config.env.obs_dim)
    starts = torch.zeros(5, 3)
    starts[2, 1] = 1.0
    state = agent.initial_state(3)
    seen = []
    original = torch.lstm

    def spy(*args):
        seen.append((args[0].dtype, args[2][0].dtype, torch.is_autocast_enabled("cpu")))
        return original(*args)

    with torch.autocast("cpu", dtype=torch.bfloat16):
        reference, _, _ = agent(obs, state, starts)  # the explicit path
        torch.lstm = spy
        try:
            agent(obs, state, starts)
        finally:
            torch.lstm = original
        by_autocast = [agent.lstm(agent.encoder(obs[:2]))]  # nn.LSTM left to autocast, for comparison
    assert seen == [(torch.bfloat16, torch.bfloat16, False)] * 2  # two stretches, bf16, outside autocast
    assert by_autocast[0][0].dtype == torch.bfloat16 and reference.dtype == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h0 = agent.initial_state(3)
        features = agent.encoder(obs)
        explicit, _ = agent._lstm_runner(features)(features, h0)
    # bit for bit the module's own LSTM cast to bf16 (what CPU autocast does with the LSTM depends on
    # the processor's oneDNN: without bf16 support it keeps float32 once an initial state is given)
    lstm_bf16 = copy.deepcopy(agent.lstm).to(torch.bfloat16)
    in_bf16, _ = lstm_bf16(features.to(torch.bfloat16), tuple(x.to(torch.bfloat16) for x in h0))
    assert explicit.dtype == torch.bfloat16 and torch.equal(explicit, in_bf16)


def test_gpu_numerics_are_ieee_float32_and_deterministic(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    saved = cuda_setup.numerics_settings()
    try:
        cuda_setup.configure_numerics(deterministic=True)
        now = cuda_setup.numerics_settings()
        assert now["cudnn_rnn_fp32_precision"] == "ieee" and now["matmul_fp32_precision"] == "ieee"
        assert now["cudnn_deterministic"] and not now["cudnn_benchmark"] and now["deterministic_algorithms"]
        assert not now["fill_uninitialized_memory"]  # no NaN fill of every torch.empty
        import os
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        cuda_setup.configure_numerics(deterministic=False)
        now = cuda_setup.numerics_settings()
        assert now["cudnn_rnn_fp32_precision"] == "ieee" and not now["deterministic_algorithms"]
        assert not now["cudnn_deterministic"]
    finally:
        cuda_setup.restore_numerics(saved)


def test_bf16_support_is_judged_without_emulation(monkeypatch):
    asked = {}

    def is_bf16_supported(including_emulation=True):
        asked["including_emulation"] = including_emulation
        return including_emulation  # a GPU that emulates bf16 only

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    with pytest.raises(UsageError, match="Tesla T4 has no bfloat16 hardware"):
        cuda_setup.require_bf16(torch.device("cuda", 0))
    assert asked == {"including_emulation": False}
    cuda_setup.require_bf16(torch.device("cpu"))  # the CPU path never asks CUDA


@pytest.mark.parametrize("local_rank, visible, expected", [
    (0, 4, 0), (3, 4, 3), (0, 1, 0), (5, 1, 0),  # one GPU visible per process (SLURM): use it
])
def test_worker_gpu_index(local_rank, visible, expected):
    assert cuda_setup.gpu_index_for(local_rank, visible) == expected


@pytest.mark.parametrize("local_rank, visible", [(2, 2), (7, 4), (0, 0)])
def test_worker_gpu_index_refuses_too_few_gpus(local_rank, visible):
    with pytest.raises(UsageError) as err:
        cuda_setup.gpu_index_for(local_rank, visible)
    assert str(err.value).count("\n") == 0 and f"LOCAL_RANK {local_rank}" in str(err.value)
    assert f"{visible} GPU" in str(err.value)


def test_torchrun_rank_beyond_the_visible_gpus_exits_2_with_one_line(cwd, monkeypatch):
    """In-process, as one torchrun worker (LOCAL_RANK 3) that sees 2 GPUs (device discovery stubbed)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    for name, value in (("RANK", "3"), ("WORLD_SIZE", "4"), ("LOCAL_RANK", "3"), ("LOCAL_WORLD_SIZE", "4"),
                        ("MASTER_ADDR", "localhost"), ("MASTER_PORT", "1")):
        monkeypatch.setenv(name, value)
    args = [a if a != "cpu" else "cuda" for a in TINY]
    result = cli_in_process(cwd, *args, "--episodes", "4")
    assert result.returncode == 2, result.output
    assert result.error_lines() == [result.stderr.strip()]
    assert "LOCAL_RANK 3 but this process sees 2 GPUs" in result.stderr


def test_evaluate_on_a_gpu_index_that_is_not_there_exits_2(monkeypatch, capsys):
    from ppo_lstm.evaluation import loading as evaluate
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    configured = []
    monkeypatch.setattr(evaluate, "configure_numerics", lambda deterministic: configured.append(deterministic))
    with pytest.raises(UsageError, match=r"--device cuda:7: this machine has 1 visible GPU \(cuda:0\)"):
        evaluate.policy_device("cuda:7")
    assert configured == []
    assert evaluate.policy_device("cuda:0") == torch.device("cuda", 0)
    assert configured == [True]  # evaluation runs with the numerics training ran with


@pytest.mark.e2e
def test_checkpoints_hold_only_cpu_tensors(finished_run):
    path = CheckpointDir(finished_run / "checkpoints").latest()
    code = ("import sys, torch\n"
            "state = torch.load(sys.argv[1], weights_only=True)\n"  # a plain load: no map_location
            "found = []\n"
            "def walk(x):\n"
            "    if torch.is_tensor(x): found.append(x.device.type)\n"
            "    elif isinstance(x, dict): [walk(v) for v in x.values()]\n"
            "    elif isinstance(x, (list, tuple)): [walk(v) for v in x]\n"
            "walk(state)\n"
            "print(len(found), sorted(set(found)))\n")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                         env=env_for_child({"CUDA_VISIBLE_DEVICES": ""}), cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    count, devices = out.stdout.split(" ", 1)
    assert int(count) > 20 and devices.strip() == "['cpu']"


VERDICT_SCRIPT = """
import sys
from ppo_lstm.train import trainer
from ppo_lstm.config.command_line import parse_command_line
from ppo_lstm.distributed import launch
from ppo_lstm.train.worker import train_worker

original = trainer.Trainer._update

def update(self, batch, schedules):
    if self.rank == 1 and self.state.update == 2:  # rank 1 alone sees update 3 go non-finite
        batch = batch.map(lambda name, tensor: tensor.clone())
        batch.advantages[0, 0] = float("nan")
    return original(self, batch, schedules)

trainer.Trainer._update = update
config = parse_command_line(sys.argv[1:]).config
sys.exit(launch(config, "cpu", train_worker))
"""


@pytest.mark.e2e
def test_a_non_finite_verdict_of_one_rank_is_acted_on_by_every_rank(tmp_path):
    """Two real gloo workers; only rank 1's copy of the batch holds a NaN at update 3. Its
    share's loss reaches rank 0 through the gradient step's sum, so both ranks find the
    update non-finite and undo it: both end bitwise equal without a sync check, and the
    warning names both ranks."""
    (tmp_path / "verdict.py").write_text(VERDICT_SCRIPT)
    dump = tmp_path / "dump"
    dump.mkdir()
    result = run_cli(tmp_path, *TINY, "--distributed", "--num-workers", "2", "--episodes", "16",
                     "--sync-check-interval", "1000", "--checkpoint-interval", "1000", "--shard-update", "on",
                     launcher=[sys.executable, "verdict.py"], env={"PPO_LSTM_DUMP_FINAL_DIR": str(dump)})
    assert result.returncode == 0, result.output
    assert "warning: update 3 gave non-finite losses or parameters on ranks 0, 1; skipped (1 in a row)" \
        in result.stdout
    assert result.output.count("non-finite") == 1 and "diverged" not in result.output
    rank0, rank1 = (torch.load(dump / f"rank{r}_final.pt", weights_only=True) for r in (0, 1))
    assert_models_equal(rank0["model"], rank1["model"])
    for key, state in rank0["optimizer"]["state"].items():
        for name, value in state.items():
            assert torch.equal(value, rank1["optimizer"]["state"][key][name]), (key, name)


def test_the_sync_count_skips_the_sync_debug_modes_own_prototype_warning():
    # The two messages' words as torch 2.11 printed them on an H200: the first use of the mode in a
    # process warns once that it is a prototype, and that is no sync (it made the first count one too high).
    prototype = ("Synchronization debug mode is a prototype feature and does not yet detect all synchronizing "
                 "operations (Triggered internally at /pytorch/c10/cuda/CUDAFunctions.cpp)")
    sync = "called a synchronizing CUDA operation (Triggered internally at /pytorch/c10/cuda/CUDAFunctions.cpp)"
    assert not cuda_setup.is_sync_warning(UserWarning(prototype))
    assert cuda_setup.is_sync_warning(UserWarning(sync))
