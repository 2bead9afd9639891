"""The search space and every bad input of tune-ppo-lstm: one line on stderr, exit code 2."""
from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from envs.config import EnvConfig
from ppo_lstm.config.command_line import build_parser as train_parser
from ppo_lstm.config.migrate import SETTINGS_FORMAT
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.errors import UsageError
from ppo_lstm.tune.cli import main
from ppo_lstm.tune.report import run_settings
from ppo_lstm.tune.space import DEFAULT_SPACE, load_space, parse_space
from ppo_lstm.tune.storage import make_storage, open_study, record_settings
from tune_fixtures import TINY, write_space


def run_main(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([*TINY, *args])
        except SystemExit as stop:
            code = int(stop.code or 0)
    return code, out.getvalue(), err.getvalue()


def assert_one_line(err: str, *words: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for word in words:
        assert word in lines[0], lines[0]


def test_default_space_covers_the_documented_flags() -> None:
    space = load_space(None, train_parser())
    names = {d.name for d in space.dimensions}
    assert names == {"learning-rate-actor", "learning-rate-critic", "ent-coef", "gamma", "gae-lambda", "clip",
                     "epochs", "minibatches", "num-envs", "hidden-size", "lstm-size", "cost-warmup"}
    assert names == set(DEFAULT_SPACE)
    kinds = {d.name: (d.kind, d.integer) for d in space.dimensions}
    assert kinds["learning-rate-actor"] == ("log-uniform", False) and kinds["epochs"] == ("int", True)


def test_a_space_file_maps_flags_to_distributions(tmp_path: Path) -> None:
    path = write_space(tmp_path / "s.yaml", "fee_bps: {uniform: [1, 5]}\nupdate-interval: {log-uniform: [32, 512]}\n"
                                            "norm-adv: {choice: [true, false]}\n")
    space = load_space(path, train_parser())
    dims = {d.name: d for d in space.dimensions}
    assert dims["fee-bps"].dest == "env.fee_bps" and dims["fee-bps"].values == (1.0, 5.0)
    assert dims["update-interval"].integer and dims["update-interval"].kind == "log-uniform"
    assert dims["norm-adv"].values == (True, False)


@pytest.mark.parametrize("text, words", [
    ("lstm_sise: {choice: [32, 64]}\n", ["unknown flag 'lstm_sise'", "did you mean 'lstm-size'", "line 1"]),
    ("clip: {uniform: [0.3, 0.1]}\n", ["'clip: uniform' needs low < high", "[0.3, 0.1]"]),
    ("epochs: {int: [4, 4]}\n", ["low < high"]),
    ("lstm-size: {choice: []}\n", ["'lstm-size: choice' has nothing in it"]),
    ("gamma: {normal: [0, 1]}\n", ["needs one distribution"]),
    ("market: {uniform: [0, 1]}\n", ["'market' is not a number"]),
    ("lstm-size: {choice: [abc]}\n", ["'lstm-size' takes an integer"]),
    ("clip: {int: [1, 3]}\n", ["not an integer"]),
    ("ent-coef: {log-uniform: [0, 0.1]}\n", ["needs low > 0"]),
    ("", ["the space is empty"]),
    ("data-end: {choice: ['2020-12-31', '2021-12-31']}\n", ["'data-end' chooses the bars", "give it as a flag"]),
])
def test_bad_space_is_one_line_exit_2(tmp_path: Path, text: str, words: list[str]) -> None:
    path = write_space(tmp_path / "space.yaml", text)
    code, _, err = run_main("--out", str(tmp_path / "study"), "--space", path)
    assert code == 2
    assert_one_line(err, "error:", *words)
    assert not (tmp_path / "study").exists()  # nothing created for a bad space


def test_a_space_that_changes_the_studys_settings_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "study"
    out.mkdir()
    url = f"sqlite:///{out / 'study.db'}"
    study, created = open_study(make_storage(url), "study", url)
    assert created
    recorded_space = parse_space({"clip": {"uniform": [0.1, 0.3]}}, train_parser(), "x", {})
    from ppo_lstm.tune.config import parse_command_line
    base = parse_command_line([*TINY, "--out", str(out)]).base
    record_settings(study, {"settings_format": SETTINGS_FORMAT,
                            "space": __import__("json").loads(recorded_space.canonical()), "metric": "return",
                            "seeds": 1, "base": run_settings(base)})
    path = write_space(tmp_path / "space.yaml", "clip: {uniform: [0.1, 0.25]}\n")
    code, _, err = run_main("--out", str(out), "--space", path)
    assert code == 2
    assert_one_line(err, "study 'study' was created with space clip", "0.3", "0.25", "--study-name")
    code, _, err = run_main("--out", str(out), "--space", path.replace("space", "space"), "--clip", "0.2",
                            "--fee-bps", "3")
    assert code == 2 and "created with" in err
    assert len(study.get_trials()) == 0  # refused before any trial


def test_an_unreachable_storage_is_one_line(tmp_path: Path) -> None:
    code, _, err = run_main("--out", str(tmp_path / "s"), "--storage", "postgresql://u:secret@127.0.0.1:1/none")
    assert code == 2
    assert_one_line(err, "cannot reach the storage", "127.0.0.1:1")
    assert "secret" not in err
    code, _, err = run_main("--out", str(tmp_path / "s"), "--storage", "redis://localhost")
    assert code == 2
    assert_one_line(err, "not a storage")


@pytest.mark.parametrize("args, words", [
    ([], ["--out DIR is required"]),
    (["--out", "X", "--checkpoint-dir", "c"], ["--checkpoint-dir is set by the study"]),
    (["--out", "X", "--trials", "0"], ["at least 1"]),
    (["--out", "X", "--time-limit", "ten minutes"], ["--time-limit takes a positive duration"]),
    (["--out", "X", "--holdout-episodes", "0"], ["keep a hold-out"]),
    (["--out", "X", "--train-for", "soon"], ["--train-for takes a positive duration"]),
    (["--out", "X", "--report"], ["holds no study", "run the study first"]),
])
def test_bad_flags_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str],
                                words: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(*args)
    assert code == 2
    assert_one_line(err, *words)


def test_parse_space_rejects_a_list_flag() -> None:
    with pytest.raises(UsageError, match="cannot be tuned"):
        parse_space({"data": {"choice": ["a.csv"]}}, train_parser(), "x", {})


def test_without_optuna_the_error_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "optuna", None)  # import optuna raises ImportError
    code, _, err = run_main("--out", "X")
    assert code == 2
    assert_one_line(err, "needs Optuna and SQLAlchemy", "pip install 'ppo-lstm-trader[tune]'")


