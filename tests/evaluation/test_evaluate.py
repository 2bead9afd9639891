"""The evaluate CLI end to end: train a tiny model on a CSV (the training CLI's main(), in this
process), then evaluate it in subprocesses
(JSON, equity CSV, plot, simulated and sampled runs, a 2-worker checkpoint); bad inputs
through ``main()`` in-process (the same code, without a Python start-up per case)."""
from __future__ import annotations

import configparser
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import ROOT, TINY, Result, Run, cli_in_process, free_port, run_cli
from ppo_lstm.evaluation.cli import main
from ppo_lstm.evaluation.report import CSV_COLUMNS, EPISODE_ROWS, ROWS, trade_marks

EVALUATE = [sys.executable, "-m", "ppo_lstm.evaluate"]
NO_MATPLOTLIB = [sys.executable, "-c", "import sys; sys.modules['matplotlib'] = None; "
                 "from ppo_lstm.evaluation.cli import main; sys.exit(main(sys.argv[1:]))"]
TOP_KEYS = ["bars", "start", "end", "late_start", "training_bars", "training_period", "sample", "fee_bps",
            "slippage_bps", "agent", "buy_and_hold"]
METRIC_KEYS = ["total_return_pct", "annual_return_pct", "annual_volatility_pct", "sharpe", "sortino", "calmar",
               "max_drawdown_pct", "max_drawdown_bars", "trades", "win_rate_pct", "profit_factor", "exposure_pct",
               "fees_paid", "fees_and_slippage_paid"]
EPISODE_KEYS = ["mean_return_pct", "std_return_pct", "median_return_pct", "p5_return_pct", "p95_return_pct",
                "episodes_with_gain_pct"]
WINDOW = int(TINY[TINY.index("--window") + 1])
BARS = 300


def evaluate_cli(cwd: Path, *args: str, launcher: list[str] = EVALUATE) -> Result:
    return Run(cwd, args, launcher=launcher).wait(timeout=90)


def write_prices(path: Path) -> pd.DataFrame:
    """BARS business days of a drifting random walk, in cents; opens off the previous close."""
    rng = np.random.default_rng(11)
    close = np.round(100.0 * np.exp(np.cumsum(0.0005 + 0.012 * rng.standard_normal(BARS))), 2)
    open_ = np.round(np.r_[100.0, close[:-1]] * np.exp(0.002 * rng.standard_normal(BARS)), 2)
    frame = pd.DataFrame({"Date": pd.bdate_range("2020-01-01", periods=BARS).strftime("%Y-%m-%d"),
                          "Open": open_, "High": np.maximum(open_, close) + 0.25,
                          "Low": np.minimum(open_, close) - 0.25, "Close": close, "Volume": 1000})
    frame.to_csv(path, index=False)
    return frame


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with prices.csv and checkpoints/ of a tiny model trained on it."""
    cwd = tmp_path_factory.mktemp("trained")
    write_prices(cwd / "prices.csv")
    result = cli_in_process(cwd, *TINY, "--data", "prices.csv", "--episodes", "16", "--checkpoint-interval", "8")
    assert result.returncode == 0, result.output
    return cwd


def one_json(result: Result) -> dict:
    assert result.returncode == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    return json.loads(lines[0])


def json_of(capsys: pytest.CaptureFixture, *argv: str) -> dict:
    """``main(argv)`` in this process: exit 0, nothing on stderr, the JSON object it prints."""
    assert main(list(argv)) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return json.loads(out)


@pytest.fixture
def in_trained(trained: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``trained``, as the current directory."""
    monkeypatch.chdir(trained)
    return trained


