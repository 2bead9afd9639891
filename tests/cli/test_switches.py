"""Every switch has an opposite on the command line, and a config file's values are checked
as strictly as the command line's (value counts, mutually exclusive options)."""
from __future__ import annotations

from pathlib import Path

import pytest

from ppo_lstm.config.command_line import build_parser as train_parser, parse_command_line
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.config.files import keyed_options
from ppo_lstm.config.flags import parse_args
from ppo_lstm.deploy.export_onnx import build_parser as export_parser
from ppo_lstm.deploy.predict import build_parser as predict_parser
from ppo_lstm.errors import Switch, UsageError, opposite
from ppo_lstm.evaluation.cli import build_parser as evaluate_parser

PARSERS = [train_parser, evaluate_parser, predict_parser, export_parser]


def write(tmp_path: Path, text: str, name: str = "run.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_the_opposite_rule():
    assert opposite("--overwrite") == "--no-overwrite" and opposite("--no-overwrite") == "--overwrite"
    assert opposite("--no-short") == "--short"


@pytest.mark.parametrize("build", PARSERS)
def test_every_switch_of_every_command_has_its_opposite(build):
    parser = build()
    for item in [*parser._actions, *parser._mutually_exclusive_groups]:
        item.required = False  # parse the switches alone
    switches = {id(a): a for a in keyed_options(parser).values() if a.nargs == 0}.values()
    for action in switches:
        assert isinstance(action, Switch), action.option_strings
        first = action.option_strings[0]
        assert opposite(first) in action.option_strings
        namespace = parser.parse_known_args([first, opposite(first)])[0]
        assert getattr(namespace, action.dest) is False  # the last one wins
        namespace = parser.parse_known_args([opposite(first), first])[0]
        assert getattr(namespace, action.dest) is True


def test_the_command_line_undoes_every_switch_a_config_file_turns_on(tmp_path):
    switches = [a for a in keyed_options(train_parser()).values() if isinstance(a, Switch)]
    flipped = {a.option_strings[0][2:]: not a.default for a in switches}
    assert {"overwrite", "distributed", "no-short", "resume", "deterministic"} <= set(flipped)
    path = write(tmp_path, "".join(f"{key}: {str(value).lower()}\n" for key, value in flipped.items()))
    from_file = parse_command_line(["--config", path]).config
    undo = [opposite("--" + key) if value else "--" + key for key, value in flipped.items()]
    undone = parse_command_line(["--config", path, *undo]).config
    assert undone == TrainConfig()
    assert from_file.overwrite and from_file.env.no_short and not from_file.deterministic


def test_short_undoes_no_short_and_no_overwrite_lets_a_file_resume(tmp_path):
    path = write(tmp_path, "overwrite: true\nno-short: true\n")
    config = parse_command_line(["--config", path, "--no-overwrite", "--resume", "--short"]).config
    assert (config.overwrite, config.resume, config.env.no_short) == (False, True, False)


def test_evaluate_and_predict_switches_undo_their_files(tmp_path):
    path = write(tmp_path, "checkpoint: c.pt\njson: true\nsample: true\n")
    args = parse_args(evaluate_parser(), ["--config", path, "--no-json", "--no-sample"]).namespace
    assert (args.json, args.sample) == (False, False)
    path = write(tmp_path, "checkpoint: c.pt\ndata: d.csv\njson: true\n", "predict.yaml")
    assert parse_args(predict_parser(), ["--config", path, "--no-json"]).namespace.json is False


def test_a_file_key_is_the_switch_not_its_opposite(tmp_path):
    with pytest.raises(UsageError, match=r"line 1: unknown key 'short'; write 'no-short: false' instead"):
        parse_args(train_parser(), ["--config", write(tmp_path, "short: true\n")])
    with pytest.raises(UsageError, match=r"unknown key 'no-overwrite'; write 'overwrite: false' instead"):
        parse_args(train_parser(), ["--config", write(tmp_path, "no-overwrite: true\n")])


@pytest.mark.parametrize("value, got", [("101.5", "got 101.5"), ("[101.5, 1, 7]", "got a list of 3"),
                                        ("[101.5]", "got a list of 1")])
def test_a_multi_value_key_takes_exactly_its_count(tmp_path, value, got):
    path = write(tmp_path, f"checkpoint: c.pt\ndata: d.csv\nfill: {value}\n")
    with pytest.raises(UsageError) as error:
        parse_args(predict_parser(), ["--config", path])
    message = str(error.value)
    assert message == f"{path}, line 3: 'fill' takes a list of 2 values (PRICE, LOTS), as its flag takes 2, {got}"


def test_a_multi_value_key_with_its_count_reads_as_the_flag(tmp_path):
    path = write(tmp_path, "checkpoint: c.pt\ndata: d.csv\nfill: [101.5, 1]\n")
    assert parse_args(predict_parser(), ["--config", path]).namespace.fill == [101.5, 1.0]
    path = write(tmp_path, 'checkpoint = "c.pt"\ndata = "d.csv"\nfill = [101.5, -1, 3]\n', "p.toml")
    with pytest.raises(UsageError, match=r"p.toml: 'fill' takes a list of 2 values .* got a list of 3"):
        parse_args(predict_parser(), ["--config", path])


def test_mutually_exclusive_keys_are_refused_together(tmp_path):
    path = write(tmp_path, "checkpoint: c.pt\nmodel: m.onnx\ndata: d.csv\n")
    with pytest.raises(UsageError) as error:
        parse_args(predict_parser(), ["--config", path])
    assert str(error.value) == (f"{path}: 'checkpoint' (line 1) and 'model' (line 2) exclude each other; "
                                f"keep one of them")
    path = write(tmp_path, "checkpoint: c.pt\nmodel: null\ndata: d.csv\n")  # null sets nothing
    assert parse_args(predict_parser(), ["--config", path]).namespace.checkpoint == Path("c.pt")


def test_the_command_line_refuses_both_as_well(capsys):
    with pytest.raises(SystemExit) as exit_info:
        predict_parser().parse_args(["--checkpoint", "c.pt", "--model", "m.onnx", "--data", "d.csv"])
    assert exit_info.value.code == 2 and "not allowed with" in capsys.readouterr().err


def test_help_lists_both_halves():
    text = train_parser().format_help()
    assert "--no-short, --short" in text and "--overwrite, --no-overwrite" in text
