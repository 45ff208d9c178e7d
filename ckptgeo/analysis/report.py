"""The report of an analysis: ``report.md`` in the analysis output folder, its tables, and links to the figures
:func:`ckptgeo.analysis.figures.plot_all` draws; beside it ``report.html``, the page a browser opens
(:mod:`ckptgeo.analysis.html`). In ``report.md`` the settings and the revisions left out come first; every other
section is declared by the analysis step that writes its tables (:mod:`ckptgeo.analysis.report_sections`).

:func:`analyze` is the public ``ckptgeo.analyze``: the analysis (:func:`ckptgeo.analysis.summary.analyze`, tables
only, what the other steps of the toolkit call), then its figures and both reports, as ``ckptgeo analyze`` writes
them.
"""

from __future__ import annotations

import os
from pathlib import Path

from ckptgeo._io import atomic_write_text
from ckptgeo.analysis.figures import plot_all
from ckptgeo.analysis.report_sections import compare_view, markdown_table, markdown_text, table_sections

__all__ = ["analyze", "write_report", "markdown_table", "markdown_text", "compare_view"]


def _left_out_md(analysis) -> str:
    """The report's "N revisions left out and why" and the table of them."""
    from ckptgeo.analysis.tables import left_out_text

    lo = getattr(analysis, "left_out", None)
    text = left_out_text(lo).replace("\n  ", "\n- ") + "\n"
    return text + ("\n" + markdown_table(lo.drop(columns=["reason"]), max_rows=200) if lo is not None and len(lo) else "")


def write_report(dir: str | os.PathLike, analysis=None, *, plots: bool = True, **analyze_kwargs) -> Path:
    """Write ``report.md`` (and, with ``plots``, ``figures/``) for a dataset.

    Parameters
    ----------
    dir : path
        The dataset folder.
    analysis : Analysis or None, default=None
        A finished analysis; None runs :func:`ckptgeo.analysis.analyze` on ``dir`` with ``analyze_kwargs``.
    plots : bool, default=True
        Draw the figures and link them.

    Returns
    -------
    Path
        ``report.md``, in the analysis output folder; ``report.html`` is written beside it
        (:func:`ckptgeo.analysis.html.write_html`).
    """
    from ckptgeo.analysis.steps import STEPS
    from ckptgeo.analysis.summary import analyze

    if analysis is None:
        analysis = analyze(dir, **analyze_kwargs)
    out = analysis.out
    figures = plot_all(analysis, out / "figures") if plots else []
    cfg = analysis.config
    e = analysis.events
    thr = ("0.5 (halfway between chance and 1 where chance ≥ 0.5)" if cfg.acc_threshold is None
           else str(cfg.acc_threshold))
    parts = [f"# ckptgeo analysis of `{analysis.root}`\n",
             "Definitions: `docs/definitions.md` (in the wheel, `ckptgeo/docs/definitions.md`; after Billa, "
             "arXiv:2602.15997). Tables: `events/events.parquet` and "
             "`summary/*.parquet` (read with `pandas.read_parquet`).\n",
             "## Settings\n",
             f"- accuracy threshold: {thr}; "
             f"window {cfg.window} checkpoints\n- recovery / onset fraction: {cfg.recovery}; collapse onset at "
             f"{cfg.collapse_fraction} of the first value; min drop {cfg.min_drop}; a gap within "
             f"{cfg.resolution_checkpoints} checkpoint is unresolved\n- nulls: {cfg.n_permutations} permutations, "
             f"{cfg.n_noise_curves} noise copies per curve and noise model (jitter, iid, random walk), seed {cfg.seed}; intervals "
             f"{cfg.confidence:g}; verdicts at alpha {cfg.alpha:g}\n- probe margin over control: "
             f"{cfg.probe_margin}\n- models: {', '.join(sorted(e['model'].unique())) if len(e) else '–'}; "
             f"{len(e)} event rows\n",
             "## Revisions left out\n", _left_out_md(analysis)]
    for name in analysis.steps:   # each step's own section, in the order the steps ran
        step = STEPS.get(name)
        if step.report is not False:
            parts += step.report(analysis) if callable(step.report) else table_sections(step, analysis)
    if figures:
        parts.append("## Figures\n")
        for p in figures:
            rel = p.relative_to(out).as_posix()
            parts.append(f"### {p.stem}\n\n![{p.stem}]({rel})\n")
    from ckptgeo.analysis.html import write_html

    path = atomic_write_text(out / "report.md", "\n".join(parts))
    write_html(analysis, out / "report.html", figures=figures)
    return path


def analyze(dir: str | os.PathLike, *, plots: bool = True, out: str | os.PathLike | None = None, **kwargs):
    """Analyse a scanned dataset and write what ``ckptgeo analyze`` writes: the tables, the figures, ``report.md``
    and ``report.html`` (the public ``ckptgeo.analyze``).

    Parameters
    ----------
    dir : path
        A ckptgeo dataset (the ``--out`` of ``ckptgeo scan``).
    plots : bool, default=True
        Draw the figures (``figures/*.png``); the reports are written either way.
    out : path or None, default=None
        Where the tables, figures and reports go; None: ``dir`` itself.
    **kwargs
        Every keyword of :func:`ckptgeo.analysis.summary.analyze` (``x``, ``difficulty``, ``keep_grouped``,
        ``config``, any rule by name); ``write=False`` writes nothing at all.

    Returns
    -------
    Analysis
        Every table by name; ``Analysis.report`` is the ``report.html`` written (None with ``write=False``).

    Raises
    ------
    DatasetLayoutError, InvalidParameterError, AnalysisStepError
        As :func:`ckptgeo.analysis.summary.analyze`.

    Examples
    --------
    >>> import ckptgeo                                                  # doctest: +SKIP
    >>> a = ckptgeo.analyze("results/demo/dataset", plots=False)        # doctest: +SKIP
    >>> a                                                               # doctest: +SKIP
    Analysis of results/demo/dataset: 2 runs, 2 suites, 1 measure (rankme) ...
    """
    import dataclasses

    from ckptgeo.analysis.summary import analyze as analyse_tables

    analysis = analyse_tables(dir, out=out, **kwargs)
    if not kwargs.get("write", True):
        return analysis
    write_report(analysis.root, analysis=analysis, plots=plots)
    return dataclasses.replace(analysis, report=analysis.out / "report.html")
