"""What `ckptgeo analyze` writes and prints, as a new reader meets it (issue 14)."""

from __future__ import annotations

import pandas as pd
import pytest

from ckptgeo.analysis import analyze
from ckptgeo.cli import main
from ckptgeo.errors import DatasetLayoutError
from tests.test_analysis import _acc, _easy, _hard, _write_dataset


@pytest.fixture
def small(tmp_path):
    return _write_dataset(tmp_path / "ds", [("toy-2x16", "copy-L1", 0.1, _acc(20), _easy(2, 3.0), {}),
                                            ("toy-2x16", "sort-L2", 0.1, _acc(50), _hard(2, 4.0), {})])


def test_out_refuses_a_folder_of_other_files_and_leaves_it_untouched(small, tmp_path, capsys):
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "report.md").write_text("my own report\n")
    assert main(["analyze", str(small), "--out", str(mine), "--no-plots"]) == 6   # DatasetLayoutError
    err = capsys.readouterr().err
    assert f"--out {mine} is not empty and is neither a ckptgeo dataset" in err and "report.md" in err
    assert [p.name for p in mine.iterdir()] == ["report.md"] and (mine / "report.md").read_text() == "my own report\n"
    with pytest.raises(DatasetLayoutError, match="is a file"):
        analyze(small, out=mine / "report.md")


def test_out_accepts_new_empty_earlier_analysis_and_dataset_folders(small, tmp_path):
    new = tmp_path / "new"
    assert main(["analyze", str(small), "--out", str(new), "--no-plots"]) == 0
    assert (new / "report.md").is_file() and (new / "events" / "events.parquet").is_file()
    assert main(["analyze", str(small), "--out", str(new), "--no-plots", "--window", "2"]) == 0   # again: an analysis
    assert pd.read_parquet(new / "summary" / "acquisitions.parquet")["window"].tolist() == [2, 2]
    (tmp_path / "empty" / ".hidden").mkdir(parents=True)
    assert main(["analyze", str(small), "--out", str(tmp_path / "empty"), "--no-plots"]) == 0
    assert main(["analyze", str(small), "--no-plots"]) == 0      # default: into the dataset itself
