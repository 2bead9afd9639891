"""The policy state file's integrity: a seal over its derived state (an edited ``"bust": true``
is refused, not traded on), no NaN/Infinity read, a version-1 state read once and written back
sealed; and its lock: a second predict-ppo-lstm call on one --state waits, then is refused."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import env_for_child
from deploy_fixtures import featured_run, write_head
from predict_checks import without_warm_up_warning
from ppo_lstm import TradingPolicy
from ppo_lstm.deploy import predict, state as state_module
from ppo_lstm.errors import UsageError

START = "2021-02-01"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The deploy tests' shared run (a tiny model trained with two feature columns): read only."""
    return featured_run(tmp_path_factory)


def call(capsys: pytest.CaptureFixture, *argv: object) -> tuple[int, str, str]:
    code = predict.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_error(capsys: pytest.CaptureFixture, *argv: object, match: str) -> str:
    code, out, err = call(capsys, *argv)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and out == "" and len(lines) == 1, err
    assert "Traceback" not in err and match in lines[0], lines[0]
    return lines[0]


def started(run: Path, tmp_path: Path, rows: int = 100) -> tuple[list[object], Path, bytes]:
    """The arguments of a call on the whole file, and a state built on its first ``rows`` bars."""
    ck, data, state = run / "checkpoints", run / "prices.csv", tmp_path / "state.json"
    assert predict.main(["--checkpoint", str(ck), "--data", str(write_head(data, tmp_path / "head.csv", rows)),
                         "--start", START, "--state", str(state), "--json"]) == 0
    return ["--checkpoint", ck, "--data", data, "--start", START, "--state", state, "--json"], state, state.read_bytes()


def test_an_edited_derived_state_is_refused(run: Path, capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    args, state, saved = started(run, tmp_path)
    capsys.readouterr()
    original = json.loads(saved)
    assert original["version"] == 2 and len(original["state_digest"]) == 64 and original["bust"] is False
    ledger = original["ledger"]
    edits = ({"bust": True}, {"action": 0 if original["action"] else 1},
             {"ledger": {**ledger, "cash": [v + 1e6 for v in ledger["cash"]]}},
             {"lstm": {"h": [0.0] * len(original["lstm"]["h"]), "c": original["lstm"]["c"]}},
             {"closes": [round(c * 1.01, 2) for c in original["closes"]]})
    for edit in edits:
        state.write_text(json.dumps({**original, **edit}))
        one_error(capsys, *args, match="do not match its 'state_digest': the state was edited or damaged")
        assert json.loads(state.read_text()) == {**original, **edit}  # left as it was
    state.write_bytes(saved)
    code, out, err = call(capsys, *args)
    assert code == 0 and without_warm_up_warning(err) == "" and json.loads(out)["new_bars"] == 160
    # the same check in memory
    policy = TradingPolicy.load(run / "checkpoints")
    with pytest.raises(UsageError, match="state_digest"):
        policy.load_state_dict({**original, "bust": True})
    assert policy.bars == 0  # nothing half-restored


def test_nan_and_infinity_are_refused(run: Path, capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    args, state, saved = started(run, tmp_path)
    capsys.readouterr()
    text = saved.decode()
    h = json.loads(text)["lstm"]["h"]
    first = json.dumps(h[0])
    assert text.count(first) >= 1
    for literal, match in (("NaN", "holds the literal NaN"), ("-Infinity", "holds the literal -Infinity"),
                           ("1e999", "holds the number 1e999")):
        state.write_text(text.replace(f'"h":[{first}', f'"h":[{literal}', 1))
        assert literal in state.read_text()
        line = one_error(capsys, *args, match=match)
        assert "finite numbers only" in line


def test_a_version_1_state_is_read_once_and_written_back_sealed(run: Path, capsys: pytest.CaptureFixture,
                                                                  tmp_path: Path) -> None:
    args, state, saved = started(run, tmp_path)
    capsys.readouterr()
    old = json.loads(saved)
    del old["state_digest"]
    state.write_text(json.dumps({**old, "version": 1}))
    code, out, err = call(capsys, *args)
    assert code == 0 and "unsealed version-1 state" in err and len(err.splitlines()) == 1
    upgraded = json.loads(state.read_text())
    assert upgraded["version"] == 2 and upgraded["state_digest"] == state_module.state_seal(upgraded)
    state.write_bytes(saved)
    assert call(capsys, *args)[1] == out  # the same decision as from the sealed state
    state.write_text(json.dumps({**old, "version": 3}))
    one_error(capsys, *args, match="policy state version 3; this version reads 1, 2")


HOLD = """
import fcntl, sys, time
handle = open(sys.argv[1], "a")
fcntl.flock(handle, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def hold_lock(path: Path, seconds: float) -> subprocess.Popen:
    """Another process holding ``path``'s flock for ``seconds`` (returns once it holds it)."""
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(path), str(seconds)], stdout=subprocess.PIPE,
                             text=True, env=env_for_child())
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


@pytest.mark.e2e
def test_a_second_call_on_one_state_waits_then_is_refused(run: Path, capsys: pytest.CaptureFixture,
                                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args, state, saved = started(run, tmp_path)
    capsys.readouterr()
    decision = json.loads(saved)["decision"]
    lots = decision["target_position"] if decision else 0
    monkeypatch.setattr(state_module, "STATE_LOCK_WAIT_S", 0.5, raising=False)
    child = hold_lock(tmp_path / "state.json.lock", 30)
    try:
        line = one_error(capsys, *args, "--fill", "100", lots, match=f"--state {state} is in use by another call")
        assert "still locked after 0.5 s" in line
        assert state.read_bytes() == saved  # nothing read-modified-written, the --fill not half-booked
    finally:
        child.kill()
        child.wait()
    # a holder that lets go within the wait: the call goes on
    monkeypatch.setattr(state_module, "STATE_LOCK_WAIT_S", 30.0, raising=False)
    child = hold_lock(tmp_path / "state.json.lock", 0.5)
    try:
        code, out, err = call(capsys, *args)
    finally:
        child.wait()
    assert code == 0 and without_warm_up_warning(err) == "" and json.loads(out)["new_bars"] == 160
    assert not (tmp_path / "state.json.lock").exists()  # removed by the call that held it last


def test_the_lock_file_is_never_followed_through_a_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "s.json.lock").symlink_to(victim)
    with pytest.raises(UsageError, match="cannot lock .*s.json.lock"):
        with state_module.state_lock(tmp_path / "s.json"):
            pass
    assert victim.read_text() == "keep\n"


def test_a_state_sealed_as_it_is_written_out_is_predicts_and_keeps_its_seal(run: Path, capsys: pytest.CaptureFixture,
                                                                             tmp_path: Path) -> None:
    """``sealed_file`` (one JSON encoding for the seal and the file) gives ``state_dict``'s state, and a file
    predict-ppo-lstm --state goes on from; an edited byte of it is refused."""
    args, state, _ = started(run, tmp_path)
    capsys.readouterr()
    policy = TradingPolicy.load(run / "checkpoints")
    policy.load_state(state)
    sealed, data = state_module.sealed_file(policy.state_body({"mine": {"n": 1}}))
    assert sealed == policy.state_dict({"mine": {"n": 1}}) and json.loads(data) == sealed
    state.write_bytes(data)
    code, out, err = call(capsys, *args)
    assert code == 0 and without_warm_up_warning(err) == "" and json.loads(out)["new_bars"] == 160
    state.write_bytes(data.replace(b'"bust":false', b'"bust":true'))
    one_error(capsys, *args, match="its contents do not match its 'state_digest'")
