"""docs/example/data/make_example_data.py without gym-anytrading: one line with the fix and exit
status 2, or the STOCKS_GOOGL.csv the user already has."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
HEADER = "Date,Open,High,Low,Close,Adj Close,Volume\n"


@pytest.fixture
def script(monkeypatch):
    spec = importlib.util.spec_from_file_location("make_example_data", ROOT / "docs" / "example" / "data" / "make_example_data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports nothing of gym-anytrading at the top
    monkeypatch.setattr(module, "_gym_datasets", lambda: None)  # as on a machine without it
    return module


def _googl(path: Path, bars: int = 30) -> Path:
    rows = [f"2018-01-{day + 1:02d},{100 + day},{101 + day},{99 + day},{100.5 + day},{100.5 + day},{1000 + 10 * day}"
            for day in range(bars)]
    path.write_text(HEADER + "\n".join(rows) + "\n")
    return path


def test_without_gym_anytrading_one_line_names_the_fix(script, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert script.main(["--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install gym-anytrading" in err[0] and "--googl STOCKS_GOOGL.csv" in err[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("how", ["in the current directory", "--googl"])
def test_a_stocks_googl_csv_the_user_has_is_read(script, tmp_path, monkeypatch, capsys, how):
    monkeypatch.chdir(tmp_path)
    source = _googl(tmp_path / "STOCKS_GOOGL.csv")
    argv = ["--out", str(tmp_path / "out")] + (["--googl", str(source)] if how == "--googl" else [])
    assert script.main(argv) == 0
    written = pd.read_csv(tmp_path / "out" / "GOOGL.csv")
    assert list(written.columns) == ["Date", "Open", "High", "Low", "Close", "Adj Close", "Volume", "vol_ratio"]
    assert written["vol_ratio"].isna().sum() == 19 and len(written) == 30
    assert "EURUSD_1H.csv needs gym-anytrading" in capsys.readouterr().err
    assert not (tmp_path / "out" / "EURUSD_1H.csv").exists()


def test_a_missing_given_file_is_one_line(script, tmp_path, capsys):
    assert script.main(["--googl", str(tmp_path / "nope.csv"), "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"make_example_data.py: no file {tmp_path / 'nope.csv'}"
