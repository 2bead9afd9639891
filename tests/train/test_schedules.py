"""--cost-warmup and --anneal-lr follow one clock, the run's progress: the larger of its env steps
and its finished episodes, each as a share of what --episodes makes. Rule 1 keeps the two clocks
of runs begun before (the rates on the plan's env steps, the costs on finished episodes)."""
from __future__ import annotations

import math

import pytest

from envs.config import EnvConfig
from ppo_lstm.config.plan import BatchPlan
from ppo_lstm.config.schedule import run_progress, schedules_at
from ppo_lstm.config.schema import TrainConfig

ENV = EnvConfig(episode_length=16)  # 100 episodes make 1,600 env steps


def config(**kw) -> TrainConfig:
    return TrainConfig(**{"episodes": 100, "num_envs": 6, "cost_warmup": 0.5, "env": ENV, **kw})


def test_both_schedules_read_one_progress():
    c = config()
    plan = BatchPlan.of(c)
    assert run_progress(c, 400, 20) == 0.25  # env steps ahead, between the waves in which episodes end
    assert tuple(schedules_at(c, plan, 400, 20)) == (0.5, 0.75)
    assert run_progress(c, 400, 40) == 0.4  # episodes that ended early carry the clock
    assert tuple(schedules_at(c, plan, 400, 40)) == (0.8, 0.6)
    assert tuple(schedules_at(c, plan, 1_200, 100)) == (1.0, 0.0)  # the last episode ends both, early or not
    assert tuple(schedules_at(c, plan, 3_200, 100)) == (1.0, 0.0)  # never past the end
    assert tuple(schedules_at(config(cost_warmup=0.0, anneal_lr=False), plan, 400, 20)) == (1.0, 1.0)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_the_clock_does_not_depend_on_the_layout(world_size):
    """The same counts give the same schedules on any batch or worker count, so a resume onto another goes on."""
    small, large = config(num_envs=2), config(num_envs=32)
    for steps, episodes in [(0, 0), (512, 30), (1_000, 62)]:
        assert schedules_at(small, BatchPlan.of(small), steps, episodes) == \
            schedules_at(large, BatchPlan.of(large, world_size), steps, episodes)


def test_rule_1_keeps_the_clocks_its_runs_trained_on():
    c = config(schedule_rule=1)
    plan = BatchPlan.of(c)  # 6 envs x 16 steps: 96 transitions, 17 updates make 1,632 env steps
    assert plan.batch == 96 and plan.updates_for(100, 16) == 17
    costs, rates = schedules_at(c, plan, 400, 20)
    assert costs == 20 / (0.5 * 100)  # on finished episodes only, bit for bit as those runs computed it
    assert rates == 1.0 - 400 / 1_632  # on the plan's env steps
    assert schedules_at(c, plan, 400, 40).rates == rates  # early episodes do not move the rates
    assert math.isclose(schedules_at(config(), plan, 400, 20).rates, 0.75)
