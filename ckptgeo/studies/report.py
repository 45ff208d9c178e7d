"""What a finished study writes: the analysis of its dataset, the claim table, ``reproduction.md``,
``figures/grid.png``, ``study.json`` and ``dataset/summary/claims*.parquet`` (:func:`write_study`), and the
:class:`StudyResult` that :func:`ckptgeo.studies.reproduce.run_reproduce` returns."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ckptgeo._io import atomic_write_text
from ckptgeo.studies.plan import StudyRun, budgets_text, plan_study
from ckptgeo.studies.presets import HORIZON_FACTOR, RECIPE, Preset

__all__ = ["StudyResult", "write_study", "write_study_html", "claims_text", "claims_next"]


@dataclass
class StudyResult:
    """What :func:`run_reproduce` produced: the report, the claim table, the analysis, and stage times."""

    out: Path
    report: Path | None
    claims: object = None
    analysis: object = None
    seconds: dict = field(default_factory=dict)
    analysed: bool = True


def write_study(preset: Preset, out: Path, dataset: Path, runs: list[StudyRun], *, plots: bool,
                seconds: dict) -> StudyResult:
    """Analyse ``dataset``, judge the claims and write the study's report and records (module docstring)."""
    import pandas as pd

    from ckptgeo.analysis import analyze
    import ckptgeo.forecasting.tables  # noqa: F401  (registers the forecast step and figure)
    from ckptgeo.analysis.figures import plot_grid
    from ckptgeo.analysis.report import write_report
    from ckptgeo.claimtable.registry import ClaimSettings
    from ckptgeo.claimtable.table import claim_table, grid_runs, spacing_table
    from ckptgeo.claimtable.verdicts import rules

    analysis = analyze(dataset)
    write_report(dataset, analysis=analysis, plots=plots)
    settings = ClaimSettings(n_permutations=preset.n_permutations)
    claims = claim_table(analysis.events, analysis.probe_lead, curves=analysis.curves, accuracy=analysis.accuracy,
                         probes=analysis.probes, config=analysis.config, settings=settings, tables=analysis.tables)
    spacing = spacing_table(analysis.events, analysis.curves, analysis.accuracy, config=analysis.config)
    table = grid_runs(analysis.events)
    grid_png = plot_grid(table, out / "figures" / "grid.png") if plots else None
    manifests = {}
    for r in runs:
        path = r.folder / "manifest.json"
        if path.is_file():
            manifests[r.name] = json.loads(path.read_text(encoding="utf-8"))
    revs = analysis.tables.get("revisions")
    scan_s = float(pd.to_numeric(revs["seconds"], errors="coerce").sum()) \
        if isinstance(revs, pd.DataFrame) and "seconds" in revs.columns else math.nan
    report = _write_markdown(out, preset, claims, spacing, table, manifests, grid_png, seconds, scan_s,
                             alpha=analysis.config.alpha)
    preset_record = dataclasses.asdict(preset) | {
        "steps": {t: dict(v) for t, v in preset.steps.items()},
        "settings_by_size": {k: list(v) for k, v in preset.settings_by_size.items()},
        "steps_by_size": {k: {t: dict(v) for t, v in d.items()} for k, d in preset.steps_by_size.items()}}
    study = {"preset": preset_record, "runs": [r.name for r in runs], "seconds": seconds, "recipe": RECIPE,
             "horizon_factor": HORIZON_FACTOR, "rules": rules(analysis.config),
             "claim_settings": dataclasses.asdict(settings)}
    atomic_write_text(out / "study.json", json.dumps(study, indent=1, default=str))
    summary = dataset / "summary"
    summary.mkdir(parents=True, exist_ok=True)
    atomic_write_text(summary / "claims_rules.json", json.dumps({"preset": preset.name, "rules": rules(analysis.config),
                                                                "claim_settings": dataclasses.asdict(settings),
                                                                "recipe": RECIPE}, indent=1, default=str))
    claims.to_parquet(summary / "claims.parquet", index=False)
    spacing.to_parquet(summary / "claims_spacing.parquet", index=False)
    write_study_html(out, dataset, analysis, claims, title=f"Reproduction of arXiv:2602.15997 with the "
                     f"`{preset.name}` preset", intro=f"{len(manifests)} runs; reproduction.md has every table and "
                     "the rules; this page has the claims, each run's result, its curves and the figures.")
    return StudyResult(out, report, claims=claims, analysis=analysis, seconds=seconds)


