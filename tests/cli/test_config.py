"""The config dataclass is the single source of every flag."""
import dataclasses

import pytest

from envs.config import EnvConfig
from ppo_lstm.config.plan import steps_per_env
from ppo_lstm.config.checks import validate
from ppo_lstm.config.command_line import build_parser, parse_command_line
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.distributed import episode_share, remaining_episode_shares, trades_history
from ppo_lstm.errors import UsageError


def all_flags():
    fields = [f for f in dataclasses.fields(TrainConfig) if f.name != "env"] + list(dataclasses.fields(EnvConfig))
    return ["--" + f.name.replace("_", "-") for f in fields]


def test_every_field_is_a_flag_with_its_default_in_help():
    text = build_parser("train_ppo_lstm.py").format_help()
    for flag in all_flags():
        assert flag in text, flag
    assert "(default: 1000)" in text and "--num-workers" in text


def test_defaults_come_from_the_dataclass():
    assert parse_command_line([]).config == TrainConfig()


def test_flags_parse_into_nested_config():
    c = parse_command_line(["--episodes", "7", "--no-short", "--market", "regime", "--num-workers", "3",
                            "--no-clip-vloss", "--target-kl", "0.02", "--fee-bps", "2.5"]).config
    assert (c.episodes, c.num_workers, c.clip_vloss, c.target_kl) == (7, 3, False, 0.02)
    assert (c.env.no_short, c.env.market, c.env.fee_bps) == (True, "regime", 2.5)
    assert TrainConfig.from_dict(c.to_dict()) == c


def test_bad_flag_is_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_command_line(["--market", "moon"]).config
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "moon" in err


def test_update_interval_split():
    c = TrainConfig(update_interval=128, num_envs=8)
    assert steps_per_env(c, 1) == 16 and steps_per_env(c, 4) == 4
    with pytest.raises(UsageError, match=r"--update-interval 100 .* multiple of 16"):
        steps_per_env(TrainConfig(update_interval=100, num_envs=8), 2)


def test_episode_share_gives_remainder_to_rank_0():
    assert [episode_share(11, r, 2) for r in range(2)] == [6, 5]
    assert sum(episode_share(10, r, 3) for r in range(3)) == 10


def test_remaining_shares_after_a_resume_end_exactly_at_the_total():
    assert remaining_episode_shares(11, [0, 0], 2) == [6, 5]  # a fresh run: the plain split
    assert remaining_episode_shares(22, [5, 3], 2) == [6, 8]  # mid-run: each rank finishes its own share
    # 11 of 12 done on 4 ranks: rank 0 already counted 5 > its new share of 3; what is
    # left (1 episode) is split afresh instead of letting three ranks add one each.
    assert remaining_episode_shares(12, [5, 2, 2, 2], 4) == [1, 0, 0, 0]
    assert remaining_episode_shares(6, [], 4) == [3, 1, 1, 1]  # a changed layout splits what is left
    assert remaining_episode_shares(10, [6, 5], 2) == [0, 0]  # nothing left


def test_history_goes_to_rank_0_unless_all_ranks_asked():
    with_data = TrainConfig(data="prices.csv")
    assert [trades_history(with_data, r) for r in range(3)] == [True, False, False]
    everyone = TrainConfig(data="prices.csv", data_all_ranks=True)
    assert [trades_history(everyone, r) for r in range(3)] == [True, True, True]
    assert not trades_history(TrainConfig(), 0)


@pytest.mark.parametrize("changes, message", [
    ({"episodes": 0}, "--episodes must be a positive count"),
    ({"num_envs": -1}, "--num-envs must be a positive count"),
    ({"gamma": 1.5}, "--gamma must be within"),
    ({"learning_rate_actor": 1e38}, "--learning-rate-actor must be within"),
    ({"learning_rate_critic": 0.0}, "--learning-rate-critic must be within"),
    ({"minibatches": 65}, "--minibatches 65 is more than the 64 env sequences"),
    ({"env": EnvConfig(market="moon")}, "--market 'moon' is unknown"),
    ({"env": EnvConfig(window=0)}, "--window must be at least 1"),
    ({"spin_ms": -1.0}, "--spin-ms must be within"),
])
def test_validate_rejects_impossible_settings(changes, message):
    with pytest.raises(UsageError, match=message):
        validate(dataclasses.replace(TrainConfig(), **changes))


def test_flags_page_documents_every_flag_and_readme_starts_with_the_two_commands():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    flags_page = (root / "docs" / "flags.md").read_text()  # generated: tests/docs/test_docs.py keeps it current
    for flag in all_flags():
        assert f"`{flag}" in flags_page, flag
    readme = (root / "README.md").read_text()
    main_job, test_command = (block.split("\n")[0] for block in readme.split("```bash\n", 3)[1:3])
    assert main_job == "pip install torch==2.13.0 -e . && python train_ppo_lstm.py --market regime --episodes 800"
    assert test_command == 'pip install torch==2.13.0 -e ".[test]" && python -m pytest -q -n auto --dist loadfile'
    assert test_command in (root / ".ci" / "run").read_text()
