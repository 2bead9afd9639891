"""Checkpoints of every earlier format resume and evaluate bitwise as the version that wrote them
did (``tests/fixtures/saved_runs``: one tiny run per format and batch rule, its checkpoint at
episode 16, the sha256 of the model that version trained from it to episode 32 on each kind of CPU
it was run on, and what evaluate-ppo-lstm printed for it); a file newer than this version is
refused in one line."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from conftest import cli_in_process
from fixture_hashes import cpu_key, model_sha256
from ppo_lstm.config.migrate import (CHECKPOINT_CHAIN, CHECKPOINT_FORMAT, SETTINGS_CHAIN, SETTINGS_FORMAT,
                                     migrate_checkpoint, migrate_settings)
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.errors import UsageError
from ppo_lstm.evaluation.cli import main as evaluate_main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "saved_runs"
NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "expected.json").is_file())


def _expected_sha256(expected: dict, name: str) -> str:
    """The hash the fixture's version trained to on this machine's kind of CPU (its key, else its
    vendor's): float kernels differ between CPUs, so bitwise results are compared on one kind."""
    key, by_cpu = cpu_key(), expected["final_model_sha256_by_cpu"]
    found = by_cpu.get(key) or by_cpu.get(key.split()[0])
    assert found, (f"{name} records no hash for a {key} CPU (only {sorted(by_cpu)}): run "
                   f"tests/fixtures/saved_runs/resume_fixture.sh {name} on a worktree of {expected['made_at']} "
                   f"and add its line to final_model_sha256_by_cpu")
    return found


def _fixture(tmp_path: Path, name: str) -> tuple[Path, dict]:
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / name, run)
    (run / "expected.json").unlink()
    return run, json.loads((FIXTURES / name / "expected.json").read_text())