def _claims_view(claims):
    import math

    import pandas as pd

    def num(x, pct=True):
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else (f"{x:.0%}" if pct else f"{x:.3g}")

    return pd.DataFrame({
        "claim": claims["claim"], "source": claims["source"], "measured [95% interval]": claims["measured"],
        "null": [num(v, pct=i in ("order", "probe_lead", "forecast_across_sizes"))
                 for i, v in zip(claims["id"], claims["null"])],
        "p": [num(v, pct=False) for v in claims["p_value"]],
        "p (Holm)": ["primary" if k == "primary" else num(v, pct=False)
                     for k, v in zip(claims.get("kind", [""] * len(claims)), claims.get("p_holm", claims["p_value"]))],
        "verdict": claims["verdict"], "test": claims["test"], "reason": claims["reason"]})


def claims_text(claims, *, width: int = 100) -> str:
    """The claim table for a terminal, as a person reads it: per claim its verdict and the claim in words, then the
    value measured and one phrase of why (the first clause of each), p and Holm p; the whole rows are in
    ``summary/claims.parquet``, ``claims.md`` and ``report.html``.

    Examples
    --------
    >>> import pandas as pd
    >>> row = dict(id="contrast", claim="hard settings show a precursor more often than easy ones",
    ...            measured="2/5 hard, 1/4 easy", verdict="inconclusive", kind="primary", p_value=0.131,
    ...            p_holm=float("nan"), reason="too few runs counted: 9 of 20; the contrast needs both kinds")
    >>> print(claims_text(pd.DataFrame([row])))
    inconclusive    hard settings show a precursor more often than easy ones
                    measured 2/5 hard, 1/4 easy; p 0.13 (primary); why: too few runs counted: 9 of 20
    """
    import textwrap

    from ckptgeo.analysis.words import p_text, short_text

    lines = []
    pad = " " * 16
    for r in claims.to_dict("records"):
        holm = "primary" if r.get("kind") == "primary" else f"Holm p {p_text(r.get('p_holm'))}"
        p = "no test" if p_text(r.get("p_value")) == "–" else f"p {p_text(r.get('p_value'))} ({holm})"
        why = short_text(r.get("reason"), width=width - len(pad) - 5) or "no reason recorded"
        claim = textwrap.wrap(str(r.get("claim") or r.get("id")), width - len(pad)) or [""]
        lines.append(f"{str(r.get('verdict')):<15} {claim[0]}")
        lines += [pad + c for c in claim[1:]]
        measured = short_text(r.get("measured"), width=width - len(pad) - 9) or "–"
        lines += textwrap.wrap(f"measured {measured}; {p}; why: {why}", width,
                               initial_indent=pad, subsequent_indent=pad)
    return "\n".join(lines)


def claims_next(claims, dataset, report) -> str:
    """The ``next:`` line after a claim table: calibrate it on null copies when some row reached a verdict (a
    table of only inconclusive rows has nothing to calibrate), else read why in the report."""
    judged = claims["verdict"].isin(["reproduced", "not reproduced"]).any() if len(claims) else False
    return (f"next: ckptgeo claims {dataset} --calibrate 24   (how often each verdict appears on null copies)"
            if judged else f"next: no row reached a verdict here; open {report} for each row's reason")


def _spacing_view(spacing):
    import pandas as pd

    def rate(k, n, lo, hi):
        return f"{int(k)}/{int(n)} [{lo:.0%}, {hi:.0%}]" if n else "0/0"

    return pd.DataFrame({
        "every k-th checkpoint kept": spacing["factor"], "checkpoints per run (median)": spacing["checkpoints"],
        "hard runs precursor": [rate(*r) for r in spacing[["hard_k", "hard_n", "hard_low", "hard_high"]].to_numpy()],
        "easy runs precursor": [rate(*r) for r in spacing[["easy_k", "easy_n", "easy_low", "easy_high"]].to_numpy()]})


