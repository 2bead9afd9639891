"""The batch rule: --num-envs and the worker count pick the batch, its minibatches and the
learning rates; explicit flags win (docs/batch_scaling.md)."""
import dataclasses
import math

import pytest

from ppo_lstm.config.plan import BASE_RATES, BatchPlan, DEFAULT_RATE_CAP, SAVED_RATE_CAP, describe_batch, learning_rates, minibatches, rate_scale, rule_minibatches, rule_steps, steps_per_env, update_batch
from ppo_lstm.config.plan import shares as sequence_shares
from ppo_lstm.config.checks import validate
from ppo_lstm.config.migrate import migrate_settings
from ppo_lstm.config.command_line import parse_command_line
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.errors import UsageError


@pytest.mark.parametrize("num_envs, workers, batch, count, scale", [
    (8, 1, 128, 2, math.sqrt(2)),  # 2 minibatches of 4 sequences (64 transitions): sqrt(64 / 32)
    (4, 1, 64, 1, math.sqrt(2)),  # 1 of 4 sequences
    (2, 1, 32, 1, 1.0),  # 1 of 2 sequences, 32 transitions
    (12, 1, 192, 3, math.sqrt(2)),  # 16 steps under 16 sequences: 3 of 4 sequences
    (16, 1, 128, 2, math.sqrt(2)),  # 8 steps from 16 to 31 sequences: 2 of 8 sequences (64 transitions)
    (8, 2, 128, 2, math.sqrt(2)),  # the same batch on 2 workers
    (12, 2, 192, 3, math.sqrt(2)),  # 3 of 8 sequences
    (20, 1, 160, 2, math.sqrt(2.5)),  # 2 of 10 sequences (80 transitions): 4 of 5 would hold under 64
    (32, 1, 512, 4, 2.0),  # 16 steps again from 32 sequences: 4 of 8
    (64, 1, 1024, 4, math.sqrt(8)),
    (8, 4, 512, 4, 2.0),
    (32, 4, 2048, 4, 4.0),
    (128, 1, 2048, 4, 4.0),
    (512, 1, 8192, 4, 4.0),  # capped: sqrt(64) = 8
    (4096, 1, 65536, 4, 4.0),  # capped: sqrt(512) = 22.6
    (1024, 4, 65536, 4, 4.0),
])
def test_num_envs_and_workers_pick_the_batch_its_minibatches_and_the_rates(num_envs, workers, batch, count, scale):
    config = TrainConfig(num_envs=num_envs)
    assert update_batch(config, workers) == batch
    assert steps_per_env(config, workers) == rule_steps(num_envs * workers) == batch // (num_envs * workers)
    assert minibatches(config, workers) == count
    assert rate_scale(config, workers) == pytest.approx(scale)
    assert learning_rates(config, workers) == pytest.approx((BASE_RATES[0] * scale, BASE_RATES[1] * scale))
    validate(config, workers)