def test_the_pruners_step_is_the_episode_or_with_train_for_the_share_of_the_time() -> None:
    from ppo_lstm.config.schema import TrainConfig
    from ppo_lstm.tune.objective import TIME_STEPS, report_step

    row = {"episodes": "300", "wall_time_s": "5.0"}
    assert report_step(TrainConfig(episodes=1000), 0, row) == 300
    assert report_step(TrainConfig(episodes=1000), 2, row) == 2_300  # after two seeds' 1,000 episodes
    timed = TrainConfig(train_for="20s")
    assert report_step(timed, 0, row) == TIME_STEPS // 4  # 5 s of 20
    assert report_step(timed, 1, row) == TIME_STEPS + TIME_STEPS // 4
    assert report_step(timed, 0, {"episodes": "9", "wall_time_s": "25.0"}) == TIME_STEPS - 1  # past the time


def test_a_study_recorded_before_rate_cap_reads_as_the_x8_its_trials_trained_with():
    from ppo_lstm.errors import UsageError
    from ppo_lstm.tune.report import run_settings
    from ppo_lstm.tune.storage import check_settings
    now = {"trials": 4, "base": run_settings(TrainConfig(rate_cap=8.0, batch_rule=2, schedule_rule=1))}
    old = {"trials": 4, "base": {k: v for k, v in now["base"].items()  # format 1, before --rate-cap
                                 if k not in ("rate_cap", "batch_rule", "schedule_rule")}}
    check_settings("s", old, now)
    with pytest.raises(UsageError, match=r"created with base rate_cap = 8\.0, this command gives 4\.0"):
        check_settings("s", old, {**now, "base": run_settings(TrainConfig(batch_rule=2, schedule_rule=1))})
    with pytest.raises(UsageError, match=r"created with base batch_rule = 2, this command gives 3"):
        check_settings("s", old, {**now, "base": run_settings(TrainConfig(rate_cap=8.0, schedule_rule=1))})
    with pytest.raises(UsageError, match=r"created with base schedule_rule = 1, this command gives 2"):
        check_settings("s", old, {**now, "base": run_settings(TrainConfig(rate_cap=8.0, batch_rule=2))})
    recorded = {**now, "settings_format": 2}  # format 2 records every setting as it is
    check_settings("s", recorded, {**now, "settings_format": 2})