def _subset_note(preset: Preset) -> str:
    """Which runs and checkpoints the whole-model rows (LLC, Hessian, gradient ranks) come from: a subset."""
    if not preset.model_metrics:
        return ""
    runs = ("every run" if preset.model_runs_all else
            ", ".join(f"{t}-L{lv} at {size}" for t, lv, size in preset.model_runs) + f" (each of its {len(preset.seeds)} "
            f"seed(s))")
    return (f"The rows of {', '.join(preset.model_metrics)} come from a subset, not the whole grid: {runs}, at "
            f"{preset.model_checkpoints} checkpoints spread over each run's schedule (the same grid for every run of a "
            f"schedule). Their counts are counts of those runs only; the RankMe rows use every run and checkpoint.\n")


def _cannot_say(preset: Preset) -> str:
    from ckptgeo.training.sizes import get_size

    sizes = ", ".join(f"{s} ({get_size(s).n_parameters() / 1e6:.1f}M)" for s in preset.sizes)
    return f"""\
* **Whether the paper's own rules give the paper's numbers.** The paper's operational definitions (hard,
  precursor, thresholds, checkpoint spacing) are not available here; each verdict says whether *ckptgeo's*
  rules, written above and in `dataset/summary/claims_rules.json`, reproduce the claim on *this* grid.
* **Anything beyond these sizes**: {sizes}; the paper reaches 151M parameters and Pythia-2.8B. The Pythia row
  is not measured.
* **"Hard relative to capacity"** in the paper's sense: hard and easy are fixed per (task, level) from a pilot on
  `tiny` and applied at every size, so a setting easy for a larger model still counts as hard.
* **Causation.** A permutation p-value says a rate is higher than when acquisition is unrelated to the curve
  within a schedule; it cannot tell a precursor from two effects of one cause (the learning-rate schedule, the
  data), nor say that intervening on the geometry would move acquisition.
* **More than {len(preset.seeds)} seeds' worth of spread**, other optimisers or schedules (one recipe), or other
  machines: training is bitwise reproducible on one machine, not across CPUs.
* **The rest of a multi-token answer**: probes read the first answer token only.
* **More than one primary question**: the hard-minus-easy contrast is the primary row; every other row's p is
  Holm-adjusted over the rows tested, so a secondary row needs stronger evidence than p < 0.05.
* **Settings the schedules do not pair**: the contrast uses only schedules that hold both hard and easy settings.
"""


def _write_markdown(out: Path, preset: Preset, claims, spacing, runs, manifests: dict, grid_png,
                    seconds: dict, scan_s: float = math.nan, *, alpha: float) -> Path:
    from ckptgeo.analysis.report import markdown_table
    from ckptgeo.claimtable.verdicts import definitions

    train_s = sum(m.get("seconds") or 0.0 for m in manifests.values())
    threads = sorted({m.get("recipe", {}).get("threads") for m in manifests.values()} - {None})
    parts = [f"# Reproduction of arXiv:2602.15997 with the `{preset.name}` preset\n",
             (f"{preset.description}. " if preset.description else "")
             + f"{len(manifests)} of {len(plan_study(preset, out))} runs trained; training took {train_s:.0f} s in "
             f"all (sum over runs, from the manifests)"
             + (f", measuring {scan_s:.0f} s (sum over the revisions table's `seconds`: loading and measuring each "
                f"checkpoint, without each scan's start and end)" if math.isfinite(scan_s) else "")
             + ". The invocation that wrote this file spent "
             f"{seconds.get('train', 0):.0f} s training ({seconds.get('train_cpu', 0):.0f} s of CPU) and "
             f"{seconds.get('scan', 0):.0f} s scanning ({seconds.get('scan_cpu', 0):.0f} s of CPU), in this process "
             f"(others under a launcher add theirs). Threads per process: {', '.join(map(str, threads)) or '?'}.\n",
             "## Claims\n",
             "Each row: the paper's statement and where it comes from, the value measured here with its 95% "
             "interval, the value the same rule gives by chance (null), the test's p-value, and the verdict that "
             "test gives. Machine-readable: `dataset/summary/claims.parquet`.\n",
             markdown_table(_claims_view(claims), max_rows=100),
             _subset_note(preset),
             "## Checkpoint spacing as a factor\n",
             "The RankMe precursor rates again, with acquisition found again, when only every k-th checkpoint of "
             "each run is kept (the first and last always). A verdict that moves with k depends on the spacing. "
             "`k/n [interval]`: runs with a precursor out of the runs counted; a run is counted when acquisition, "
             "found again on the kept checkpoints, comes after the first of them. `0/0` (and `–` checkpoints per "
             "run): at that spacing no run of that kind is counted: each either never acquires or acquires by its "
             "first kept checkpoint, so there is no rate to give.\n",
             markdown_table(_spacing_view(spacing), max_rows=20),
             "## What this study cannot say\n", _cannot_say(preset),
             "## How the verdicts are reached\n", definitions(alpha),
             "Every rule and threshold: `study.json` (`rules`) and `dataset/summary/claims_rules.json`.\n",
             "## Recipe\n",
             f"AdamW, lr {RECIPE['lr']:g}, weight decay {RECIPE['weight_decay']:g} (matrices and embeddings), batch "
             f"{RECIPE['batch_size']} fresh items per step, {RECIPE['warmup_steps']} warm-up steps, then a cosine to "
             f"{RECIPE['min_lr_ratio']:g} x lr at {HORIZON_FACTOR} x the run's steps (so the lr ends each run "
             "at 0.55-0.7 of its peak, the warm-up's share of the horizon making up the difference); gradient "
             f"clipping at {RECIPE['grad_clip']}. Seeds {', '.join(map(str, preset.seeds))}. Steps: "
             + budgets_text(preset)
             + ". Every run's `manifest.json` holds its `recipe`.\n"]
    if grid_png is not None:
        parts += ["## The grid at a glance\n", f"![grid]({Path(grid_png).relative_to(out).as_posix()})\n",
                  f"Each cell is one setting (task x level, per size) and holds its {len(preset.seeds)} seed(s): the "
                  "colour is their most common RankMe status at the summary layer (a black outline: the seeds "
                  "disagree), the text each seed's result in seed order (a/b/c): its precursor gap in steps "
                  "(acquisition - recovery onset) or its status (`never`: not acquired, `sync`: gap 0, `none`: no "
                  "recovery onset, `start`: acquired at the first checkpoint).\n"]
    parts += ["## Runs\n", markdown_table(runs.drop(columns=["n_parameters", "suite", "config_hash"], errors="ignore"),
                                max_rows=400),
              "Per-run RankMe/accuracy figures and every table: `dataset/report.md`, `dataset/figures/`.\n"]
    path = out / "reproduction.md"
    atomic_write_text(path, "\n".join(parts))
    return path