def test_the_rule_keeps_at_least_4_sequences_in_a_minibatch_and_at_most_4_minibatches():
    assert [rule_minibatches(s, rule=2) for s in (1, 2, 4, 6, 7, 8, 12, 16, 18, 20, 64, 4096)] == \
        [1, 1, 1, 1, 1, 2, 3, 4, 3, 4, 4, 4]
    assert [rule_minibatches(s) for s in (1, 2, 4, 6, 7, 8, 12, 13, 16, 18, 20, 35, 64, 127, 4096)] == \
        [1, 1, 1, 1, 1, 2, 3, 3, 4, 4, 4, 4, 4, 4, 4]
    for sequences in range(1, 301):
        for rule in (1, 2):  # minibatches that divide the sequences
            count = rule_minibatches(sequences, rule=rule)
            assert sequences % count == 0 and count <= 4
            assert sequences // count >= 4 or count == 1
        count = rule_minibatches(sequences)  # version 3: no cliff, as many as hold 4 sequences each, up to 4
        assert count == max(1, min(4, sequences // 4))
    validate(TrainConfig(num_envs=6))  # 6 envs: 1 minibatch, where 4 fixed minibatches did not divide them


@pytest.mark.parametrize("workers", range(1, 9))
def test_every_sequence_count_gets_minibatches_of_at_least_the_least_size_without_a_cliff(workers):
    """Version 3 of the rule over every env count from 1 to 300 and 1 to 8 workers: minibatches that
    differ by one sequence at most, each holding the least the rule asks (or one minibatch where the
    batch is too small for two), and rates that grow with the batch, never jumping back."""
    previous_scale = 0.0
    for num_envs in range(1, 301):
        config = TrainConfig(num_envs=num_envs)
        sequences, steps = num_envs * workers, steps_per_env(config, workers)
        count = minibatches(config, workers)
        sizes = [s.stop - s.start for s in sequence_shares(sequences, count)]
        least = max(4, math.ceil(64 / steps))
        assert max(sizes) - min(sizes) <= 1 and sum(sizes) == sequences
        assert min(sizes) >= least or count == 1
        assert count == max(1, min(4, sequences // least))
        validate(config, workers)
        if sequences >= 32:  # 16 steps from 32 sequences on: the scale only grows with the batch
            scale = rate_scale(config, workers)
            assert scale >= previous_scale - 1e-12, (num_envs, workers)
            previous_scale = scale


def test_rollouts_are_16_steps_but_8_from_16_to_31_sequences_where_a_minibatch_then_holds_8():
    assert [rule_steps(s) for s in (1, 8, 15, 16, 24, 31, 32, 64, 4096)] == [16, 16, 16, 8, 8, 8, 16, 16, 16]
    assert [rule_minibatches(s, 8, rule=2) for s in (16, 20, 24, 28, 30)] == [2, 2, 3, 2, 3]
    assert [rule_minibatches(s, 8) for s in (16, 20, 24, 28, 30)] == [2, 2, 3, 3, 3]
    for sequences in range(16, 32):
        count = rule_minibatches(sequences, 8, rule=2)
        assert sequences % count == 0 and (sequences // count >= 8 or count == 1)
    given = TrainConfig(num_envs=8, rollout_steps=16)  # as before the rule shortened them: 4 minibatches of 4
    assert (update_batch(given, 2), minibatches(given, 2)) == (256, 4)
    assert rate_scale(given, 2) == pytest.approx(math.sqrt(2))
    both = TrainConfig(num_envs=8, rollout_steps=32, update_interval=512)  # --update-interval sets the batch
    assert (update_batch(both, 2), steps_per_env(both, 2)) == (512, 32)
    with pytest.raises(UsageError, match="--rollout-steps must be a positive count"):
        validate(TrainConfig(rollout_steps=0))


def test_a_checkpoint_saved_before_rollout_steps_resumes_at_the_16_steps_it_trained_with():
    saved = TrainConfig(num_envs=16).to_dict()
    del saved["rollout_steps"], saved["batch_rule"]
    old = TrainConfig.from_dict(migrate_settings(saved, 1, "test"))
    assert old.batch_rule == 1 and (update_batch(old), minibatches(old)) == (256, 4)
    interval = TrainConfig(num_envs=8, update_interval=64).to_dict()  # 8 steps: 2 of 4 sequences under rule 1
    del interval["rollout_steps"], interval["batch_rule"]
    old = TrainConfig.from_dict(migrate_settings(interval, 1, "test"))
    assert (minibatches(old), rate_scale(old)) == (2, 1.0)
    assert (minibatches(TrainConfig(num_envs=8, update_interval=64)), rate_scale(TrainConfig(num_envs=8, update_interval=64))) == (1, pytest.approx(math.sqrt(2)))
    fresh = TrainConfig.from_dict(TrainConfig(num_envs=16).to_dict())
    assert fresh.rollout_steps is None and (update_batch(fresh), minibatches(fresh)) == (128, 2)


def test_the_scale_is_sqrt_of_the_minibatch_ratio_up_to_the_cap():
    scales = [rate_scale(TrainConfig(num_envs=n)) for n in (1, 2, 4, 8, 16, 64, 256, 512, 1024, 8192)]
    assert scales == sorted(scales) and scales[0] == pytest.approx(math.sqrt(0.5))  # 16 transitions / 32
    assert max(scales) == DEFAULT_RATE_CAP == 4.0 == rate_scale(TrainConfig(num_envs=128))
    assert rate_scale(TrainConfig(num_envs=1), 64) == pytest.approx(math.sqrt(8))  # 64 workers x 1 env: 4 of 256


def test_a_given_minibatch_count_leaves_the_rates_on_the_batch():
    """As the rates were before the rule picked minibatches: sqrt(U / 128), whatever the count."""
    for count, scale in ((4, 1.0), (2, 1.0), (1, 1.0), (8, 1.0)):
        assert rate_scale(TrainConfig(num_envs=8, minibatches=count)) == pytest.approx(scale)
    assert rate_scale(TrainConfig(num_envs=64, minibatches=8)) == pytest.approx(math.sqrt(8))
    assert minibatches(TrainConfig(num_envs=8, minibatches=4)) == 4


def test_a_checkpoint_saved_with_4_minibatches_resumes_with_them_and_its_rates():
    saved = TrainConfig(num_envs=8).to_dict()
    saved["minibatches"] = 4  # every version before the rule picked minibatches saved the count
    old = TrainConfig.from_dict(saved)
    assert minibatches(old) == 4 and rate_scale(old) == 1.0
    fresh = TrainConfig.from_dict(TrainConfig(num_envs=8).to_dict())
    assert fresh.minibatches is None and minibatches(fresh) == 2 and rate_scale(fresh) == pytest.approx(math.sqrt(2))


def test_rate_cap_sets_the_cap_and_leaves_given_rates_alone():
    assert rate_scale(parse_command_line(["--num-envs", "512", "--rate-cap", "8"]).config) == pytest.approx(8.0)
    assert rate_scale(parse_command_line(["--num-envs", "4096", "--rate-cap", "8"]).config) == pytest.approx(8.0)
    assert rate_scale(parse_command_line(["--num-envs", "64", "--rate-cap", "2"]).config) == pytest.approx(2.0)
    given = parse_command_line(["--num-envs", "512", "--rate-cap", "2", "--learning-rate-actor", "0.002"]).config
    assert learning_rates(given) == pytest.approx((0.002, 2e-3))
    with pytest.raises(UsageError, match="--rate-cap must be > 0"):
        validate(dataclasses.replace(TrainConfig(), rate_cap=0.0))


def test_a_checkpoint_saved_before_rate_cap_keeps_the_cap_it_trained_with():
    saved = TrainConfig(num_envs=512).to_dict()
    del saved["rate_cap"], saved["batch_rule"]
    old = TrainConfig.from_dict(migrate_settings(saved, 1, "test"))
    assert old.rate_cap == SAVED_RATE_CAP == 8.0 and rate_scale(old) == pytest.approx(8.0)
    assert TrainConfig.from_dict(TrainConfig(num_envs=512).to_dict()).rate_cap == DEFAULT_RATE_CAP


def test_an_explicit_update_interval_sets_the_batch_and_the_rates_follow_it():
    config = TrainConfig(num_envs=8, update_interval=512)
    assert [update_batch(config, w) for w in (1, 2, 4)] == [512, 512, 512]  # global, whatever the workers
    assert [steps_per_env(config, w) for w in (1, 2, 4)] == [64, 32, 16]
    assert learning_rates(config, 4) == pytest.approx((6e-4, 2e-3))  # sqrt(512 / 128) = 2
    with pytest.raises(UsageError, match=r"--update-interval 100 .* multiple of 16"):
        steps_per_env(TrainConfig(update_interval=100, num_envs=8), 2)


def test_a_given_rate_is_used_as_it_is_and_the_other_follows_the_rule():
    both = parse_command_line(["--num-envs", "64", "--learning-rate-actor", "1e-4", "--learning-rate-critic", "5e-4"]).config
    assert learning_rates(both, 4) == (1e-4, 5e-4)
    actor_only = parse_command_line(["--num-envs", "64", "--learning-rate-actor", "1e-4"]).config
    assert learning_rates(actor_only, 1) == pytest.approx((1e-4, 1e-3 * math.sqrt(8)))
    from ppo_lstm.train.build import build_agent, build_optimizer
    optimizer = build_optimizer(build_agent(actor_only), learning_rates(actor_only, 1))
    assert [group["lr"] for group in optimizer.param_groups] == pytest.approx([1e-4, 1e-3 * math.sqrt(8)])


def test_the_start_up_line_says_what_was_picked_and_why():
    assert describe_batch(TrainConfig(num_envs=64), 2) == (
        "Batch: 2048 transitions per update = 2 worker(s) x 64 envs x 16 steps (default: 16 steps x envs x "
        "workers); 4 minibatches of 512, 4 epochs; learning rates 0.0012 / 0.004 (0.0003 / 0.001 x "
        "sqrt(2048/128) = x4)")
    assert describe_batch(TrainConfig(num_envs=4096), 1).endswith(
        "learning rates 0.0012 / 0.004 (0.0003 / 0.001 x4, the cap (--rate-cap), as sqrt(65536/128) = 22.6 is more)")
    assert describe_batch(TrainConfig(num_envs=8), 2) == (
        "Batch: 128 transitions per update = 2 worker(s) x 8 envs x 8 steps (default: 8 steps x envs x workers from "
        "16 to 31 env sequences); 2 minibatches of 64 (default: 4, fewer to keep at least 8 of the 16 env sequences "
        "in each), 4 epochs; learning rates 0.000424 / 0.00141 (0.0003 / 0.001 x sqrt(64/32, the minibatch's "
        "transitions) = x1.41)")
    assert describe_batch(TrainConfig(num_envs=16, rollout_steps=16), 1).startswith(
        "Batch: 256 transitions per update = 1 worker(s) x 16 envs x 16 steps (--rollout-steps); 4 minibatches of 64")
    explicit = TrainConfig(num_envs=8, update_interval=256, minibatches=2, learning_rate_critic=2e-3)
    assert describe_batch(explicit, 1) == (
        "Batch: 256 transitions per update = 1 worker(s) x 8 envs x 32 steps (--update-interval); 2 minibatches "
        "of 128, 4 epochs; learning rates 0.000424 / 0.002 (--learning-rate-critic as given, the other 0.0003 "
        "x sqrt(256/128) = x1.41)")


def test_a_run_that_trains_far_more_episodes_than_asked_says_so():
    from ppo_lstm.train.messages import episode_rounding_line

    line = episode_rounding_line(TrainConfig(num_envs=512, episodes=100), BatchPlan.of(TrainConfig(num_envs=512, episodes=100), 1))
    assert line == ("Episodes: the 512 envs end their episodes together, so --episodes 100 trains 512 episodes "
                    "(8 updates) and counts the first 100 in the log; give a multiple of 512 episodes or fewer "
                    "--num-envs to train about what you ask for")
    assert "trains 1024 episodes (8 updates)" in episode_rounding_line(TrainConfig(num_envs=512, episodes=600), BatchPlan.of(TrainConfig(num_envs=512, episodes=600), 2))
    # within a quarter of what was asked: no line (the README's 800 episodes at 64 envs run 832)
    assert episode_rounding_line(TrainConfig(num_envs=64, episodes=800), BatchPlan.of(TrainConfig(num_envs=64, episodes=800), 1)) is None
    assert episode_rounding_line(TrainConfig(num_envs=64, episodes=1024), BatchPlan.of(TrainConfig(num_envs=64, episodes=1024), 1)) is None


def test_rates_left_to_the_rule_are_saved_as_such_and_come_back_equal():
    config = parse_command_line(["--num-envs", "32"]).config
    assert config.learning_rate_actor is None and config.update_interval is None
    restored = TrainConfig.from_dict(config.to_dict())
    assert restored == config and learning_rates(restored, 2) == learning_rates(config, 2)


def test_a_bad_given_rate_is_still_refused():
    with pytest.raises(UsageError, match="--learning-rate-actor must be within"):
        validate(dataclasses.replace(TrainConfig(), learning_rate_actor=0.0))


def test_resume_keeps_the_picked_batch_and_rates(tmp_path):
    from tests.conftest import cli_in_process
    small = ["--num-envs", "4", "--episode-length", "16", "--window", "8", "--hidden-size", "16", "--lstm-size",
             "16", "--market", "regime", "--device", "cpu", "--seed", "3", "--no-progress"]
    first = cli_in_process(tmp_path, "--episodes", "8", *small)
    assert first.returncode == 0, first.stderr
    again = cli_in_process(tmp_path, "--episodes", "16", "--resume", "--no-progress")
    assert again.returncode == 0, again.stderr

    def batch_line(text: str) -> str:
        return next(line for line in text.splitlines() if line.startswith("Batch: ")).split("; episodes per")[0]
    picked = ("Batch: 64 transitions per update = 1 worker(s) x 4 envs x 16 steps (default: 16 steps x envs x "
              "workers); 1 minibatch of 64 (default: 4, fewer to keep at least 4 of the 4 env sequences in each), "
              "4 epochs; learning rates 0.000424 / 0.00141 (0.0003 / 0.001 x sqrt(64/32, the minibatch's "
              "transitions) = x1.41)")
    assert batch_line(first.stdout) == batch_line(again.stdout) == picked
    assert "Resumed from " in again.stdout and "Episode 16/16" in again.stdout


def test_resume_of_a_run_saved_before_rate_cap_keeps_its_rates(tmp_path):
    """A checkpoint whose config has no rate_cap (written before the flag) resumes at x8, as it trained."""
    import torch
    from tests.conftest import cli_in_process
    small = ["--num-envs", "256", "--episode-length", "16", "--window", "8", "--hidden-size", "16", "--lstm-size",
             "16", "--market", "regime", "--device", "cpu", "--seed", "3", "--no-progress"]
    first = cli_in_process(tmp_path, "--episodes", "256", *small)
    assert first.returncode == 0, first.stderr
    assert "learning rates 0.0012 / 0.004 (0.0003 / 0.001 x4, the cap" in first.stdout  # batch 4096: sqrt 5.66
    for path in (tmp_path / "checkpoints").glob("*.pt"):  # as an older version wrote it
        state = torch.load(path, weights_only=True)
        del state["config"]["rate_cap"], state["config"]["batch_rule"]
        state["format"] = 1
        torch.save(state, path)
    again = cli_in_process(tmp_path, "--episodes", "512", "--resume", "--no-progress")
    assert again.returncode == 0, again.stderr
    assert "learning rates 0.0017 / 0.00566 (0.0003 / 0.001 x sqrt(4096/128) = x5.66)" in again.stdout
    assert "Resumed from " in again.stdout


def test_rollout_steps_and_update_interval_together_are_refused_in_one_line(tmp_path):
    """Both set the batch: --update-interval would silently win, so the pair is refused."""
    from conftest import TINY, cli_in_process

    with pytest.raises(UsageError, match=r"--rollout-steps 4 and --update-interval 256 both set the batch"):
        parse_command_line(["--num-envs", "8", "--rollout-steps", "4", "--update-interval", "256"])
    result = cli_in_process(tmp_path, *TINY, "--rollout-steps", "4", "--episodes", "4")  # TINY has --update-interval
    assert result.returncode == 2 and len(result.error_lines()) == 1, result.output
    assert "--rollout-steps 4 and --update-interval 32 both set the batch" in result.stderr
    assert "Traceback" not in result.output
    assert parse_command_line(["--num-envs", "8", "--rollout-steps", "4"]).config.rollout_steps == 4  # alone: fine


def test_workers_shard_the_update_where_each_share_holds_enough_transitions():
    """--shard-update auto: shard where each worker's share of the smallest minibatch is at least 128
    transitions (64 envs on 2 workers: 256), else every worker computes the minibatches whole (8 envs on 2
    workers: 2 minibatches of 8 sequences of 8 steps, shares of 32); one worker never shards."""
    assert BatchPlan.of(TrainConfig(num_envs=64), 2).shards_update("auto")
    assert BatchPlan.of(TrainConfig(num_envs=32), 2).shards_update("auto")  # 4 of 16 sequences of 16: 128
    assert not BatchPlan.of(TrainConfig(num_envs=16), 2).shards_update("auto")  # 4 of 8 sequences: 64
    assert not BatchPlan.of(TrainConfig(num_envs=8), 2).shards_update("auto")
    assert BatchPlan.of(TrainConfig(num_envs=8), 2).shards_update("on")
    assert not BatchPlan.of(TrainConfig(num_envs=64), 2).shards_update("off")
    assert not any(BatchPlan.of(TrainConfig(num_envs=n), 1).shards_update(m) for n in (8, 64) for m in ("auto", "on"))
