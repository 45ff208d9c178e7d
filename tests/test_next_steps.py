"""What a new user meets at the command line (issue 25, items 4, 5 and 7): each command says what to do
next, a dry run says what it will measure and for about how long, warnings are one line, the inputs a
user reaches for work (--suite copy-L1, --tokenizer), and the help texts match the code."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from ckptgeo.cli import main


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny `ckptgeo train` run (copy level 1, 4 steps, 2 checkpoints) and what `train` printed."""
    import contextlib
    import io

    out = tmp_path_factory.mktemp("train") / "copy-L1"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["train", "--task", "copy", "--steps", "4", "--batch-size", "8", "--heldout", "20", "--warmup",
                     "1", "--checkpoints", "2", "--out", str(out)]) == 0
    return out, buf.getvalue()


def _last(text: str) -> str:
    return text.strip().splitlines()[-1]


def test_train_scan_and_analyze_each_name_the_next_command(run, tmp_path, capsys):
    folder, printed = run
    assert _last(printed) == f"next: ckptgeo scan {folder}   (then ckptgeo analyze results/copy-L1)"
    assert main(["analyze", str(folder)]) == 6          # a checkpoint folder, not a dataset
    err = capsys.readouterr().err
    assert "is a folder of 2 checkpoint folders, not a scanned dataset" in err
    assert f"scan it first with `ckptgeo scan {folder}`" in err
    ds = tmp_path / "ds"
    assert main(["scan", str(folder), "--out", str(ds), "--n-samples", "8"]) == 0
    assert _last(capsys.readouterr().out) == f"next: ckptgeo analyze {ds}"
    assert main(["revisions", str(folder), "--revisions", "all"]) == 0   # before: it ended at "2 revisions"
    assert capsys.readouterr().out.strip().splitlines()[-2:] == ["2 revisions",
                                                                 f"next: ckptgeo scan {folder} --revisions all"]