def _calibration_view(calib):
    import pandas as pd

    return pd.DataFrame({
        "claim": calib["id"], "null": calib["null"], "copies": calib["copies"],
        "false 'reproduced' [95% Wilson]": [f"{int(k)}/{int(n)} ({r:.0%}) [{lo:.0%}, {hi:.0%}]" for k, n, r, lo, hi in
                                            calib[["false_reproduced", "copies", "rate", "low", "high"]].to_numpy()],
        "p <= alpha": [f"{int(k)}/{int(n)}" for k, n in calib[["p_at_or_below_alpha", "n_p"]].to_numpy()],
        "p(share > alpha)": [f"{v:.3g}" if v == v else "-" for v in calib["uniformity_p"]],
        "at or below alpha": ["not a null for this row" if not ap else "yes" if ok else "NO"
                              for ok, ap in calib[["ok", "applies"]].to_numpy()]})


_CALIBRATION_HEAD = "## Calibration on null copies\n"
_CALIBRATION_NOTE = (
    "Every row rerun on null copies of this dataset (`ckptgeo claims --calibrate K`): `iid` replaces each geometric "
    "curve by Gaussian noise at its own mean and variance, `random_walk` by a walk with its own step spread, "
    "`permuted` gives each run another run's accuracy on its schedule, `setting` gives each setting's runs, whole, "
    "another setting's accuracy on its schedule (seeds stay alike: the null with setting-level structure, where a "
    "test that counted runs instead of settings would fail). A 'reproduced' there is false; each row "
    "must stay at or below alpha. `p <= alpha`: the share of the row's p-values at or below alpha, and the "
    "one-sided binomial p that this share exceeds alpha (uniform p-values give about alpha). A row is held to "
    "alpha only on the nulls that void what it tests: `iid` and `random_walk` keep behaviour and each curve's level "
    "(so they are no null for the across-sizes acquisition order or the collapse floors), `permuted` and `setting` "
    "keep the geometry (no null for top-down); the probe and forecast rows are not rerun.\n")


