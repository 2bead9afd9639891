"""Checkpoints outlive the code that wrote them: a run dir written by the code before the
package took its sub-package layout (``data/pre_layout_run``: TINY flags, seed 3, 4 episodes)
still evaluates to the very figures that code printed (``data/pre_layout_evaluate.json``,
``evaluate --checkpoint .../checkpoint_u00000002.pt --episodes 4 --seed 1 --json``), and
still resumes; a checkpoint the CLI writes today loads through the public API."""
import json
import shutil
from pathlib import Path

import pytest
import torch

from conftest import TINY, cli_in_process, load_state
from ppo_lstm import TrainConfig, load_policy
from ppo_lstm.evaluation.cli import main as evaluate_main

DATA = Path(__file__).resolve().parent / "data"
OLD_RUN = DATA / "pre_layout_run"
OLD_CHECKPOINT = OLD_RUN / "checkpoint_u00000002.pt"


def test_a_pre_layout_checkpoint_loads_through_the_public_api() -> None:
    agent, config = load_policy(OLD_CHECKPOINT)
    assert isinstance(config, TrainConfig)
    assert (config.seed, config.episodes, config.hidden_size, config.lstm_size) == (3, 4, 16, 16)
    state = torch.load(OLD_CHECKPOINT, weights_only=True)
    assert all(torch.equal(value, state["model"][name]) for name, value in agent.state_dict().items())


def test_a_pre_layout_checkpoint_evaluates_to_the_figures_the_old_code_printed(capsys) -> None:
    assert evaluate_main(["--checkpoint", str(OLD_CHECKPOINT), "--episodes", "4", "--seed", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    new_keys = ("late_start", "training_bars", "training_period", "sample")  # keys the old code did not print
    assert {key: report.pop(key) for key in new_keys} == dict.fromkeys(new_keys)  # none for simulated
    for side in ("agent", "buy_and_hold"):  # a key the old code did not print: fees_paid under a truer name
        assert report[side].pop("fees_and_slippage_paid") == report[side]["fees_paid"]
    assert _same_figures(report, json.loads((DATA / "pre_layout_evaluate.json").read_text()))



def _same_figures(got: object, expected: object) -> bool:
    """Every figure of ``expected`` equal in ``got`` (which may add keys the old code did not print),
    with floats to 1e-12 relative: the fixture was written on another processor, whose vectorised
    sums may round the last bit of a float differently."""
    if isinstance(expected, dict):
        return isinstance(got, dict) and expected.keys() <= got.keys() and all(
            _same_figures(got[key], value) for key, value in expected.items())
    if isinstance(expected, list):
        return isinstance(got, list) and len(got) == len(expected) and all(map(_same_figures, got, expected))
    if isinstance(expected, float) and isinstance(got, float):
        return got == pytest.approx(expected, rel=1e-12, abs=1e-12)
    return type(got) is type(expected) and got == expected


def test_a_pre_layout_run_dir_resumes(tmp_path: Path) -> None:
    shutil.copytree(OLD_RUN, tmp_path / "ck")
    result = cli_in_process(tmp_path, *TINY, "--episodes", "8", "--checkpoint-dir", "ck", "--resume")
    assert result.returncode == 0, result.output
    log = (tmp_path / "training.log").read_text()
    assert "Resumed from ck/checkpoint_u00000002.pt at episode 4/8 (update 2)" in log
    assert load_state(tmp_path / "ck" / "checkpoint_u00000004.pt")["counters"]["global_episodes"] == 8


def test_a_checkpoint_the_cli_writes_loads_through_the_public_api(tmp_path: Path) -> None:
    result = cli_in_process(tmp_path, *TINY, "--episodes", "4", "--checkpoint-dir", "ck")
    assert result.returncode == 0, result.output
    agent, config = load_policy(tmp_path / "ck" / "best.pt")
    assert (config.seed, config.episodes) == (3, 4)
    assert sum(p.numel() for p in agent.parameters()) > 0
