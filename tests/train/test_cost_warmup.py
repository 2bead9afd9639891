"""--cost-warmup: the training envs' costs ramp linearly from 0 to the configured fee and slippage."""
import pytest
import torch

from envs.config import EnvConfig
from ppo_lstm.config.checks import validate
from ppo_lstm.config.migrate import migrate_settings
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.distributed import LocalComm, Worker
from ppo_lstm.errors import UsageError
from ppo_lstm.train.shutdown import StopRequest
from ppo_lstm.train.trainer import Trainer


def test_costs_ramp_from_zero_to_the_configured_values(tmp_path):
    config = TrainConfig(episodes=32, num_envs=8, update_interval=64, seed=1, progress=False, cost_warmup=0.5,
                         log_file=str(tmp_path / "log"), checkpoint_dir=str(tmp_path / "ck"),
                         env=EnvConfig(market="regime", episode_length=16, fee_bps=10.0, slippage_bps=2.0))
    trainer = Trainer(config, Worker(LocalComm(), 0, torch.device("cpu")), None, StopRequest())
    ledger = trainer.rollout.env.core.ledger
    seen = []
    collect = trainer.rollout.collect

    def spy(update):
        seen.append((trainer.state.env_steps, trainer.state.global_episodes, ledger.fee, ledger.slip))
        return collect(update)

    trainer.rollout.collect = spy
    assert trainer.run() == 0
    assert seen[0] == (0, 0, 0.0, 0.0)
    for steps, episodes, fee, slip in seen:  # the run's progress: 32 episodes of 16 steps, or 512 steps
        frac = min(1.0, max(steps / 512, episodes / 32) / 0.5)
        assert fee == pytest.approx(frac * 10e-4) and slip == pytest.approx(frac * 2e-4)
    fees = [fee for _, _, fee, _ in seen]
    assert len(set(fees[:4])) == 4  # smooth between the waves of episodes: every update of the first half its own
    assert fees[-1] == pytest.approx(10e-4)


def test_cost_warmup_outside_0_1_is_a_usage_error():
    with pytest.raises(UsageError, match="--cost-warmup"):
        validate(TrainConfig(cost_warmup=1.5))


def test_a_checkpoint_from_before_the_flag_keeps_full_costs():
    saved = TrainConfig().to_dict()
    del saved["cost_warmup"], saved["batch_rule"]
    assert TrainConfig.from_dict(migrate_settings(saved, 1, "test")).cost_warmup == 0.0
    assert TrainConfig.from_dict(TrainConfig().to_dict()).cost_warmup == TrainConfig().cost_warmup
