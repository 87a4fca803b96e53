"""One skill score everywhere: the MSE skill score 1 - MSE_model / MSE_baseline, read back from what a user
sees: `lstmnb train`'s table, `lstmnb skill`'s table, the run records, and notebook 02's figure data."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from lstmnb.cli import main
from lstmnb.records import read_records
from lstmnb.report.tables import SKILL_COLUMN

SMALL = ["--end", "2020-01-31", "--window", "12", "--hidden", "8", "--epochs", "2", "--device", "cpu", "--no-progress"]
POINTS = ["--source", "sample", "--point", "40,-80", "--point", "35,281.75"]


def mse_skill(model_rmse: float, base_rmse: float) -> float:
    return 1 - model_rmse ** 2 / base_rmse ** 2


def printed(value: float) -> str:
    return f"{value:,.3f}"


def parse_skill_table(out: str) -> dict[tuple[str, int], list[str]]:
    """`lstmnb skill`'s table as {(point, lead): the printed numbers}; a point's name is on its first line only."""
    table, point = {}, None
    for line in out.splitlines():
        match = re.match(r"^(\S.*?)?\s+(\d+)((?:\s+-?[\d,]+\.?\d*)+)$", line)
        if match is None:
            continue
        point = match.group(1).strip() if match.group(1) else point
        table[(point, int(match.group(2)))] = match.group(3).split()
    return table


def check_rows(rows) -> None:
    """Per-point rows: the MSE skill scores (and no other skill) from the rows' own RMSEs."""
    for row in rows:
        assert not [k for k in row if "skill" in k and not k.startswith("mse_skill_vs_")], row
        for b in ("persistence", "climatology"):
            assert row[f"mse_skill_vs_{b}"] == pytest.approx(mse_skill(row["model_rmse_k"], row[f"{b}_rmse_k"]), rel=1e-9)


def test_train_prints_and_records_the_mse_skill_score(tmp_path, capsys):
    assert main(["train", *POINTS, *SMALL, "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    record = read_records(tmp_path)[-1]
    m = record["metrics"]
    for b in ("persistence", "climatology"):
        assert m[f"mse_skill_vs_{b}"] == pytest.approx(mse_skill(m["test_rmse_k"], m[f"{b}_rmse_k"]), rel=1e-9)
        line = next(line for line in out.splitlines() if line.startswith(b))
        assert line.split()[-1] == printed(m[f"mse_skill_vs_{b}"])  # the table's last column
    assert SKILL_COLUMN in out and "MSE skill score" in SKILL_COLUMN
    check_rows(record["skill"]["per_point"])


@pytest.mark.slow
def test_skill_table_and_records_share_one_definition(tmp_path, capsys):
    # the command's table and its records
    results = tmp_path / "cli"
    assert main(["skill", *POINTS, *SMALL, "--leads", "1,3", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    records = read_records(results)
    assert len(records) == 2
    table = parse_skill_table(out)
    for record in records:
        check_rows(record["skill"]["per_point"])
        lead = record["skill"]["lead_hours"]
        for row in record["skill"]["per_point"]:
            shown = table[(f"{row['requested']} (cell {row['point']})", lead)]
            assert shown[-2:] == [printed(row["mse_skill_vs_persistence"]), printed(row["mse_skill_vs_climatology"])]
        assert table[("all points (pooled)", lead)][-2:] == [printed(record["metrics"]["mse_skill_vs_persistence"]),
                                                             printed(record["metrics"]["mse_skill_vs_climatology"])]
    assert "MSE skill score, 1 - MSE_model / MSE_baseline" in out
    assert out.count("climatology: ") == 1 and out.count("reported forecast: ") == 1  # once per command


def test_notebook_02s_skill_figure_is_its_records_skill(ci_series):
    """Notebook 02 as the `ci` series ran it (the study's points, leads 1 and 3): its skill figure's data."""
    figure = pd.read_csv(ci_series.run_dir / "tables" / "02_skill.csv")
    assert (ci_series.run_dir / "figures" / "02_skill.png").is_file()
    assert list(figure["point"].unique()) == ["40,280 (cell 40.00N 280.00E)", "20,280 (cell 20.00N 280.00E)",
                                              "all points (pooled)"]
    check_rows(figure.to_dict("records"))
    nb_records = [r for r in read_records(ci_series.results) if r["experiment"] == "skill"]
    assert sorted(r["config"]["lead_hours"] for r in nb_records) == [1, 3]
    for r in nb_records:
        check_rows(r["skill"]["per_point"])
    # the notebook's pooled rows are its records' pooled figures
    pooled = figure[figure["point"] == "all points (pooled)"].set_index("lead_hours")
    for r in nb_records:
        assert pooled.loc[r["config"]["lead_hours"], "mse_skill_vs_persistence"] == pytest.approx(
            r["metrics"]["mse_skill_vs_persistence"], abs=1e-6)  # pooled from the rows: summed in another order
    assert json.dumps(nb_records).count("skill_vs_") == json.dumps(nb_records).count("mse_skill_vs_")
