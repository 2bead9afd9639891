"""evaluate-ppo-lstm --plot with several instruments writes one PNG per instrument under a name
no other instrument shares: X.csv and X.csv.gz keep their whole file names."""
from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy"))
from deploy_fixtures import featured_run  # noqa: E402  (the deploy tests' shared tiny run)

from ppo_lstm.evaluation import cli  # noqa: E402

pytest.importorskip("matplotlib")

def test_plot_names_are_unique() -> None:
    plot_paths = cli.plot_paths
    base = Path("out/bt.png")
    assert plot_paths(base, ["X.csv", "X.csv.gz", "Y.parquet", "Z.pq"]) == {
        "X.csv": Path("out/bt-X.csv.png"), "X.csv.gz": Path("out/bt-X.csv.gz.png"),
        "Y.parquet": Path("out/bt-Y.png"), "Z.pq": Path("out/bt-Z.png")}
    assert plot_paths(Path("bt"), ["a.CSV", "A.csv.gz"]) == {"a.CSV": Path("bt-a.CSV.png"),
                                                             "A.csv.gz": Path("bt-A.csv.gz.png")}


def test_x_csv_and_x_csv_gz_get_a_plot_each(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path,
                                            capsys: pytest.CaptureFixture) -> None:
    run = featured_run(tmp_path_factory)
    shutil.copy(run / "prices.csv", tmp_path / "X.csv")
    with open(run / "prices.csv", "rb") as source, gzip.open(tmp_path / "X.csv.gz", "wb") as target:
        shutil.copyfileobj(source, target)
    assert cli.main(["--checkpoint", str(run / "checkpoints"), "--data", str(tmp_path / "X.csv"),
                          str(tmp_path / "X.csv.gz"), "--start", "2021-06-01", "--plot", str(tmp_path / "bt.png")]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("plot: ")]
    assert printed == [f"plot: {tmp_path / 'bt-X.csv.png'}", f"plot: {tmp_path / 'bt-X.csv.gz.png'}"]
    assert all((tmp_path / name).stat().st_size > 1000 for name in ("bt-X.csv.png", "bt-X.csv.gz.png"))
