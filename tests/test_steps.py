"""Analysis steps and claim rows are registries: a step an outside package adds runs in dependency order and
writes its table; a missing table or a cycle is a one-line error; a claim row added appears in the claim table."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from ckptgeo.analysis import analyze
from ckptgeo.analysis.config import read_rules
from ckptgeo.analysis.steps import STEPS, Step, all_steps, order_steps, register_step
from ckptgeo.errors import AnalysisStepError
from ckptgeo.claimtable.registry import CLAIMS, register_claim
from ckptgeo.claimtable.table import claim_table
from tests.test_analysis import _acc, _easy, _hard, _write_dataset
from tests.test_plugins import EXAMPLE, _env, _install

BUILTIN_STEPS = ["acquisitions", "events", "null_curves", "precursor_rates", "precursor_rates_by_model", "top_down",
                 "probe_lead", "across_sizes", "seed_spread", "difficulty_slope", "seed_events", "compare", "runs"]
BUILTIN_CLAIMS = ["contrast", "order", "precursor_hard", "precursor_easy", "tracking", "loss", "top_down", "llc",
                  "hessian", "floor_modular", "floor_multiplication", "across_sizes_collapse_floor",
                  "across_sizes_acquisition_step", "probe_lead", "precursor_rate", "pythia_deduction"]
#: ckptgeo's own steps, claim rows and figures outside analysis/ and claim_rows (the acquisition forecast)
PACKAGE_STEPS = ["forecast"]
PACKAGE_CLAIMS = ["forecast_geometry", "forecast_across_sizes"]
FAST = dict(n_permutations=9, n_noise_curves=0)


@pytest.fixture
def fresh(monkeypatch):
    """Registrations made by a test are undone after it (the built-ins loaded first, so they stay registered)."""
    all_steps(), CLAIMS.load_all()
    monkeypatch.setattr(STEPS, "_items", dict(STEPS._items))
    monkeypatch.setattr(CLAIMS, "_items", dict(CLAIMS._items))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    # a hard suite (RankMe recovers at step 50, accuracy at 70: gap 20 steps) and an easy one (no precursor)
    return _write_dataset(tmp_path_factory.mktemp("ds"), [
        ("toy-2x16", "modular-L3", 0.01, _acc(70), _hard(2, 2.0, recover_at=50), {}),
        ("toy-2x16", "copy-L1", 0.1, _acc(20), _easy(2, 3.0), {})])


def test_a_registered_step_runs_after_what_it_reads_and_writes_its_table(dataset, tmp_path, fresh):
    seen = {}

    # registered first but reads what the next one writes: dependency order, not registration order, decides
    @register_step(name="hard_share", reads=("gaps",), writes=("hard_share",))
    def hard_share(ctx):
        g = ctx["gaps"]
        return {"hard_share": pd.DataFrame({"share": [float((g["gap_steps"] > 0).mean())]})}

    @register_step(name="gaps", reads=("events",), writes=("gaps",))
    def gaps(ctx):
        seen["tables"] = sorted(ctx.tables)
        with pytest.raises(KeyError, match="reads 'curves' without declaring it"):
            ctx["curves"]
        e = ctx["events"]
        e = e[(e["metric"] == "rankme") & (e["layer"] == 2)]
        return {"gaps": e[["suite", "gap_steps", "status"]].sort_values("suite", ignore_index=True)}

    res = analyze(dataset, out=tmp_path / "an", **FAST)
    assert res.steps == tuple(BUILTIN_STEPS + PACKAGE_STEPS + ["gaps", "hard_share"])
    assert seen["tables"] == ["events"]   # a step sees only what it declares
    table = pd.read_parquet(tmp_path / "an" / "summary" / "gaps.parquet")
    assert table["suite"].tolist() == ["copy-L1", "modular-L3"]
    assert table["gap_steps"].tolist() == [0, 20] and table["status"].tolist() == ["synchronous", "precursor"]
    assert pd.read_parquet(tmp_path / "an" / "summary" / "hard_share.parquet")["share"].tolist() == [0.5]
    assert read_rules(tmp_path / "an" / "summary" / "gaps.parquet") == json.loads(json.dumps(res.config.rules()))
    assert list(res.summary_tables())[-2:] == ["gaps", "hard_share"] and res.tables["gaps"].equals(table)
    # the built-in tables and files are where they were
    assert tmp_path / "an" / "events" / "events.parquet" in res.written
    assert {p.name for p in (tmp_path / "an" / "summary").iterdir()} >= {"acquisitions.parquet", "runs.csv",
                                                                         "runs.tex", "seed_events.parquet"}


def test_a_step_reading_a_table_nobody_writes_is_a_one_line_error_before_any_work(dataset, tmp_path, fresh):
    register_step(name="lonely", reads=("events", "no_such_table"), writes=("lonely",))(lambda ctx: {})
    with pytest.raises(AnalysisStepError) as err:
        analyze(dataset, out=tmp_path / "an", **FAST)
    msg = str(err.value)
    assert "\n" not in msg and err.value.step == "lonely" and err.value.table == "no_such_table"
    assert msg.startswith("analysis step 'lonely' reads table 'no_such_table', which no step writes")
    assert not (tmp_path / "an").exists()


def test_cycles_and_double_writers_are_one_line_errors():
    def step(name, reads, writes):
        return Step(name, lambda ctx: {}, tuple(reads), tuple(writes))

    a, b, c = step("a", ["tb"], ["ta"]), step("b", ["ta"], ["tb"]), step("c", ["events"], ["tc"])
    with pytest.raises(AnalysisStepError, match=r"^analysis steps read each other's tables in a cycle: a -> b -> a$"):
        order_steps({"c": c, "a": a, "b": b}, inputs=("events",))
    with pytest.raises(AnalysisStepError, match=r"^table 'ta' is written by two analysis steps: 'a' and 'd'"):
        order_steps({"a": a, "d": step("d", [], ["ta"])}, inputs=())
    with pytest.raises(AnalysisStepError, match="'events' is written by two analysis steps: the dataset"):
        order_steps({"e": step("e", [], ["events"])}, inputs=("events",))
    # ties keep the given order; a reader moves after its writer
    d = step("d", ["tc"], ["td"])
    assert [s.name for s in order_steps({"d": d, "x": step("x", [], ["tx"]), "c": c}, inputs=("events",))] == \
        ["x", "c", "d"]
    with pytest.raises(ValueError, match="letters, digits and underscores"):
        register_step(name="bad", writes=("../escape",))


def test_a_registered_claim_row_is_in_the_claim_table_after_the_built_ins(fresh):
    got = {}

    @register_claim(id="n_runs", reads=("events", "extra"))
    def n_runs(ctx):
        got["tables"] = dict(ctx.tables)
        return {"id": "n_runs", "claim": "c", "paper": "p", "measured": f"{len(ctx.tables['extra'])} rows",
                "verdict": "inconclusive", "reason": "r", "evidence": "e", "value": float(len(ctx.runs))}

    empty = pd.DataFrame(columns=["model", "metric", "layer", "status"])
    t = claim_table(empty, tables={"extra": pd.DataFrame({"x": [1, 2, 3]})}, n_permutations=9)
    assert t["id"].tolist() == BUILTIN_CLAIMS + PACKAGE_CLAIMS + ["n_runs"]
    row = t.set_index("id").loc["n_runs"]
    assert row["measured"] == "3 rows" and row["value"] == 0.0 and row["verdict"] == "inconclusive"
    assert sorted(got["tables"]) == ["events", "extra"]   # only what the row declares


def test_an_installed_step_and_claim_row_run_through_entry_points(dataset, tmp_path):
    site = _install(tmp_path / "site", "[ckptgeo.analysis_steps]\ngap_by_suite = ckptgeo_example_step\n\n"
                                       "[ckptgeo.claims]\ngap_known = ckptgeo_example_step\n", name="ckptgeo_example_step")
    code = ("import ckptgeo, json\nfrom ckptgeo.claimtable.table import claim_table\n"
            f"a = ckptgeo.analyze({str(dataset)!r}, out={str(tmp_path / 'an')!r}, n_permutations=9, n_noise_curves=0)\n"
            "t = claim_table(a.events, n_permutations=9)\n"
            "print(json.dumps({'steps': a.steps, 'claims': t['id'].tolist()}))")
    proc = subprocess.run([sys.executable, "-c", code], env=_env(EXAMPLE, site), capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # built-ins first, then the steps registered by ckptgeo's higher packages and by installed packages
    assert out["steps"][:len(BUILTIN_STEPS)] == BUILTIN_STEPS
    assert sorted(out["steps"][len(BUILTIN_STEPS):]) == sorted(PACKAGE_STEPS + ["gap_by_suite"])
    assert out["claims"] == BUILTIN_CLAIMS + PACKAGE_CLAIMS + ["gap_known"]
    table = pd.read_parquet(tmp_path / "an" / "summary" / "gap_by_suite.parquet").set_index("suite")
    # rankme at layer 2 and its layer-0 ... every curve family's summary layer: one rankme curve per suite
    assert table.loc["modular-L3", "n_curves"] == 1 and table.loc["modular-L3", "n_precursor"] == 1
    assert table.loc["modular-L3", "median_gap_steps"] == 20.0 and table.loc["copy-L1", "n_precursor"] == 0


def test_a_registered_figure_is_drawn_and_linked_and_one_reading_an_unwritten_table_is_refused(dataset, tmp_path,
                                                                                              monkeypatch):
    from ckptgeo.analysis.figures import FIGURES, register_figure
    from ckptgeo.analysis.report import write_report

    FIGURES.load_all()
    monkeypatch.setattr(FIGURES, "_items", dict(FIGURES._items))
    seen = {}

    @register_figure(name="gap_hist", reads=("events",))
    def gap_hist(analysis, figures_dir, metric):
        seen["gaps"] = sorted(analysis.events["gap_steps"].dropna().astype(int).unique())
        path = figures_dir / "gap_hist.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\x89PNG\r\n\x1a\n")   # what a real figure would draw
        return [path]

    assert FIGURES.names(sorted_=False) == ["suites", "seeds", "gaps", "forecast", "gap_hist"]
    a = analyze(dataset, out=tmp_path / "an", **FAST)
    report = write_report(dataset, analysis=a, plots=True).read_text()
    assert "](figures/gap_hist.png)" in report and 20 in seen["gaps"]   # modular-L3: recovery 50, acquisition 70
    assert (tmp_path / "an" / "figures" / "gaps.png").exists()          # the built-ins still drawn

    @register_figure(name="needs_more", reads=("gap_table",))
    def needs_more(analysis, figures_dir, metric):
        raise AssertionError("not drawn")

    with pytest.raises(AnalysisStepError, match="figure 'needs_more' reads gap_table, which no analysis step writes"):
        write_report(dataset, analysis=analyze(dataset, out=tmp_path / "an2", **FAST), plots=True)
    assert not (tmp_path / "an2" / "figures").exists()   # refused before anything was drawn


def test_a_registered_steps_table_has_its_section_in_the_report(dataset, tmp_path, fresh):
    from ckptgeo.analysis.report import write_report

    @register_step(name="gap_by_suite", reads=("events",), writes=("gap_by_suite",))
    def gap_by_suite(ctx):
        e = ctx["events"]
        return {"gap_by_suite": e.groupby("suite", as_index=False)["gap_steps"].max()}

    a = analyze(dataset, out=tmp_path / "an", **FAST)
    report = write_report(dataset, analysis=a, plots=False).read_text()
    section = report.split("## gap_by_suite\n", 1)[1]
    assert section.startswith("\nFrom the analysis step `gap_by_suite`.") and "| modular-L3 | 20 |" in section


def test_a_steps_declared_report_section_is_the_one_written(dataset, tmp_path, fresh):
    """report.md's sections come from the steps' declarations: a function gives the step's own section, False
    none; every built-in step declares one or False (none falls back to the table dump)."""
    from ckptgeo.analysis.report import write_report
    from ckptgeo.analysis.steps import BUILTIN_STEPS

    @register_step(name="latest_gap", reads=("events",), writes=("latest_gap",),
                   report=lambda analysis: ["## Latest gap\n", f"{analysis.tables['latest_gap']['gap_steps'].max():g} steps\n"])
    def latest_gap(ctx):
        return {"latest_gap": ctx["events"][["suite", "gap_steps"]]}

    @register_step(name="quiet", reads=("events",), writes=("quiet",), report=False)
    def quiet(ctx):
        return {"quiet": ctx["events"].head(1)}

    a = analyze(dataset, out=tmp_path / "an", **FAST)
    report = write_report(dataset, analysis=a, plots=False).read_text()
    assert f"## Latest gap\n\n{a.tables['latest_gap']['gap_steps'].max():g} steps\n" in report
    assert "## latest_gap" not in report and a.tables["latest_gap"]["gap_steps"].max() >= 20
    assert "quiet" not in report
    # the built-ins' sections, each once, in the order their steps ran
    heads = [h for h in ("## Acquisition\n", "## Events (", "## Precursor rate", "## Top-down", "## Probe lead",
                         "## Across model sizes", "## Seeds: spread", "## Difficulty as continuous",
                         "## Seeds: events per seed")]
    assert [report.count(h) for h in heads] == [1] * len(heads)
    assert [report.index(h) for h in heads] == sorted(report.index(h) for h in heads)
    assert all(STEPS.get(n).report is False or callable(STEPS.get(n).report) for n in BUILTIN_STEPS)
    with pytest.raises(ValueError, match="report must be a function"):
        register_step(name="bad_report", writes=("x",), report="## x")