def test_the_chains_step_through_every_format():
    assert sorted(CHECKPOINT_CHAIN) == list(range(1, CHECKPOINT_FORMAT))
    assert sorted(SETTINGS_CHAIN) == list(range(1, SETTINGS_FORMAT))
    assert len(NAMES) >= 2 and all(n.startswith("v") for n in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_a_checkpoint_of_an_earlier_format_resumes_bitwise_as_its_version_trained(tmp_path, monkeypatch, name):
    run, expected = _fixture(tmp_path, name)
    dump = tmp_path / "dump"
    dump.mkdir()
    monkeypatch.setenv("PPO_LSTM_DUMP_FINAL_DIR", str(dump))
    result = cli_in_process(tmp_path, "--resume", "--checkpoint-dir", "run", "--log-file", "run/training.log",
                            "--episodes", str(expected["resumed_to_episodes"]), "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "Settings: as in the checkpoint" in result.stdout
    assert model_sha256(dump / "rank0_final.pt") == _expected_sha256(expected, name)


@pytest.mark.parametrize("name", NAMES)
def test_a_checkpoint_of_an_earlier_format_evaluates_as_its_version_did(tmp_path, capsys, name):
    run, expected = _fixture(tmp_path, name)
    code = evaluate_main(["--checkpoint", str(run / expected["checkpoint"]), *expected["evaluate"]["args"],
                          "--json"])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["agent"] == expected["evaluate"]["agent"]


def test_a_checkpoint_of_a_newer_format_is_refused_in_one_line(tmp_path):
    run, expected = _fixture(tmp_path, NAMES[-1])
    path = run / expected["checkpoint"]
    state = torch.load(path, weights_only=True)
    state["format"] = CHECKPOINT_FORMAT + 1
    torch.save(state, path)
    result = cli_in_process(tmp_path, "--resume", "--checkpoint-dir", "run", "--no-progress")
    assert result.returncode == 2
    assert result.error_lines() == [f"error: {path.relative_to(tmp_path)} is of format {CHECKPOINT_FORMAT + 1}, "
                                    f"newer than this version of ppo-lstm-trader reads (up to {CHECKPOINT_FORMAT}); "
                                    f"upgrade ppo-lstm-trader to read it"]
    with pytest.raises(UsageError, match="unknown format 'x'"):
        migrate_checkpoint({"format": "x"}, "a file")


def test_settings_this_version_does_not_know_are_refused_not_ignored():
    saved = TrainConfig().to_dict()
    saved["later_setting"] = 1
    saved["env"]["later_env_setting"] = 2
    with pytest.raises(ValueError, match="later_setting, env.later_env_setting"):
        TrainConfig.from_dict(saved)


def test_format_2_settings_read_as_format_3_and_a_newer_format_is_refused():
    """Format 3 lets feature_window name several windows (text); a format-2 file's single int reads as it is,
    in a checkpoint's settings, an env (an ONNX model's) and a study's settings by dest."""
    from ppo_lstm.config.migrate import ENV_CHAIN, migrate_env, migrate_settings_by_dest
    from envs.config import EnvConfig
    saved = TrainConfig(env=EnvConfig(features="a", feature_window=512)).to_dict()
    assert saved["env"]["feature_window"] == 512
    assert SETTINGS_CHAIN[2](saved) == saved and ENV_CHAIN[2](saved["env"]) == saved["env"]
    assert migrate_env(saved["env"], 2, "a format-2 model") == saved["env"]
    by_dest = {"episodes": 4, "env.features": "a", "env.feature_window": 512}
    assert migrate_settings_by_dest(by_dest, 2, "a study")["env.feature_window"] == 512
    assert CHECKPOINT_CHAIN[2]({"format": 2, "config": saved}) == {"format": 3, "config": saved}
    several = TrainConfig(env=EnvConfig(features="a", feature_window="8,24")).to_dict()
    assert several["env"]["feature_window"] == "8,24" and TrainConfig.from_dict(several).env.feature_windows == (8, 24)
    newer = CHECKPOINT_FORMAT + 1
    for read in (lambda v: migrate_settings(saved, v, "f"), lambda v: migrate_env(saved["env"], v, "f")):
        with pytest.raises(UsageError, match=f"is of format {newer}, newer than this version of ppo-lstm-trader "
                                             rf"reads \(up to {SETTINGS_FORMAT}\)"):
            read(newer)


def test_format_3_settings_keep_the_schedules_clocks_they_trained_on():
    """Format 4 records schedule_rule: a run of an earlier format resumes on rule 1's clocks (the rates on
    env steps, the costs on finished episodes); a run begun now is on rule 2's one progress."""
    assert SETTINGS_FORMAT == CHECKPOINT_FORMAT == 4 and TrainConfig().schedule_rule == 2
    saved = TrainConfig().to_dict()
    del saved["schedule_rule"]
    for version in (1, 2, 3):
        older = {k: v for k, v in saved.items() if version == 3 or k not in ("batch_rule",)}
        assert TrainConfig.from_dict(migrate_settings(older, version, "f")).schedule_rule == 1
    assert migrate_checkpoint({"format": 3, "config": saved}, "f") == {"format": 4,
                                                                      "config": {**saved, "schedule_rule": 1}}
    assert TrainConfig.from_dict(migrate_settings(TrainConfig().to_dict(), 4, "f")).schedule_rule == 2


def test_the_fingerprints_canonical_form_is_what_a_file_without_the_later_settings_recorded():
    """fingerprint_env_settings leaves out what V1_MISSING_ENV fills in, so a policy written before
    --ema-spans and --feature-window hashes as it did then, once its settings are migrated."""
    from dataclasses import asdict

    from envs.config import EnvConfig
    from ppo_lstm.config.migrate import V1_MISSING_ENV, fingerprint_env_settings, migrate_env
    for env in (EnvConfig(), EnvConfig(features="a"), EnvConfig(features="a,b", fee_bps=3.0)):
        old = {k: v for k, v in asdict(env).items() if k not in V1_MISSING_ENV}
        assert fingerprint_env_settings(EnvConfig(**migrate_env(old, 1, "a format-1 env"))) == old
    kept = fingerprint_env_settings(EnvConfig(features="a", feature_window="256,1024", ema_spans="500"))
    assert kept["feature_window"] == "256,1024" and kept["ema_spans"] == "500"  # settings with an effect stay