def write_study_html(folder: Path, dataset: Path, analysis, claims, calib=None, *, title: str | None = None,
                     intro: str = "") -> Path:
    """``folder/report.html`` (:func:`ckptgeo.analysis.html.write_html`) with the claim table first: the page of a
    study (``folder`` the study, beside ``reproduction.md``) or of a dataset judged by ``ckptgeo claims``. Shows
    the grid (``figures/grid.png``) and every figure of ``dataset/figures``, linked relatively."""
    from ckptgeo.analysis.html import write_html

    figures = [p for p in (Path(folder) / "figures" / "grid.png",) if p.is_file() and Path(folder) != Path(dataset)]
    figures += sorted((Path(dataset) / "figures").rglob("*.png"))
    return write_html(analysis, Path(folder) / "report.html", claims=claims, calibration=calib, figures=figures,
                      title=title or f"Claims of arXiv:2602.15997 judged on {Path(folder).resolve().name}", intro=intro)


def write_claims(dataset: Path, claims, analysis, calib=None, *, study: Path | None = None,
                 settings=None) -> list[Path]:
    """Write ``summary/claims.parquet``, ``summary/leads.parquet``, ``summary/claims_calibration.parquet`` (with
    ``calib``), ``claims.md`` and the settings the table ran with (``summary/claims_rules.json``: the rules of
    ``analysis.config`` and the :class:`~ckptgeo.claimtable.registry.ClaimSettings` ``settings``, keeping a study's
    other records there) into ``dataset``, and ``report.html`` with the claims first (into ``study`` where given, else
    ``dataset``: :func:`write_study_html`); in a ``study`` folder also put the calibration table into its
    ``reproduction.md`` (replacing an earlier one). Returns the paths written."""
    from ckptgeo.analysis.report import markdown_table as _md
    from ckptgeo.claimtable.registry import ClaimSettings
    from ckptgeo.claimtable.verdicts import definitions, rules
    from ckptgeo.claimtable.rows.leads import leads_table
    from ckptgeo.claimtable.table import claim_context

    summary = dataset / "summary"
    summary.mkdir(parents=True, exist_ok=True)
    written = [summary / "claims.parquet", summary / "leads.parquet"]
    claims.to_parquet(written[0], index=False)
    ctx = claim_context(analysis.events, analysis.curves, analysis.accuracy, config=analysis.config)
    leads_table(ctx).to_parquet(written[1], index=False)
    parts = ["# Claims\n", "One row per claim: the value measured with its 95% interval, the null, the raw and "
             "Holm-adjusted p (the primary row is not adjusted), and the verdict.\n",
             _md(_claims_view(claims), max_rows=100)]
    calib_md = ""
    if calib is not None:
        written.append(summary / "claims_calibration.parquet")
        calib.to_parquet(written[-1], index=False)
        calib_md = _CALIBRATION_HEAD + "\n" + _CALIBRATION_NOTE + "\n" + _md(_calibration_view(calib), max_rows=200)
        parts.append(calib_md)
    parts += ["## How the verdicts are reached\n", definitions(analysis.config.alpha)]
    written.append(dataset / "claims.md")
    atomic_write_text(written[-1], "\n".join(parts))
    record = recorded_claims(dataset)
    record.update(rules=rules(analysis.config), claim_settings=dataclasses.asdict(settings or ClaimSettings()))
    written.append(summary / "claims_rules.json")
    atomic_write_text(written[-1], json.dumps(record, indent=1, default=str))
    written.append(write_study_html(study or dataset, dataset, analysis, claims, calib))
    report = study / "reproduction.md" if study is not None else None
    if calib_md and report is not None and report.is_file():
        text = report.read_text(encoding="utf-8")
        if _CALIBRATION_HEAD in text:
            head, rest = text.split(_CALIBRATION_HEAD, 1)
            nxt = rest.find("\n## ")
            text = head + calib_md + ("\n" + rest[nxt + 1:] if nxt >= 0 else "")
        else:
            cut = text.find("## Checkpoint spacing as a factor")
            text = text[:cut] + calib_md + "\n" + text[cut:] if cut >= 0 else text + "\n" + calib_md
        atomic_write_text(report, text)
        written.append(report)
    return written


def recorded_claims(dataset: Path) -> dict:
    """What ``summary/claims_rules.json`` of ``dataset`` records (``{}`` where there is none): the rules and the
    ``claim_settings`` the claim table last ran with, and a study's preset and recipe."""
    path = Path(dataset) / "summary" / "claims_rules.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