def test_a_study_recorded_before_ema_spans_reads_as_one_without_the_entry():
    from ppo_lstm.errors import UsageError
    from ppo_lstm.tune.report import run_settings
    from ppo_lstm.tune.storage import check_settings
    now = {"trials": 4, "base": run_settings(TrainConfig(env=EnvConfig(ema_spans="none"), batch_rule=2,
                                                         schedule_rule=1))}
    old = {"trials": 4, "base": {k: v for k, v in now["base"].items()  # before --ema-spans and --feature-window
                                 if k not in ("env.ema_spans", "env.feature_window", "batch_rule", "schedule_rule")}}
    check_settings("s", old, now)
    with pytest.raises(UsageError, match=r'created with base env.ema_spans = null, this command gives "500"'):
        check_settings("s", old, {**now, "base": run_settings(TrainConfig(batch_rule=2, schedule_rule=1))})


def test_a_base_setting_the_space_samples_is_not_compared_so_a_changed_default_does_not_refuse_the_study():
    from ppo_lstm.errors import UsageError
    from ppo_lstm.tune.report import run_settings
    from ppo_lstm.tune.storage import check_settings
    now = {"trials": 4, "base": run_settings(TrainConfig())}  # --minibatches left to the batch rule (None)
    old = {"settings_format": SETTINGS_FORMAT, "trials": 4,
           "base": {**now["base"], "minibatches": 4}}  # a study begun when 4 was the default
    check_settings("s", old, now, frozenset({"minibatches", "num_envs"}))  # its space samples both
    with pytest.raises(UsageError, match=r"created with base minibatches = 4, this command gives null"):
        check_settings("s", old, now)  # a space without them: every trial took the base's 4
    with pytest.raises(UsageError, match=r"created with base epochs = 4, this command gives 2"):
        check_settings("s", old, {**now, "base": run_settings(TrainConfig(epochs=2))},
                       frozenset({"minibatches"}))  # the others are still compared


def test_a_space_chooses_among_feature_windows_and_a_trial_gets_the_setting() -> None:
    """--feature-window takes text (one window or several), so a space chooses among settings; a trial's
    setting is the command line's: one window its int, several their text."""
    from ppo_lstm.tune.space import apply
    space = parse_space({"feature-window": {"choice": [256, "256, 1024,4096"]}}, train_parser(), "s.yaml", {})
    (dim,) = space.dimensions
    assert dim.dest == "env.feature_window" and not dim.integer
    base = TrainConfig(env=EnvConfig(features="a"))
    assert [apply(base, {dim.dest: v}).env.feature_window for v in dim.values] == [256, "256,1024,4096"]
    with pytest.raises(UsageError, match="'feature-window' is not a number"):
        parse_space({"feature-window": {"int": [256, 4096]}}, train_parser(), "s.yaml", {})
