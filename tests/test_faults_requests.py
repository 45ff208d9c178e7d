"""Bad requests (unknown source / revision, empty selection, broken suite files, a disk budget below one
revision, an output folder of another schema), the user's own files, and numerical edge cases: each
gives a named ckptgeo error (the CLI: one line and its exit code) or a documented value, and writes
nothing it should not."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file, save_file

from ckptgeo.cli import main
from ckptgeo.errors import (DatasetLayoutError, DiskSpaceError, EmptySelectionError, InvalidParameterError,
                            NonFiniteActivationsError, RevisionNotFoundError, SourceNotFoundError,
                            SuiteFormatError)
from ckptgeo.metrics.rankme import rankme
from ckptgeo.engine.scan import plan_scan
from ckptgeo.sources.protocol import WeightFile
from ckptgeo.sources.local import LocalSource
from tests._checkpoints import SUITE, make_checkpoints
from tests._faults import quiet_scan


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    return make_checkpoints(tmp_path_factory.mktemp("ck") / "tiny", steps=(0, 1, 2, 4))


def _snapshot(folder: Path) -> dict:
    """Every path under ``folder`` with its bytes (files) or None (folders)."""
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in folder.rglob("*")}


def _cli(*args) -> list[str]:
    return ["scan", *map(str, args), "--suite", SUITE, "--n-samples", "8"]


def _one_error_line(capsys) -> str:
    lines = [ln for ln in capsys.readouterr().err.strip().splitlines() if not ln.startswith("WARNING")]
    assert len(lines) == 2 and lines[0].startswith("ckptgeo: error: ") and "Traceback" not in lines[0], lines
    return lines[0]


# ----------------------------------------------------------------------------------------------------------
# 4. bad requests
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", ["/no/such/checkpoints", "./no/such/dir", "~/no/such"])
def test_missing_local_folder(spec, tmp_path, capsys):
    with pytest.raises(SourceNotFoundError, match="not an existing checkpoint folder"):
        quiet_scan(spec, tmp_path / "ds")
    assert not (tmp_path / "ds").exists()
    assert main(_cli(spec, "--out", tmp_path / "ds")) == 3
    assert spec in _one_error_line(capsys)


def test_unknown_revision_names_the_closest(ckpts, tmp_path, capsys):
    with pytest.raises(RevisionNotFoundError) as exc:
        quiet_scan(ckpts, tmp_path / "ds", revisions="step0,step3")
    assert exc.value.revision == "step3" and exc.value.closest[:2] == ("step2", "step4")
    assert "closest existing: step2, step4" in str(exc.value)
    assert not (tmp_path / "ds").exists()
    assert main(_cli(ckpts, "--out", tmp_path / "ds", "--revisions", "3")) == 3
    assert "'3' not found" in _one_error_line(capsys)


@pytest.mark.parametrize("selector", ["5:50", "3:3"])
def test_empty_selection(selector, ckpts, tmp_path, capsys):
    with pytest.raises(EmptySelectionError, match="matched no revision"):
        quiet_scan(ckpts, tmp_path / "ds", revisions=selector)
    assert main(_cli(ckpts, "--out", tmp_path / "ds", "--revisions", selector)) == 3
    assert "steps 0..4" in _one_error_line(capsys)
    assert not (tmp_path / "ds").exists()


def test_unparseable_selector(ckpts, tmp_path):
    with pytest.raises(InvalidParameterError, match="Cannot parse revision selector"):
        quiet_scan(ckpts, tmp_path / "ds", revisions="step1;rm")


MC = {"id": "a", "suite": "s", "kind": "multiple_choice", "prompt": "Q?", "choices": ["x", "y"], "answer": 0}


@pytest.mark.parametrize("name,text,line,field,words", [
    ("empty.jsonl", "", None, None, "holds no items"),
    ("blank.jsonl", "\n\n  \n", None, None, "holds no items"),
    ("badjson.jsonl", json.dumps(MC) + "\n" + json.dumps({**MC, "id": "b"}) + "\n{oops\n", 3, None, "invalid JSON"),
    ("badchoices.jsonl", json.dumps(MC) + "\n" + json.dumps({**MC, "choices": "x"}) + "\n", 2, "choices",
     "'choices'"),
    ("nokind.jsonl", json.dumps({k: v for k, v in MC.items() if k != "choices"}) + "\n", 1, None, "none of"),
    ("badanswer.jsonl", json.dumps({**MC, "answer": 5}) + "\n", 1, "answer", "answer"),
    ("noid.jsonl", json.dumps({k: v for k, v in MC.items() if k != "id"}) + "\n", 1, "id", "'id'"),
    ("notbigbench.json", json.dumps({"name": "x"}), None, None, "no 'examples'"),
    ("truncated.json", '{"examples": [{"input": "a", ', None, None, "invalid JSON"),
])
def test_broken_suite_file_names_line_and_field(name, text, line, field, words, ckpts, tmp_path, capsys):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SuiteFormatError) as exc:
        quiet_scan(ckpts, tmp_path / "ds", suites=(str(path),))
    err = exc.value
    assert err.line == line and err.field == field and words in str(err) and err.path == str(path)
    if line is not None:
        assert f"{name}:{line}:" in str(err)
    assert not (tmp_path / "ds").exists()
    assert main(["scan", str(ckpts), "--out", str(tmp_path / "ds"), "--suite", str(path)]) == 2
    assert name in _one_error_line(capsys)


def test_unknown_suite_name(ckpts, tmp_path):
    with pytest.raises(InvalidParameterError, match="Unknown suite 'no-such-suite'"):
        quiet_scan(ckpts, tmp_path / "ds", suites=("no-such-suite",))


class HubLikeSource(LocalSource):
    """A local folder that reports Hub-like sizes (``size`` bytes per revision) and counts fetches; its
    ``downloads = True``, so the engine budgets disk as for a download."""

    size = 400_000_000
    downloads = True
    default_selector = "every-1000"

    def __init__(self, root):
        super().__init__(root)
        self.fetched = []

    def weight_files(self, revision):
        real = (self.root / revision.name / "model.safetensors").stat().st_size
        return [WeightFile("model.safetensors", self.size or real, None)]

    def fetch(self, revision):
        self.fetched.append(revision.name)
        return super().fetch(revision)


@pytest.mark.parametrize("prefetch,budget,peak", [(1, "500MB", "800.0 MB"), (0, "300MB", "400.0 MB"),
                                                  (2, "1GB", "1,200.0 MB")])
def test_max_disk_below_the_peak_is_refused_before_any_download(prefetch, budget, peak, ckpts, tmp_path):
    from ckptgeo.engine.scan import parse_size

    src = HubLikeSource(ckpts)
    out = tmp_path / "ds"
    with pytest.raises(DiskSpaceError) as exc:
        quiet_scan(src, out, revisions="all", prefetch=prefetch, max_disk=parse_size(budget))
    assert f"peak of {peak}" in str(exc.value) and exc.value.available == parse_size(budget)
    assert src.fetched == [] and not out.exists()
    plan = plan_scan(src, revisions="all", prefetch=prefetch, suites=(SUITE,))
    assert plan.bytes_to_fetch == 4 * HubLikeSource.size and f"peak disk: {peak}" in plan.summary()


def test_max_disk_above_the_peak_runs(ckpts, tmp_path):
    src = HubLikeSource(ckpts)
    src.size = None  # announce the true sizes: fetched files are checked against what was announced
    res = quiet_scan(src, tmp_path / "ds", revisions="step0,step1", prefetch=1, max_disk=10**9)
    assert res.measured == ["step0", "step1"] and sorted(src.fetched) == ["step0", "step1"]


def test_output_of_another_schema_is_refused_and_untouched(ckpts, tmp_path, capsys):
    out = tmp_path / "ds"
    quiet_scan(ckpts, out, revisions="step0")
    meta = json.loads((out / "ckptgeo.json").read_text())
    (out / "ckptgeo.json").write_text(json.dumps({**meta, "schema_version": 99, "writer": "9.9.9"}))
    before = _snapshot(out)
    with pytest.raises(DatasetLayoutError) as exc:
        quiet_scan(ckpts, out)
    assert "schema 99" in str(exc.value) and "writes schema 1" in str(exc.value) and "9.9.9" in str(exc.value)
    assert main(_cli(ckpts, "--out", out)) == 6
    assert "table schema 99" in _one_error_line(capsys)
    assert _snapshot(out) == before


def test_unreadable_marker_is_refused(ckpts, tmp_path):
    out = tmp_path / "ds"
    out.mkdir()
    (out / "ckptgeo.json").write_text("{trunc")
    with pytest.raises(DatasetLayoutError, match="unreadable"):
        quiet_scan(ckpts, out)


# ----------------------------------------------------------------------------------------------------------
# 5. the user's own files
# ----------------------------------------------------------------------------------------------------------
def test_non_dataset_folder_is_refused_and_untouched(ckpts, tmp_path, capsys):
    mine = tmp_path / "mine"
    (mine / "sub").mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    (mine / "sub" / "data.parquet").write_bytes(b"PAR1 not really")
    (mine / ".hidden").write_text("x")
    before = _snapshot(mine)
    assert main(_cli(ckpts, "--out", mine)) == 6
    assert "not a ckptgeo dataset" in _one_error_line(capsys)
    with pytest.raises(DatasetLayoutError):
        quiet_scan(ckpts, mine)
    assert _snapshot(mine) == before


def test_out_is_a_file_or_the_checkpoints_themselves(ckpts, tmp_path, capsys):
    f = tmp_path / "results.parquet"
    f.write_bytes(b"mine")
    assert main(_cli(ckpts, "--out", f)) == 6
    assert "is a file" in _one_error_line(capsys)
    assert f.read_bytes() == b"mine"
    before = {p: p.stat().st_mtime_ns for p in ckpts.rglob("*")}
    with pytest.raises(DatasetLayoutError, match="not a ckptgeo dataset"):
        quiet_scan(ckpts, ckpts)
    assert {p: p.stat().st_mtime_ns for p in ckpts.rglob("*")} == before


# eviction keeping revisions that were cached before the scan needs a Hub: tests/test_faults_network.py


# ----------------------------------------------------------------------------------------------------------
# 6. numerics
# ----------------------------------------------------------------------------------------------------------
def test_all_zero_hidden_states_give_nan_with_a_reason(ckpts, tmp_path):
    ck = tmp_path / "ck"
    shutil.copytree(ckpts, ck, ignore=shutil.ignore_patterns("step1", "step2", "step4"))
    w = ck / "step0" / "model.safetensors"
    state = load_file(str(w))
    save_file({k: torch.zeros_like(v) for k, v in state.items()}, str(w), metadata={"format": "pt"})
    res = quiet_scan(ck, tmp_path / "ds")
    assert res.measured == ["step0"] and res.failed == {}
    g = pd.read_parquet(tmp_path / "ds" / "geometry")
    assert len(g) == 3 and g.value.isna().all() and (g.reason == "all-zero hidden states").all()
    b = pd.read_parquet(tmp_path / "ds" / "behavior")
    assert b.value.notna().all()  # all logits equal: the first choice wins, a number all the same


def test_rankme_edge_values():
    assert math.isnan(rankme(torch.zeros(10, 4)))
    assert rankme(torch.randn(1, 16)) == pytest.approx(1.0, abs=1e-5)  # one sample: rank 1
    assert rankme(torch.ones(5, 3)) == pytest.approx(1.0, abs=1e-5)
    for bad in (float("nan"), float("inf")):
        x = torch.randn(6, 4)
        x[2, 1] = bad
        with pytest.raises(NonFiniteActivationsError):
            rankme(x)
    with pytest.raises(InvalidParameterError, match="2-D"):
        rankme(torch.randn(3))


def test_one_item_suite_and_n_samples_bounds(ckpts, tmp_path):
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({**MC, "prompt": "The red book is left of the blue one. Which is leftmost?",
                               "choices": ["red", "blue"]}) + "\n")
    res = quiet_scan(ckpts, tmp_path / "ds", revisions="step0", suites=(str(one),), n_samples=24)
    assert res.measured == ["step0"]
    g = pd.read_parquet(tmp_path / "ds" / "geometry")
    assert len(g) == 3 and g.value.round(4).eq(1.0).all()  # a single row has rank 1
    with pytest.raises(InvalidParameterError, match="'n_samples'"):
        quiet_scan(ckpts, tmp_path / "ds2", n_samples=1)


@pytest.mark.skip(reason="the probe metric (ckptgeo/metrics/probe.py) is another helper's issue; one-class and "
                         "one-member-class probes are to be tested there or added here once it is merged")
def test_probe_on_one_class_and_one_member_class():
    pass