@pytest.mark.e2e
def test_json_keys_equity_csv_and_buy_and_hold_by_hand(trained: Path) -> None:
    start, end, fee, slip = "2020-03-02", "2020-12-31", 10.0, 5.0
    report = one_json(evaluate_cli(trained, "--checkpoint", "checkpoints", "--data", "prices.csv", "--start", start,
                                   "--end", end, "--fee-bps", str(fee), "--slippage-bps", str(slip), "--json",
                                   "--equity-csv", "eq.csv"))
    assert list(report) == TOP_KEYS
    for side in ("agent", "buy_and_hold"):
        assert list(report[side]) == METRIC_KEYS
        assert all(v is None or isinstance(v, (int, float)) for v in report[side].values())
        assert isinstance(report[side]["trades"], int) and isinstance(report[side]["max_drawdown_bars"], int)
    assert report["fee_bps"] == fee and report["slippage_bps"] == slip

    prices = pd.read_csv(trained / "prices.csv")
    inside = np.flatnonzero((prices["Date"] >= start) & (prices["Date"] <= end))
    lo, hi = inside[0], inside[-1] + 1
    bars = hi - lo - 1  # the first decision at the close of --start's bar (its window: the bars before it)
    assert report["bars"] == bars and report["late_start"] is None
    assert report["start"] == f"{prices['Date'][lo]}T00:00:00"  # the first decision bar
    assert report["end"] == f"{prices['Date'][hi - 1]}T00:00:00"
    # trained on bars 0..239 (the last 20 % held out): so many of the traded bars lo+1..hi-1 were trained on
    assert report["training_period"] == [f"{prices['Date'][0]}T00:00:00", f"{prices['Date'][239]}T00:00:00"]
    assert report["training_bars"] == 239 - lo > 0
    # bars 240..299 are the hold-out that chose best.pt: the rest of the traded bars, none out of sample
    assert report["sample"] == {"earlier": 0, "training": 239 - lo, "selection_holdout": hi - 1 - 239,
                                "out_of_sample": 0, "last_read": f"{prices['Date'][BARS - 1]}T00:00:00"}

    # the same checkpoint on prices training never read, under the same name: no label, and one warning
    other = trained / "other" / "prices.csv"
    other.parent.mkdir(exist_ok=True)
    frame = pd.read_csv(trained / "prices.csv")
    frame[["Open", "High", "Low", "Close"]] = (frame[["Open", "High", "Low", "Close"]] * 1.01).round(2)
    frame.to_csv(other, index=False)
    result = evaluate_cli(trained, "--checkpoint", "checkpoints", "--data", str(other), "--json")
    foreign = one_json(result)
    assert foreign["sample"] is None and foreign["training_bars"] is None
    assert "does not hold the bars the checkpoint's run read" in foreign["foreign_data"]
    assert result.stderr.splitlines() == [f"warning: {foreign['foreign_data']}"]

    curve = pd.read_csv(trained / "eq.csv")
    assert list(curve.columns) == list(CSV_COLUMNS) and len(curve) == bars + 1
    assert curve["time"].iloc[0] == report["start"]  # the first decision bar
    assert curve["time"].iloc[-1][:10] == report["end"][:10]
    assert curve["position"].iloc[0] == 0 and curve["equity"].iloc[0] == curve["buy_and_hold_equity"].iloc[0] == 1e4
    assert np.array_equal(curve["close"], prices["Close"][lo:hi])
    assert set(curve["position"]) <= {-1, 0, 1}
    for column, side in (("equity", "agent"), ("buy_and_hold_equity", "buy_and_hold")):
        assert 100.0 * (curve[column].iloc[-1] / 1e4 - 1.0) == pytest.approx(report[side]["total_return_pct"],
                                                                              rel=1e-12, abs=1e-12)
    assert report["agent"]["exposure_pct"] == pytest.approx(100.0 * np.count_nonzero(curve["position"]) / bars)

    # buy-and-hold by hand: one lot = the cash at the first decision bar's close; bought at the next
    # open plus slippage, paying the fee on the fill; held to the last close (marked, no exit costs)
    ref = prices["Close"][lo]
    fill = prices["Open"][lo + 1] * (1.0 + slip / 1e4)
    by_hand = 100.0 * (prices["Close"][hi - 1] - fill * (1.0 + fee / 1e4)) / ref
    hold = report["buy_and_hold"]
    assert hold["total_return_pct"] == pytest.approx(by_hand, rel=1e-9)
    assert hold["trades"] == 0 and hold["win_rate_pct"] is None and hold["exposure_pct"] == 100.0
    assert hold["fees_paid"] == pytest.approx(1e4 * (fill * fee / 1e4 + fill / (1 + slip / 1e4) * slip / 1e4) / ref)