def test_dry_run_lists_measures_suites_time_and_the_total_over_ranks(run, tmp_path, capsys, monkeypatch):
    folder, _ = run
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["scan", str(folder), "--suite", "copy-L1", "--suite", "logic", "--n-samples", "50",
                 "--metrics", "rankme,behavior,hessian", "--dry-run", "--out", str(tmp_path / "ds")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "  all 2 processes: 2 to measure; this is rank 1" in out
    assert "  measures: rankme, behavior, hessian" in out
    assert "  suites: copy-L1 (50 items), logic (50 items)" in out
    took = next(line for line in out if line.startswith("estimated time: "))
    # one revision in this rank's share of a 0.4M-parameter model: seconds, the Hessian's work counted
    assert took.startswith("estimated time: ") and " s (rough: " in took and "full work" in took, took
    assert out[-1] == "next: the same command without --dry-run"
    assert main(["scan", str(folder), "--suite", "copy-L1", "--n-samples", "8", "--out", str(tmp_path / "ds")]) == 0
    out = capsys.readouterr().out.splitlines()   # rank 1 of 2 measured its one revision of the two
    assert f"all 2 processes: 1 of 2 selected revisions done so far in {tmp_path / 'ds'} (this is rank 1)" in out
    assert out[-1] == f"next: ckptgeo analyze {tmp_path / 'ds'}   (once every process has finished)"


def test_ckptgeo_warnings_are_one_line_each(local_hub, tmp_path, capsys):
    repo = local_hub.add_repo("pythia-dup", steps=(0, 1000, 2000, 3000), duplicate={"step3000": "step1000"})
    assert main(["scan", repo.repo_id, "--revisions", "all", "--suite", "logic", "--n-samples", "8",
                 "--out", str(tmp_path / "ds")]) == 0
    err = capsys.readouterr().err.splitlines()
    line = "ckptgeo: warning: step3000 holds the same weights as step1000; not fetched, not measured " \
           "(DuplicateWeightsWarning)"
    assert line in err, err
    assert not any("warnings.warn(" in e or "UserWarning" in e for e in err), err


def test_trainer_checkpoint_folders_with_a_task_suite_and_a_tokenizer(run, tmp_path, capsys):
    folder, _ = run
    hf = tmp_path / "hf-run"     # a transformers.Trainer output: checkpoint-N folders, no tokenizer files
    for step in sorted(p for p in folder.iterdir() if p.name.startswith("step")):
        dest = hf / f"checkpoint-{step.name.removeprefix('step')}"
        dest.mkdir(parents=True)
        for name in ("config.json", "model.safetensors"):
            shutil.copy(step / name, dest / name)
    assert main(["scan", str(hf), "--suite", "copy-L1", "--n-samples", "8", "--out", str(tmp_path / "a")]) == 3
    err = capsys.readouterr().err
    assert "checkpoint folders" in err and "--tokenizer PATH|REPO" in err and "step folders" not in err
    assert main(["scan", str(hf), "--suite", "copy-L1", "--n-samples", "8", "--tokenizer", str(folder / "step0"),
                 "--out", str(tmp_path / "a")]) == 0
    b = pd.read_parquet(tmp_path / "a" / "behavior")
    assert set(b.suite) == {"copy-L1"} and sorted(set(b.step)) == sorted({int(p.name[11:]) for p in hf.iterdir()})
    assert main(["probe", str(hf), "--suite", "copy-L1", "--n-samples", "20", "--tokenizer", str(folder / "step0"),
                 "--out", str(tmp_path / "p")]) == 0
    assert set(pd.read_parquet(tmp_path / "p" / "probes").suite) == {"copy-L1"}


def test_analyze_out_refuses_another_datasets_folder(run, tmp_path, capsys):
    folder, _ = run
    for name in ("a", "b"):
        assert main(["scan", str(folder), "--revisions", "step0", "--n-samples", "8",
                     "--out", str(tmp_path / name)]) == 0
    before = sorted(p.name for p in (tmp_path / "b").iterdir())
    assert main(["analyze", str(tmp_path / "a"), "--out", str(tmp_path / "b"), "--no-plots"]) == 6
    assert f"--out {tmp_path / 'b'} is another ckptgeo dataset than {tmp_path / 'a'}" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == before


def test_help_texts_match_the_code(capsys):
    with pytest.raises(SystemExit):
        main(["probe", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Without SOURCE and --revisions it probes EleutherAI/pythia-160m at every 1000th step" in text
    with pytest.raises(SystemExit):
        main(["analyze", "--help"])
    text = capsys.readouterr().out
    assert "ckptgeo analyze results/demo/dataset" in text and "ckptgeo analyze results/demo " not in text


def _hessian_estimate(options, revisions=("step0",), metrics=("rankme", "hessian"), suites=(("logic", 200),),
                      shares=None):
    """The dry run's estimate for 400 MB revisions (1e8 parameters as it counts them), less its download and forward."""
    from ckptgeo.engine.config import ScanConfig
    from ckptgeo.engine.measure import configure_metrics, restrict_to_revisions
    from ckptgeo.engine.plan import estimate_seconds
    from ckptgeo.sources.revisions import Revision

    measures = configure_metrics(ScanConfig(metrics=metrics, metric_options=options))
    measures = restrict_to_revisions(measures, [Revision(name=r, step=int(r[4:])) for r in revisions])
    base = estimate_seconds([400_000_000] * len(revisions), list(suites), {}, downloads=True)
    return estimate_seconds([400_000_000] * len(revisions), list(suites), measures, downloads=True,
                            revisions=list(revisions), shares=shares) - base


#: seconds of one item's forward and backward pass through 1e8 parameters at 32 tokens and 60 GFLOP/s
_PASS = 6 * 1e8 * 32 / 60e9


def test_the_estimate_counts_whole_model_work_not_a_time_budget():
    """The Hessian and the LLC stop by work (products, SGLD steps), not by wall time: the dry run's estimate counts
    that work (before: the 90 s budget in full, whatever max_hvp said), capped by a max_seconds where one is set,
    at the revisions the measure runs at."""
    from ckptgeo.engine.plan import estimate_seconds

    assert estimate_seconds([400_000_000], [("logic", 200)], {}, downloads=True) == 72.0   # download and forward
    one = _hessian_estimate({})   # the gradient (1 pass), then 40 products of 3.5 passes, over 32 items
    assert one == pytest.approx((1 + 40 * 3.5) * 32 * _PASS, rel=1e-3)   # 451.2 s
    assert _hessian_estimate({"hessian": {"max_hvp": 80}}) == pytest.approx((1 + 80 * 3.5) * 32 * _PASS, rel=1e-3)
    assert _hessian_estimate({"hessian": {"max_seconds": 60.0}}) == pytest.approx(60.0, abs=0.1)   # a cap, where set
    two = _hessian_estimate({"hessian": {"revisions": "step0"}}, revisions=("step0", "step1000"))
    assert two == pytest.approx(one, rel=1e-3)   # the Hessian at one of the two revisions
    sgld = _hessian_estimate({}, metrics=("rankme", "llc"))   # 2 chains x (50 + 50) steps x 32 items
    assert sgld == pytest.approx(2 * 100 * 32 * _PASS, rel=1e-3)


def test_the_hessian_estimate_counts_what_the_measure_does():
    """The 160m Hessian example (docs/scan.md) (two suites, ``hessian.params=layers.11.*``) was estimated at 35 min a
    revision against 7-8 min measured: the estimate counted 2 passes per product over the whole model, once per
    revision. The measure runs once per suite, on that suite's first ``model_items`` items; it builds the gradient
    once (a forward, 1/3 of a pass, and a backward to the parameters it spans, 2/3 x their share), and each product
    is a double backward over the spanned parameters (2.5 passes x share) after rebuilding the gradient (none with
    ``retain_graph``)."""
    per_run = (1 + 40 * 3.5) * 32 * _PASS
    assert _hessian_estimate({}, suites=(("logic", 200), ("icl", 200))) == pytest.approx(2 * per_run, rel=1e-3)
    assert _hessian_estimate({}, suites=(("copy-L1", 8),)) == pytest.approx(per_run / 4, rel=1e-3)   # 8 of 32 items
    assert _hessian_estimate({"hessian": {"retain_graph": True}}) == pytest.approx((1 + 40 * 2.5) * 32 * _PASS,
                                                                                  rel=1e-3)
    share = 0.044   # pythia-160m's layers.11.*: 7.1M of 162.3M parameters
    gradient = 1 / 3 + 2 / 3 * share
    sub = _hessian_estimate({"hessian": {"params": "layers.11.*"}}, shares={"hessian": share})
    assert sub == pytest.approx((gradient + 40 * (gradient + 2.5 * share)) * 32 * _PASS, rel=1e-3)
    assert sub / per_run == pytest.approx(0.136, abs=0.002)   # mostly the forward of each product
    llc = _hessian_estimate({"llc": {"params": "layers.11.*"}}, metrics=("llc",), shares={"llc": share})
    assert llc == pytest.approx(2 * 100 * 32 * (1 / 3 + 2 / 3 * share) * _PASS, rel=1e-3)


def test_a_dry_run_counts_the_share_of_parameters_the_hessian_spans(tmp_path):
    """The plan builds the first revision's architecture from its config.json on the meta device (no weights) to
    learn what share of the parameters ``hessian.params`` spans."""
    from ckptgeo.engine.plan import plan_scan
    from ckptgeo.metrics._autodiff import select_parameters
    from tests._checkpoints import make_checkpoints, tiny_config
    from transformers import GPTNeoXForCausalLM

    folder = make_checkpoints(tmp_path / "tiny", steps=(0,))
    model = GPTNeoXForCausalLM(tiny_config())
    share = (sum(p.numel() for _, p in select_parameters(model, "layers.1.*", metric="hessian"))
             / sum(p.numel() for p in model.parameters()))
    assert 0.05 < share < 0.5

    def hessian_part(**options):
        kw = dict(suites=("copy-L1",), n_samples=32, out=tmp_path / "ds")
        return plan_scan(folder, metrics=("hessian",), **kw, **options).estimate - plan_scan(folder, **kw).estimate

    many = {"max_hvp": 100_000}   # seconds of work on a tiny model, beyond the estimate's rounding to 0.1 s
    full = hessian_part(metric_options={"hessian": many})
    sub = hessian_part(metric_options={"hessian": {**many, "params": "layers.1.*"}})
    assert full > 100
    assert sub / full == pytest.approx((1 / 3 + 2 / 3 * share + 2.5 * share) / 3.5, rel=1e-3)


def test_a_rerun_with_other_settings_says_which_and_how_to_continue_the_earlier_run(run, tmp_path, capsys):
    """A dataset measured with the Hessian's old default (a 90 s budget): the new default (none) measures under a
    new config hash, never mixing with the old rows, and the scan says so, naming the setting and the flag that
    adds to the old run; with that flag the old run's revisions are done."""
    folder, _ = run
    out = tmp_path / "ds"
    common = ["scan", str(folder), "--suite", "copy-L1", "--n-samples", "8", "--out", str(out), "--revisions", "all",
              "--metrics", "rankme,hessian", "--metric-option", "hessian.k=1", "--metric-option", "hessian.max_hvp=2"]
    assert main(common + ["--metric-option", "hessian.max_seconds=90"]) == 0
    capsys.readouterr()
    assert main(common + ["--dry-run"]) == 0
    out_text = capsys.readouterr().out
    note = next(line for line in out_text.splitlines() if line.startswith("note: "))
    assert "holds 2 revisions of copy-L1 under config hash" in note, note
    assert "metrics.hessian.max_seconds (90.0 there, None here)" in note and "beside them" in note, note
    assert "ckptgeo_version" not in note and "source" not in note and "planned" not in note, note  # not settings
    assert note.endswith("(--metric-option hessian.max_seconds=90.0)"), note
    assert "0 already done, 2 to measure" in out_text
    assert main(common + ["--metric-option", "hessian.max_seconds=90.0", "--dry-run"]) == 0
    out_text = capsys.readouterr().out
    assert "2 already done, 0 to measure" in out_text and "note: " not in out_text
    # a run of other measures or suites beside it (a probe scan, a RankMe-only scan) is another run on purpose
    assert main(["scan", str(folder), "--suite", "copy-L1", "--n-samples", "8", "--out", str(out), "--dry-run"]) == 0
    assert "note: " not in capsys.readouterr().out
    assert main(common[:2] + ["--suite", "logic"] + common[4:] + ["--dry-run"]) == 0
    assert "note: " not in capsys.readouterr().out


class _Stop(Exception):
    pass


@pytest.mark.parametrize("verbose", [False, True])
def test_demo_keeps_the_scans_padding_lines_behind_v_as_scan_does(monkeypatch, caplog, verbose):
    """Issue 45 item 11: scripts/demo.sh (`ckptgeo demo`) logged a padding line per suite and revision (82 of them)
    that `ckptgeo scan` shows only with -v; the demo's own stages still log at INFO."""
    import logging

    import ckptgeo.cli.demo as demo

    def fake_run_demo(*args, **kwargs):
        logging.getLogger("ckptgeo.engine.measure").info("step0, suite copy-L1: 12 token slots, 3 of them padding")
        logging.getLogger("ckptgeo.studies.demo").info("training copy-L1")
        raise _Stop

    monkeypatch.setattr(demo, "run_demo", fake_run_demo)
    caplog.set_level(logging.INFO)
    with pytest.raises(_Stop):
        main((["-v"] if verbose else []) + ["demo", "--out", "unused"])
    said = [r.getMessage() for r in caplog.records]
    assert "training copy-L1" in said
    assert any("padding" in m for m in said) == verbose, said
    assert logging.getLogger("ckptgeo.engine").level == logging.NOTSET   # restored


def test_a_monitored_training_folder_has_a_fitting_next_step_and_a_status(tmp_path, capsys):
    """Issue 45 item 9: `ckptgeo status runs/copy-L1-live` refused the folder `train --monitor` made; train ended
    with `next: ckptgeo scan ...` although the measured dataset was in monitor/; its summary gave an acquisition
    step without saying it was on the checkpoints' grid (the monitor's lines use its own)."""
    out = tmp_path / "copy-L1-live"
    assert main(["train", "--task", "copy", "--steps", "4", "--batch-size", "8", "--heldout", "20", "--warmup", "1",
                 "--checkpoints", "2", "--monitor", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert _last(printed).startswith(f"next: ckptgeo analyze {out / 'monitor'}   (the monitor's dataset")
    assert "the monitor's live lines use its own grid of measuring steps" in printed
    assert main(["status", str(out)]) == 0
    said = capsys.readouterr().out
    assert f"{out}: a ckptgeo train run, complete (4 steps)" in said
    assert "monitor (" in said and "measured steps: 4 done, 0 failed, 0 in progress, 0 not started" in said
    assert _last(said) == f"next: ckptgeo analyze {out / 'monitor'}"
