"""``--config FILE`` (YAML or TOML), ``--print-config`` and each run's ``config.yaml``.

Parsing, overrides and bad files go through ``parse_command_line`` or the CLI's ``main()`` in
this process; one tiny real run (a module fixture, also through ``main()`` in this process)
writes the ``config.yaml`` that the round trip, resume and evaluate tests read; torchrun and
the distributed script run for real in subprocesses.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, TINY, TRAIN, cli_in_process, env_for_child, run_cli, torchrun
from ppo_lstm.config.command_line import parse_command_line, save_run_config
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.errors import UsageError

# TINY as a config file, keys spelt with '-' and '_', and one value PyYAML reads as text (3e-4)
RUN_YAML = """\
# a tiny run on the CPU
num_envs: 2
update-interval: 32
episode_length: 16
window: 8
hidden-size: 16
lstm_size: 16
minibatches: 2
market: regime
device: cpu
seed: 3
progress: false
episodes: 2
learning-rate-actor: 3e-4
"""
RUN_TOML = """\
# the same run as TOML
num_envs = 2
update-interval = 32
episode_length = 16
window = 8
hidden-size = 16
lstm_size = 16
minibatches = 2
market = "regime"
device = "cpu"
seed = 3
progress = false
episodes = 2
learning-rate-actor = 3e-4
"""
RUN_FLAGS = [*TINY, "--episodes", "2", "--learning-rate-actor", "3e-4"]


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    """A tiny real run started from run.yaml, with --episodes 4 on the command line."""
    cwd = tmp_path_factory.mktemp("config_run")
    write(cwd / "run.yaml", RUN_YAML)
    result = cli_in_process(cwd, "--config", "run.yaml", "--episodes", "4", "--checkpoint-interval", "4")
    assert result.returncode == 0, result.output
    return cwd, result


# ------------------------------------------------------------------ reading files


@pytest.mark.parametrize("name, text", [("run.yaml", RUN_YAML), ("run.yml", RUN_YAML), ("run.toml", RUN_TOML)])
def test_a_file_gives_what_the_same_flags_give(tmp_path, name, text):
    command = parse_command_line(["--config", write(tmp_path / name, text)])
    config, given = command.config, command.given
    assert config == parse_command_line(RUN_FLAGS).config
    assert config.learning_rate_actor == 3e-4 and isinstance(config.env.window, int)
    assert {"num_envs", "update_interval", "env.episode_length", "env.market", "lstm_size"} <= given
    assert "clip" not in given and "env.fee_bps" not in given


def test_values_are_typed_as_the_flags_type_them(tmp_path):
    path = write(tmp_path / "typed.yaml", "fee-bps: 2\ndata: prices.csv\ndata-start: 2020-01-02\n"
                                          "data-end: 2021-03-04 16:00:00\nthreads: null\nclip-vloss: false\n"
                                          "no-short: true\nnum-gpus: 3\ndate-format: '%Y-%m-%d'\n")
    config = parse_command_line(["--config", path]).config
    assert config.env.fee_bps == 2.0 and isinstance(config.env.fee_bps, float)  # int -> float, as "--fee-bps 2"
    assert (config.data_start, config.data_end) == ("2020-01-02", "2021-03-04T16:00:00")  # YAML dates as text
    assert (config.threads, config.clip_vloss, config.env.no_short, config.num_workers) == (None, False, True, 3)
    assert config.date_format == "%Y-%m-%d"


def test_command_line_overrides_the_file_and_the_note_says_which(tmp_path):
    path = write(tmp_path / "run.yaml", RUN_YAML)
    command = parse_command_line(["--config", path, "--progress", "--seed", "9", "--window", "8", "--gamma", "0.9"])
    assert (command.config.seed, command.config.gamma, command.config.num_envs) == (9, 0.9, 2)
    assert command.note == (f"Config file {path}: 13 settings; the command line overrode --seed 3 -> 9, "
                            f"--progress false -> true")  # in the file's order; --window 8 is the file's value
    assert {"seed", "gamma", "num_envs", "env.window"} <= command.given
    assert parse_command_line(["--config", path]).note == f"Config file {path}: 13 settings, none overridden " \
                                                          f"on the command line"
    assert parse_command_line(["--seed", "9"]).note is None


def test_print_config_round_trips(tmp_path):
    flags = [*TINY, "--target-kl", "0.015", "--no-anneal-lr", "--num-gpus", "3", "--autocast", "bf16",
             "--data", "prices.csv", "--date-format", "%d.%m.%Y", "--data-start", "2020-01-01", "--no-short",
             "--fee-bps", "2.5", "--learning-rate-critic", "1e-5", "--overwrite", "--spin-ms", "0"]
    gpus = ["--device", "cuda", "--distributed", "--num-gpus", "4"]  # a run for another machine: nothing probed
    for args in ([], ["--ema-spans", "none"], flags, gpus):
        result = cli_in_process(tmp_path, *args, "--print-config")
        assert result.returncode == 0 and result.stderr == ""
        config = parse_command_line(["--config", write(tmp_path / "printed.yaml", result.stdout)]).config
        assert config == parse_command_line(args).config
        if args == ["--ema-spans", "none"]:  # no spans: written as none, since a null reads as "no value"
            assert "ema-spans: none" in result.stdout and config.env.ema_spans is None
        if args == flags:
            assert "autocast: bf16" in result.stdout and "date-format: '%d.%m.%Y'" in result.stdout
    assert "device: cuda" in result.stdout and "num-workers: 4" in result.stdout
    assert not (tmp_path / "checkpoints").exists()  # printing starts nothing


def test_a_config_file_an_older_version_wrote_reads_as_its_run_trained(tmp_path):
    """Before --ema-spans 500 and --feature-window 1024 were defaults, a saved config.yaml said
    `ema-spans: null` and `feature-window: 256` (without --features): no EMA entry, and no error."""
    text = cli_in_process(tmp_path, *TINY, "--print-config").stdout
    text = text.replace("ema-spans: '500'", "ema-spans: null").replace("feature-window: 1024", "feature-window: 256")
    assert "ema-spans: null" in text and "feature-window: 256" in text
    config = parse_command_line(["--config", write(tmp_path / "old.yaml", text)]).config
    assert config.env.ema_spans is None and config.env.obs_dim == 8 + 3


@pytest.mark.e2e
def test_distributed_script_reads_a_config_and_prints_it(tmp_path):
    write(tmp_path / "run.yaml", RUN_YAML)
    result = subprocess.run([sys.executable, str(ROOT / "train_ppo_lstm_distributed.py"), "--config", "run.yaml",
                             "--num-workers", "2", "--print-config"], cwd=tmp_path, capture_output=True, text=True,
                            env=env_for_child(), timeout=120)
    assert result.returncode == 0, result.stderr
    printed = yaml.safe_load(result.stdout)
    assert printed["distributed"] is True and printed["num-workers"] == 2 and printed["num-envs"] == 2


# ------------------------------------------------------------------ bad files


BAD_FILES = [
    ("bad.yaml", "num-env: 4\n", "bad.yaml, line 1: unknown key 'num-env'; did you mean 'num-envs'?"),
    ("bad.yaml", "seed: 1\nlearning-rate: 0.1\n", "line 2: unknown key 'learning-rate'; did you mean"),
    ("bad.yaml", "no-clip-vloss: true\n", "write 'clip-vloss: false' instead"),
    ("bad.yaml", "episodes: 4.5\n", "bad.yaml, line 1: 'episodes' takes an integer, got 4.5"),
    ("bad.yaml", "gamma: fast\n", "'gamma' takes a number, got 'fast'"),
    ("bad.yaml", "autocast: off\n", "'autocast' takes one of off, bf16, got false (quote"),
    ("bad.yaml", "market: moon\n", "'market' takes one of gbm, ou, regime, jump, garch, mixed, got 'moon'"),
    ("bad.yaml", "no-short: 1\n", "'no-short' takes true or false, got 1"),
    ("bad.yaml", "hidden-size: [16, 32]\n", "'hidden-size' takes an integer, got a list"),
    ("bad.yaml", "episodes: null\n", "'episodes' needs a value"),
    ("bad.yaml", "seed: 1\nseed: 2\n", "bad.yaml, line 2: key 'seed' is given twice (also on line 1)"),
    ("bad.yaml", "num-envs: 2\nnum_envs: 4\n", "line 2: 'num_envs' sets --num-envs, as 'num-envs' already does"),
    ("bad.yaml", "config: other.yaml\n", "'config' is an option of the command line only"),
    ("bad.yaml", "episodes: [4\n", "bad.yaml, line 2, column 1: not valid YAML"),
    ("bad.yaml", "- episodes\n- 4\n", "bad.yaml: a config file holds a mapping of flag names to values"),
    ("bad.yaml", "just text\n", "not the str 'just text'"),
    ("bad.toml", "episodes = \n", "bad.toml, line 1, column 12: not valid TOML"),
    ("bad.toml", "episodes = 4\nnum_envs = \"two\"\n", "bad.toml: 'num_envs' takes an integer, got 'two'"),
    ("bad.toml", "[ppo]\nclip = 0.1\n", "unknown key 'ppo'; settings are keys at the top level, not sections"),
    ("bad.json", "{}", "bad.json: a config file must be YAML (.yaml, .yml) or TOML (.toml)"),
    ("bad.yaml", b"seed: \xff\n", "bad.yaml: the config file is not UTF-8 text"),
]


@pytest.mark.parametrize("name, text, message", BAD_FILES, ids=[m[:40] for _, _, m in BAD_FILES])
def test_a_bad_file_is_one_line_exit_2(cwd, name, text, message):
    (cwd / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    result = cli_in_process(cwd, "--config", name, *TINY)
    assert result.returncode == 2
    assert result.error_lines() == [result.stderr.strip()] and result.stderr.startswith("error: "), result.stderr
    assert message in result.stderr, result.stderr
    assert not (cwd / "checkpoints").exists()


@pytest.mark.parametrize("make, message", [
    (lambda cwd: "missing.yaml", "missing.yaml: cannot read the config file (No such file or directory)"),
    (lambda cwd: (cwd / "folder.yaml").mkdir() or "folder.yaml", "folder.yaml: cannot read the config file"),
])
def test_an_unreadable_file_is_one_line_exit_2(cwd, make, message):
    result = cli_in_process(cwd, "--config", make(cwd))
    assert result.returncode == 2 and len(result.error_lines()) == 1 and message in result.stderr, result.stderr


def test_parse_command_line_raises_usage_error_for_a_bad_file(tmp_path):
    with pytest.raises(UsageError, match=r"unknown key 'epsiodes'; did you mean 'episodes'\?"):
        parse_command_line(["--config", write(tmp_path / "typo.yaml", "epsiodes: 3\n")])


# ------------------------------------------------------------------ a real run's config.yaml


def test_a_run_saves_config_yaml_that_reproduces_its_settings(trained):
    cwd, result = trained
    note = "Config file run.yaml: 13 settings; the command line overrode --episodes 2 -> 4"
    assert note in result.stdout.splitlines() and note in (cwd / "training.log").read_text()
    saved = cwd / "checkpoints" / "config.yaml"
    assert parse_command_line(["--config", str(saved)]).config == parse_command_line(["--config", str(cwd / "run.yaml"),
                                                                    "--episodes", "4", "--checkpoint-interval",
                                                                    "4"]).config
    text = saved.read_text()
    assert "resume: false" in text and "overwrite: false" in text and "episodes: 4" in text
    assert not list((cwd / "checkpoints").glob(".*.tmp"))  # written atomically, no temp file left


def test_a_saved_config_fed_back_neither_resumes_nor_overwrites(trained):
    cwd, _ = trained
    before = sorted(p.name for p in (cwd / "checkpoints").iterdir())
    result = cli_in_process(cwd, "--config", "checkpoints/config.yaml")
    assert result.returncode == 2 and len(result.error_lines()) == 1
    assert "--checkpoint-dir checkpoints already holds a run at episode 4/4" in result.stderr
    assert sorted(p.name for p in (cwd / "checkpoints").iterdir()) == before


def test_save_run_config_writes_resume_and_overwrite_false(tmp_path):
    config = TrainConfig(resume=True, overwrite=True, checkpoint_dir=str(tmp_path / "run"), episodes=7)
    path = save_run_config(config)
    assert path == tmp_path / "run" / "config.yaml"
    back = parse_command_line(["--config", str(path)]).config
    assert (back.resume, back.overwrite, back.episodes) == (False, False, 7)
    assert back == TrainConfig(checkpoint_dir=str(tmp_path / "run"), episodes=7)


def test_resume_with_a_config_that_changes_a_model_size_is_refused_like_the_flag(trained):
    cwd, _ = trained
    write(cwd / "bigger.yaml", "hidden-size: 32\n")
    by_file = cli_in_process(cwd, "--resume", "--config", "bigger.yaml")
    by_flag = cli_in_process(cwd, "--resume", "--hidden-size", "32")
    assert by_file.returncode == by_flag.returncode == 2
    assert by_file.stderr == by_flag.stderr and len(by_file.error_lines()) == 1
    assert "--hidden-size 32" in by_file.stderr


def test_resume_takes_the_config_file_as_command_line_settings(trained):
    cwd, _ = trained
    write(cwd / "longer.yaml", "episodes: 12\nfee-bps: 3\n")
    result = cli_in_process(cwd, "--resume", "--config", "longer.yaml", "--print-config")
    assert result.returncode == 0, result.stderr
    printed = yaml.safe_load(result.stdout)
    assert (printed["episodes"], printed["fee-bps"]) == (12, 3.0)  # the file's, over the checkpoint's
    assert (printed["hidden-size"], printed["seed"], printed["market"]) == (16, 3, "regime")  # the checkpoint's


def test_evaluate_reads_a_config_file(trained, capsys):
    from ppo_lstm.evaluation.cli import main as evaluate

    cwd, _ = trained
    path = write(cwd / "backtest.toml", f'checkpoint = "{cwd / "checkpoints"}"\nepisodes = 2\nseed = 5\n'
                                        f'json = true\n')
    assert evaluate(["--config", path, "--seed", "6"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)  # --json: stdout is the one JSON object, the note goes to stderr
    assert report["agent"]["trades"] >= 0
    assert err.strip() == f"Config file {path}: 4 settings; the command line overrode --seed 5 -> 6"
    assert evaluate(["--config", path, "--print-config"]) == 0
    printed = capsys.readouterr().out
    assert evaluate(["--config", write(cwd / "printed.yaml", printed), "--seed", "6"]) == 0
    assert json.loads(capsys.readouterr().out) == report  # the printed settings reproduce the backtest


def test_evaluate_bad_config_file_is_one_line_exit_2(tmp_path, capsys):
    from ppo_lstm.evaluation.cli import main as evaluate

    assert evaluate(["--config", write(tmp_path / "bad.yaml", "episode: 3\n")]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {tmp_path / 'bad.yaml'}, line 1: unknown key 'episode'; did you mean 'episodes'?\n"


# ------------------------------------------------------------------ torchrun


@pytest.mark.e2e
def test_torchrun_with_a_config_file(cwd):
    write(cwd / "run.yaml", RUN_YAML)
    result = run_cli(cwd, "--config", "run.yaml", "--episodes", "4",
                     launcher=torchrun("--standalone", "--nproc-per-node=2", TRAIN), timeout=120)
    assert result.returncode == 0, result.output
    note = "Config file run.yaml: 13 settings; the command line overrode --episodes 2 -> 4"
    assert result.stdout.splitlines().count(note) == 1  # rank 0 only
    saved = parse_command_line(["--config", str(cwd / "checkpoints" / "config.yaml")]).config
    assert saved == parse_command_line(["--config", str(cwd / "run.yaml"), "--episodes", "4"]).config
    assert "| Workers: 2" in (cwd / "training.log").read_text()


@pytest.mark.e2e
def test_torchrun_prints_the_config_once(cwd):
    write(cwd / "run.yaml", RUN_YAML)
    result = run_cli(cwd, "--config", "run.yaml", "--print-config",
                     launcher=torchrun("--standalone", "--nproc-per-node=2", TRAIN), timeout=120)
    assert result.returncode == 0, result.output
    assert result.stdout == cli_in_process(cwd, "--config", "run.yaml", "--print-config").stdout  # once, not per rank
    assert not (cwd / "checkpoints").exists()


def test_config_yaml_belongs_to_the_run(tmp_path):
    """A directory holding only a run's config.yaml is a run's: refused for a new run, moved by --overwrite."""
    from ppo_lstm.rundir.checkpoint import CheckpointDir

    path = save_run_config(TrainConfig(checkpoint_dir=str(tmp_path)))
    directory = CheckpointDir(tmp_path)
    with pytest.raises(UsageError, match="already holds files of an earlier run"):
        directory.refuse_if_taken()
    moved = directory.move_aside()
    assert moved is not None and (moved / "config.yaml").is_file() and not path.exists()


def test_several_data_paths_as_a_list_one_as_a_string_and_null_as_none(tmp_path):
    several = parse_command_line(["--config", write(tmp_path / "a.yaml", "data: [a.csv, b.csv]\n")]).config
    one = parse_command_line(["--config", write(tmp_path / "b.yaml", "data: [a.csv]\n")]).config
    none = parse_command_line(["--config", write(tmp_path / "c.yaml", "data: null\n")]).config
    assert several.data == ["a.csv", "b.csv"] and one.data == "a.csv" and none.data is None
    assert parse_command_line(["--config", write(tmp_path / "d.toml", 'data = ["a.csv", "b.csv"]\n')]).config == several