@pytest.mark.e2e
def test_table_and_a_valid_png(trained: Path) -> None:
    pytest.importorskip("matplotlib")
    from PIL import Image

    result = evaluate_cli(trained, "--checkpoint", "checkpoints", "--data", "prices.csv", "--plot", "bt.png")
    assert result.returncode == 0 and result.stderr == "", result.output
    for _, label, _ in ROWS:
        assert label in result.stdout
    assert "agent" in result.stdout and "buy & hold" in result.stdout and "plot: bt.png" in result.stdout
    png = trained / "bt.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(png) as image:
        assert image.format == "PNG" and image.size == (1100, 800)
        image.verify()


def test_simulated_plot_and_trade_marks(in_trained: Path, capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("matplotlib")
    from PIL import Image

    assert main(["--checkpoint", "checkpoints", "--market", "regime", "--episodes", "3", "--plot", "sim.png"]) == 0
    assert "plot: sim.png" in capsys.readouterr().out
    with Image.open(in_trained / "sim.png") as image:
        assert image.size == (1100, 800)
    # rows 1..T of the curves: entries of each side and exits (to flat or reversed)
    longs, shorts, exits = trade_marks(np.array([1, 1, 0, -1, -1, 1]))
    assert longs.tolist() == [1, 6] and shorts.tolist() == [4] and exits.tolist() == [3, 6]
    longs, shorts, exits = trade_marks(np.array([1, 1, 1, 1, 0, 0]), episode_length=3)  # episodes start flat
    assert longs.tolist() == [1, 4] and shorts.tolist() == [] and exits.tolist() == [5]


@pytest.mark.e2e
def test_without_matplotlib_a_line_names_the_extra_and_the_report_prints(trained: Path) -> None:
    result = evaluate_cli(trained, "--checkpoint", "checkpoints", "--data", "prices.csv", "--plot", "none.png",
                          "--equity-csv", "eq2.csv", launcher=NO_MATPLOTLIB)
    assert result.returncode == 2
    assert "total return %" in result.stdout and "buy & hold" in result.stdout
    assert len(result.error_lines()) == 1 and "pip install 'ppo-lstm-trader[plot]'" in result.stderr
    assert "Traceback" not in result.stderr
    assert (trained / "eq2.csv").is_file() and not (trained / "none.png").exists()


def test_simulated_report_leads_with_each_episodes_return(in_trained: Path, capsys: pytest.CaptureFixture) -> None:
    simulated = ["--checkpoint", "checkpoints", "--market", "regime", "--episodes", "6", "--seed", "3"]
    report = json_of(capsys, *simulated, "--json")
    assert list(report) == TOP_KEYS[:-2] + ["per_episode"] + TOP_KEYS[-2:]  # every other key as it was
    assert all(list(report[side]) == METRIC_KEYS for side in ("agent", "buy_and_hold"))
    per = report["per_episode"]
    assert list(per) == ["episodes", "episode_bars", "agent", "buy_and_hold"]
    assert per["episodes"] == 6 and per["episode_bars"] == 16
    assert main([*simulated, "--equity-csv", "sim.csv"]) == 0
    table = capsys.readouterr().out.splitlines()
    curve = pd.read_csv(in_trained / "sim.csv")
    for column, side, at in (("equity", "agent", -2), ("buy_and_hold_equity", "buy_and_hold", -1)):
        assert list(per[side]) == EPISODE_KEYS
        equity = curve[column].to_numpy()  # each episode's return: its end over its start on the chained curve
        by_hand = 100.0 * (equity[16::16] / equity[0:-1:16] - 1.0)
        assert per[side]["mean_return_pct"] == pytest.approx(np.mean(by_hand), abs=1e-9)
        assert per[side]["std_return_pct"] == pytest.approx(np.std(by_hand, ddof=1), abs=1e-9)
        assert per[side]["p95_return_pct"] == pytest.approx(np.percentile(by_hand, 95), abs=1e-9)
        mean_row = next(line for line in table if line.lstrip().startswith("mean return %"))
        assert mean_row.split()[at] == f"{per[side]['mean_return_pct']:.2f}"
    labels = [line.strip() for line in table]
    first = labels.index(next(line for line in labels if line.startswith("per episode: each of the 6 episodes")))
    chained = labels.index(next(line for line in labels if line.startswith("chained: the 6 episodes")))
    assert first < chained < labels.index(next(line for line in labels if line.startswith("total return %")))
    shown = [line.split("  ")[0] for line in labels[first + 2: first + 2 + len(EPISODE_ROWS)]]
    assert shown == [label for _, label, _ in EPISODE_ROWS]


def test_the_history_report_is_the_figures_table_alone(in_trained: Path, capsys: pytest.CaptureFixture) -> None:
    history = ["--checkpoint", "checkpoints", "--data", "prices.csv", "--start", "2020-03-02"]
    report = json_of(capsys, *history, "--json")
    assert list(report) == TOP_KEYS and "per_episode" not in report
    assert main(history) == 0
    table = capsys.readouterr().out.splitlines()
    blank = table.index("")
    assert not any("per episode" in line or "chained" in line for line in table)
    width = max(len(label) for _, label, _ in ROWS)
    cell = lambda value, fmt: "-" if value is None else fmt.format(value)  # noqa: E731
    assert table[blank + 1:] == [f"  {'':<{width}}  {'agent':>12}  {'buy & hold':>12}"] + [
        f"  {label:<{width}}  {cell(report['agent'][key], fmt):>12}  {cell(report['buy_and_hold'][key], fmt):>12}"
        for key, label, fmt in ROWS]


@pytest.mark.e2e
def test_simulated_evaluation_is_deterministic_and_sampling_reproducible(in_trained: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    simulated = ["--checkpoint", "checkpoints", "--market", "regime", "--episodes", "4", "--seed", "5", "--json"]
    first, again = evaluate_cli(in_trained, *simulated), evaluate_cli(in_trained, *simulated)  # two processes
    report = one_json(first)
    assert first.stdout == again.stdout
    assert report["bars"] == 4 * 16 and report["start"] is None and report["end"] is None
    assert json_of(capsys, *simulated) == report
    assert json_of(capsys, *simulated[:-2], "6", "--json") != report
    sampled = ["--checkpoint", "checkpoints", "--data", "prices.csv", "--sample", "--seed", "2", "--json"]
    assert json_of(capsys, *sampled) == json_of(capsys, *sampled)


@pytest.mark.e2e
def test_a_checkpoint_written_by_two_workers_evaluates_like_any_other(cwd: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture) -> None:
    result = run_cli(cwd, *TINY, "--distributed", "--num-workers", "2", "--episodes", "8",
                     "--master-port", str(free_port()), timeout=180)
    assert result.returncode == 0, result.output
    path = cwd / "checkpoints" / (cwd / "checkpoints" / "latest").read_text().strip()
    state = torch.load(path, map_location="cpu", weights_only=True)
    assert state["world_size"] == 2 and len(state["ranks"]) == 2
    torch.save({**state, "world_size": 1, "ranks": state["ranks"][:1]}, cwd / "single.pt")
    monkeypatch.chdir(cwd)
    args = ["--episodes", "3", "--seed", "1", "--json"]
    two = json_of(capsys, "--checkpoint", "checkpoints", *args)
    assert json_of(capsys, "--checkpoint", "single.pt", *args) == two
    assert two["bars"] == 3 * 16


# ------------------------------------------------------------------ bad input: one line, exit 2


def error_of(capsys: pytest.CaptureFixture, *argv: str) -> str:
    """Run ``main(argv)``: exit code 2 and exactly one stderr line, returned."""
    try:
        code = main(list(argv))
    except SystemExit as stop:  # argparse's own errors
        code = stop.code
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, (code, out, err)
    return lines[0]


def test_bad_checkpoints(in_trained: Path, capsys: pytest.CaptureFixture) -> None:
    (in_trained / "empty").mkdir(exist_ok=True)
    (in_trained / "random.pt").write_bytes(np.random.default_rng(0).bytes(4096))
    best = (in_trained / "checkpoints" / "best.pt").read_bytes()
    (in_trained / "truncated.pt").write_bytes(best[: len(best) // 2])
    torch.save({"model": {}, "counters": {}}, in_trained / "foreign.pt")
    state = torch.load(in_trained / "checkpoints" / "best.pt", weights_only=True)
    state["config"]["hidden_size"] = 32  # the weights are 16 wide
    torch.save(state, in_trained / "mismatch.pt")
    cases = {
        "missing.pt": "no such file",
        "empty": "no best.pt, 'latest' or checkpoint_u*.pt",
        "random.pt": "not a checkpoint",
        "truncated.pt": "not a checkpoint",
        "prices.csv": "not a checkpoint",
        "foreign.pt": "no training config",
        "mismatch.pt": "does not match the checkpoint's settings (--hidden-size 32",
    }
    for path, reason in cases.items():
        line = error_of(capsys, "--checkpoint", path, "--episodes", "1")
        assert line.startswith("error: ") and reason in line, line


def test_bad_dates_and_flags(in_trained: Path, capsys: pytest.CaptureFixture) -> None:
    data = ["--checkpoint", "checkpoints", "--data", "prices.csv"]
    cases = [
        (["--start", "2020-06-01", "--end", "2020-05-01"], "--start 2020-06-01 is after --end 2020-05-01"),
        (["--start", "not-a-date"], "--start 'not-a-date' is not a date"),
        (["--end", "2020-13-45"], "--end '2020-13-45' is not a date"),
        (["--start", "2020-06-01", "--end", "2020-06-01"], "select 1 bar, 1 of them from the first bar a decision "
                                                          "can be taken at; a backtest needs at least 2"),
        (["--start", "2020-01-01", "--end", "2020-01-13"],
         "select 9 bars, 1 of them from the first bar a decision can be taken at; a backtest needs at least 2 (the "
         "first decision bar and a bar to trade); trading starts at 2020-01-13T00:00:00, not at 2020-01-01T00:00:00: "
         "the file has 0 bars before it and the 8-bar window needs 8"),
        (["--market", "gbm"], "--market is for simulated evaluation"),
        (["--start", "2030-01-01"], "no bars from 2030-01-01"),
        (["--episodes", "3"], "--episodes is for simulated evaluation"),
        (["--fee-bps", "-1"], "--fee-bps must be a number >= 0"),
        (["--equity-csv", "no/such/dir/eq.csv"], "no directory no/such/dir"),
    ]
    for extra, reason in cases:
        line = error_of(capsys, *data, *extra)
        assert reason in line, line
    assert "pass --data too" in error_of(capsys, "--checkpoint", "checkpoints", "--end", "2020-05-01")
    assert "file not found" in error_of(capsys, "--checkpoint", "checkpoints", "--data", "nope.csv")
    assert "unrecognized arguments" in error_of(capsys, "--checkpoint", "checkpoints", "--bogus")
    assert "--episodes must be at least 1" in error_of(capsys, "--checkpoint", "checkpoints", "--episodes", "0")


def test_a_data_trained_checkpoint_needs_data_or_a_named_market(in_trained: Path, capsys: pytest.CaptureFixture
                                                                ) -> None:
    line = error_of(capsys, "--checkpoint", "checkpoints", "--episodes", "2")
    assert line.startswith("error: checkpoints/best.pt was trained on --data prices.csv, and a simulated market is a "
                           "market it never saw: pass --data"), line
    assert "name --market" in line
    report = json_of(capsys, "--checkpoint", "checkpoints", "--market", "gbm", "--episodes", "2", "--json")
    assert report["bars"] == 2 * 16 and report["training_bars"] is None
    assert "on 2 simulated 'gbm' episodes" in (main(["--checkpoint", "checkpoints", "--market", "gbm", "--episodes",
                                                     "2"]), capsys.readouterr().out)[1]


@pytest.mark.e2e
def test_bad_input_in_the_real_cli_is_one_line_without_traceback(trained: Path) -> None:
    result = evaluate_cli(trained, "--checkpoint", "checkpoints", "--data", "prices.csv", "--start", "2021-01-01",
                          "--end", "2020-01-01")
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.error_lines()) == 1 and result.stderr.startswith("error: --start 2021-01-01 is after")


def test_a_directory_uses_best_else_latest_and_the_latest_pointer_works(in_trained: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    only_latest = in_trained / "only_latest"
    shutil.copytree(in_trained / "checkpoints", only_latest, dirs_exist_ok=True)
    (only_latest / "best.pt").unlink()
    for path, used in (("checkpoints", "checkpoints/best.pt"), ("only_latest", "only_latest/checkpoint_u"),
                       ("checkpoints/latest", "checkpoints/checkpoint_u")):
        assert main(["--checkpoint", path, "--market", "regime", "--episodes", "1"]) == 0
        assert f"Backtest of {used}" in capsys.readouterr().out


def test_the_console_script_is_declared() -> None:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    scripts = config["options.entry_points"]["console_scripts"]
    assert "evaluate-ppo-lstm = ppo_lstm.evaluation.cli:main" in scripts.splitlines()
