"""``report.html``: the page a researcher opens in a browser, beside ``report.md``.

One file that opens from disk with nothing fetched from the network, in the order a reader asks::

    OUT/report.html
      1. what was measured    sources, revisions (measured, duplicate, failed, left out), suites, measures
      2. the claims           (a study, or after ``ckptgeo claims``) the claim in words, verdict, interval, p,
                              Holm p, one phrase of reason; the whole row on demand
      3. one row per run      status in words, acquisition, recovery onset, gap: a table that sorts (click a header)
                              and filters (type in the box)
      4. curves               RankMe per layer and accuracy over checkpoints, one run at a time: hover, zoom, pan
      5. figures              the PNGs of ``figures/`` (summary figures open, each run's folded), linked relatively
      6. tables               every summary table folded, and a link to each Parquet table it summarises

The interactive chart is Bokeh's (``bokeh`` on PyPI): its JavaScript is written inline from the installed package
(``bokeh.resources.INLINE``, about 1.3 MB, the only large part of the page), so the page needs no network and the
curves of every run travel as one JSON block that a ``<select>`` switches between. The table's sorting and
filtering, and that switch, are a few lines of our own script (glue, no library). Static figures stay PNGs under
``figures/``, linked by relative paths so that the page stays small (an 81-run study has hundreds).
"""

from __future__ import annotations

import datetime
import html
import json
import math
import os
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from ckptgeo._io import atomic_write_text
from ckptgeo.analysis.words import count_text, number_text, p_text, short_text, status_words, tokens_text

__all__ = ["write_html", "runs_view", "chart_data"]

#: the chart's largest number of runs carried in the page (the rest are in the tables): a page stays a few MB
MAX_CHART_RUNS = 400

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1200px;padding:0 1.2em 3em;
color:#222;line-height:1.45}
h1{font-size:1.5em;margin-top:1.2em}h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px solid #ddd}
.wide{overflow-x:auto;max-width:100%}table{border-collapse:collapse;font-size:.86em}
td,th{border-bottom:1px solid #e5e5e5;padding:.25em .6em;text-align:left;white-space:nowrap;vertical-align:top}
th{background:#f4f4f4;position:sticky;top:0}th.sort{cursor:pointer}th.sort:after{content:" \\2195";color:#aaa}
td.num{text-align:right;font-variant-numeric:tabular-nums}td.text{white-space:normal;min-width:18em;max-width:38em}
.v-reproduced{color:#1a7f37;font-weight:600}.v-not-reproduced{color:#b42318;font-weight:600}
.v-inconclusive{color:#8a6d00}.st-precursor{color:#1a7f37;font-weight:600}.st-unresolved{color:#8a6d00}
details{margin:.4em 0}summary{cursor:pointer}img{max-width:100%;border:1px solid #eee;margin:.3em 0}
.muted{color:#666;font-size:.9em}input.filter{margin:.4em 0;padding:.3em;width:22em}dl{margin:.3em 0}
dt{font-weight:600;float:left;clear:left;width:9em}dd{margin-left:9.5em}
"""

# Our glue: sort a table by a header (numbers as numbers, from data-v), filter its rows by text, and switch the
# chart's run. Everything the chart shows comes from the JSON block #ckptgeo-runs.
_JS = """
function ckptgeoSort(th){const t=th.closest('table'),i=[...th.parentNode.children].indexOf(th),b=t.tBodies[0];
 const asc=th.dataset.dir!=='asc';[...th.parentNode.children].forEach(h=>delete h.dataset.dir);th.dataset.dir=asc?'asc':'desc';
 const key=r=>{const c=r.children[i];const v=c.dataset.v!==undefined?c.dataset.v:c.textContent;const n=parseFloat(v);
  return v!==''&&!isNaN(n)&&isFinite(v)?[0,n]:[v===''||v==='\\u2013'?2:1,v.toLowerCase()]};
 const rows=[...b.rows].sort((x,y)=>{const a=key(x),c=key(y);if(a[0]!==c[0])return a[0]-c[0];
  return (a[1]<c[1]?-1:a[1]>c[1]?1:0)*(asc?1:-1)});rows.forEach(r=>b.appendChild(r));}
function ckptgeoFilter(inp){const q=inp.value.toLowerCase(),t=document.getElementById(inp.dataset.table);let n=0;
 [...t.tBodies[0].rows].forEach(r=>{const s=r.textContent.toLowerCase().includes(q);r.style.display=s?'':'none';n+=s});
 const c=document.getElementById(inp.dataset.table+'-count');if(c)c.textContent=n+' of '+t.tBodies[0].rows.length+' runs';}
function ckptgeoShow(key){const runs=JSON.parse(document.getElementById('ckptgeo-runs').textContent),d=runs[key];
 if(!d||!window.Bokeh||!Bokeh.documents.length)return;const doc=Bokeh.documents[0];
 doc.get_model_by_name('ckptgeo-layers').data={xs:d.layers.map(l=>d.x),ys:d.layers.map(l=>l.y),
  layer:d.layers.map(l=>'L'+l.layer),color:d.layers.map(l=>l.color)};
 doc.get_model_by_name('ckptgeo-acc').data={x:d.acc_x,y:d.acc_y};
 for(const k of ['acq','onset']){const s=doc.get_model_by_name('ckptgeo-'+k);s.location=d[k];s.visible=d[k]!==null}
 document.getElementById('ckptgeo-chart-note').textContent=d.note;}
document.addEventListener('DOMContentLoaded',()=>{
 document.querySelectorAll('th.sort').forEach(th=>th.addEventListener('click',()=>ckptgeoSort(th)));
 document.querySelectorAll('input.filter').forEach(i=>i.addEventListener('input',()=>ckptgeoFilter(i)));
 const sel=document.getElementById('ckptgeo-run');if(sel)sel.addEventListener('change',()=>ckptgeoShow(sel.value));});
"""


def _e(x) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def _isna(x) -> bool:
    try:
        return x is None or bool(pd.isna(x))
    except (TypeError, ValueError):
        return False


def _rel(path: Path, page: Path) -> str:
    """``path`` relative to the folder of ``page``, as a URL path (``figures/a%20b.png``)."""
    from urllib.parse import quote

    return quote(Path(os.path.relpath(Path(path).resolve(), Path(page).parent.resolve())).as_posix())


# ------------------------------------------------------------------------------------------------- the run table

def runs_view(analysis, metric: str = "rankme") -> pd.DataFrame:
    """One row per run (model, suite, settings) as the page shows it: the summary layer's status in words,
    acquisition, recovery onset, gap in steps and checkpoints, the checkpoint spacing, the collapse floor, and
    the acquisition in tokens where the dataset records tokens. Falls back to the first geometry measure when the
    dataset has no ``metric``."""
    from ckptgeo.events.curves import run_rows

    e = analysis.events
    if e is None or e.empty:
        return pd.DataFrame()
    if not (e["metric"] == metric).any():
        metric = sorted(e["metric"].unique())[0]
    rows = run_rows(e, metric)
    out = pd.DataFrame({
        "model": rows["model"], "suite": rows["suite"], "status": [status_words(s, short=True) for s in rows["status"]],
        "acquisition step": rows["acquisition_step"], "recovery onset step": rows["onset_step"],
        "gap (steps)": rows["gap_steps"], "gap (checkpoints)": rows.get("gap_checkpoints"),
        "checkpoint spacing": rows["resolution_steps"], f"{metric} floor": rows["collapse_floor"],
        "layer": rows["layer"]})
    tokens = pd.to_numeric(rows["acquisition_tokens"], errors="coerce") if "acquisition_tokens" in rows else None
    if tokens is not None and tokens.notna().any():
        out.insert(4, "acquisition (tokens)", rows["acquisition_tokens"])
    out.attrs["metric"] = metric
    out.attrs["status"] = list(rows["status"])
    return out.reset_index(drop=True)


def _cell(v, column: str) -> str:
    """A ``<td>`` with the sort key in ``data-v`` and the number in words."""
    if _isna(v):
        return '<td data-v="">–</td>'
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
        f = float(v)
        shown = (tokens_text(f) if "tokens" in column else f"{int(f):,}" if f == int(f) and abs(f) < 1e15
                 else number_text(f))
        return f'<td class="num" data-v="{f!r}">{_e(shown)}</td>'
    return f"<td>{_e(v)}</td>"


def _runs_table(view: pd.DataFrame) -> str:
    if view.empty:
        return "<p>No geometry curve in this dataset: no run to show.</p>"
    statuses = view.attrs.get("status", [None] * len(view))
    head = "".join(f'<th class="sort" title="sort">{_e(c)}</th>' for c in view.columns)
    body = []
    for st, row in zip(statuses, view.itertuples(index=False)):
        cells = [(f'<td class="st-{_e(st)}" title="{_e(status_words(st))}">{_e(v)}</td>' if c == "status"
                  else _cell(v, c)) for c, v in zip(view.columns, row)]
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<input class="filter" type="search" placeholder="filter runs (model, suite, status …)" '
            f'data-table="runs-table" aria-label="filter runs"> <span class="muted" id="runs-table-count">'
            f'{len(view)} runs</span>\n<div class="wide"><table id="runs-table"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


# ------------------------------------------------------------------------------------------------------ claims

def _claims_table(claims: pd.DataFrame) -> str:
    """The claim table as a person reads it: the claim in words, verdict, measured value with its interval, p,
    Holm p, one phrase of reason, and the whole row (reason, test, evidence, source) folded under the claim."""
    rows = []
    for r in claims.to_dict("records"):
        verdict = str(r.get("verdict", ""))
        holm = "primary" if r.get("kind") == "primary" else p_text(r.get("p_holm"))
        more = "".join(f"<dt>{_e(k)}</dt><dd>{_e(r.get(k))}</dd>" for k in ("reason", "test", "evidence", "paper",
                                                                            "source", "id")
                       if not _isna(r.get(k)) and str(r.get(k)))
        rows.append(f'<tr><td class="text"><details><summary>{_e(r.get("claim"))}</summary><dl>{more}</dl></details>'
                    f'</td><td class="v-{_e(verdict.replace(" ", "-"))}">{_e(verdict)}</td>'
                    f'<td class="text">{_e(r.get("measured"))}</td><td class="num" data-v="{_e(r.get("p_value"))}">'
                    f'{_e(p_text(r.get("p_value")))}</td><td class="num">{_e(holm)}</td>'
                    f'<td class="text">{_e(short_text(r.get("reason")))}</td></tr>')
    head = "".join(f'<th class="sort">{h}</th>' for h in ("claim (click for the whole row)", "verdict",
                                                           "measured [95% interval]", "p", "Holm p", "why"))
    return f'<div class="wide"><table id="claims-table"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}' \
           f"</tbody></table></div>"


# ------------------------------------------------------------------------------------------------------- chart

def _sig(values, digits: int = 4) -> list:
    """Floats rounded to ``digits`` significant digits (JSON ``null`` for NaN): the chart's data stays small."""
    out = []
    for v in np.asarray(values, dtype=float):
        out.append(None if not math.isfinite(v) else float(f"{v:.{digits}g}"))
    return out


def chart_data(analysis, metric: str = "rankme", max_runs: int = MAX_CHART_RUNS) -> dict[str, dict]:
    """Per run (``"model · suite"``), what the interactive chart draws: each layer's ``metric`` over checkpoints,
    the accuracy, and the summary layer's recovery onset and acquisition (on the analysis's x axis)."""
    from bokeh.palettes import Viridis256

    from ckptgeo.events.curves import run_accuracy, run_curves, summary_event

    c = analysis.curves
    if c is None or c.empty or not (c["metric"] == metric).any():
        return {}
    xcol = "tokens" if getattr(analysis, "x", "steps") == "tokens" else "step"
    pairs = sorted(set(c.loc[c["metric"] == metric, ["model", "suite"]].itertuples(index=False, name=None)))
    out: dict[str, dict] = {}
    for model, suite in pairs[:max_runs]:
        chash, sub = run_curves(analysis, model, suite, metric)
        if sub.empty:
            continue
        wide = sub.pivot_table(index=xcol, columns="layer", values="value", aggfunc="mean").sort_index()
        layers = list(wide.columns)
        colours = {l: Viridis256[int(230 * i / max(1, len(layers) - 1))] for i, l in enumerate(layers)}
        acc = run_accuracy(analysis, model, suite, chash)
        ev = summary_event(analysis, model, suite, chash, metric)
        unit = "tokens" if xcol == "tokens" else "step"

        def at(col):
            return None if ev is None or _isna(ev.get(f"{col}_{unit}")) else float(ev[f"{col}_{unit}"])

        note = "" if ev is None else (
            f"{model} · {suite}: {status_words(ev['status'])}; summary layer L{int(ev['layer'])}"
            + ("" if _isna(ev.get("gap_steps")) else f", gap {int(ev['gap_steps']):,} steps"))
        out[f"{model} · {suite}"] = {
            "x": _sig(wide.index.to_numpy(dtype=float), 10),
            "layers": [{"layer": int(l), "y": _sig(wide[l].to_numpy()), "color": colours[l]} for l in layers],
            "acc_x": _sig(acc[xcol].to_numpy(dtype=float), 10) if not acc.empty else [],
            "acc_y": _sig(acc["accuracy"].to_numpy()) if not acc.empty else [],
            "acq": at("acquisition"), "onset": at("onset"), "note": note}
    return out


def _chart(data: dict[str, dict], metric: str, xcol: str) -> tuple[str, str]:
    """The Bokeh figure of the first run, embedded (``(scripts, body)``); the select and the JSON of every run."""
    from bokeh.embed import components
    from bokeh.models import ColumnDataSource, HoverTool, LinearAxis, LinearScale, Range1d, Span
    from bokeh.plotting import figure
    from bokeh.resources import Resources

    first = data[next(iter(data))]
    p = figure(height=380, sizing_mode="stretch_width", y_axis_type="log", tools="pan,wheel_zoom,box_zoom,reset,save",
               x_axis_label="training tokens" if xcol == "tokens" else "training step", y_axis_label=metric)
    layers = ColumnDataSource(name="ckptgeo-layers", data={
        "xs": [first["x"]] * len(first["layers"]), "ys": [l["y"] for l in first["layers"]],
        "layer": [f"L{l['layer']}" for l in first["layers"]], "color": [l["color"] for l in first["layers"]]})
    lines = p.multi_line("xs", "ys", source=layers, line_color="color", line_width=1.6,
                         hover_line_width=3.5, hover_line_color="color")
    p.y_range.renderers = [lines]   # the log axis fits the curves, not the accuracy drawn on the right axis
    p.extra_y_ranges = {"acc": Range1d(-0.02, 1.02)}
    p.extra_y_scales = {"acc": LinearScale()}   # the main axis is log; accuracy is not
    p.add_layout(LinearAxis(y_range_name="acc", axis_label="accuracy"), "right")
    acc = ColumnDataSource(name="ckptgeo-acc", data={"x": first["acc_x"], "y": first["acc_y"]})
    acc_line = p.line("x", "y", source=acc, y_range_name="acc", line_color="black", line_width=2.2)
    fmt = "{0.00a}" if xcol == "tokens" else "{0,0}"
    p.add_tools(HoverTool(renderers=[lines], tooltips=[("layer", "@layer"), ("x", f"$x{fmt}"), (metric, "$y{0.00}")],
                          line_policy="interp"),
                HoverTool(renderers=[acc_line], tooltips=[("x", f"@x{fmt}"), ("accuracy", "@y{0.000}")]))
    for name, colour, dash in (("acq", "#d62728", "solid"), ("onset", "#555555", "dashed")):
        span = Span(name=f"ckptgeo-{name}", location=first[name], dimension="height", line_color=colour,
                    line_dash=dash, line_width=2, visible=first[name] is not None)
        p.add_layout(span)
    script, div = components(p)
    js = Resources(mode="inline", components=["bokeh"]).render_js()
    options = "".join(f'<option value="{_e(k)}">{_e(k)}</option>' for k in data)
    runs = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    body = (f'<p><label>run <select id="ckptgeo-run">{options}</select></label> '
            f'<span class="muted" id="ckptgeo-chart-note">{_e(first["note"])}</span></p>{div}'
            f'<p class="muted">{_e(metric)} of every layer (colour: shallow dark, deep light; hover for the layer) '
            f"on a log axis, accuracy in black on the right axis; red: acquisition, dashed grey: the summary layer's "
            f"recovery onset. Drag to pan, the wheel to zoom, reset to go back.</p>"
            f'<script type="application/json" id="ckptgeo-runs">{runs}</script>')
    return js + script, body


# --------------------------------------------------------------------------------------------------- the page

def _measured(analysis) -> str:
    """What was measured: sources, revisions, suites, measures, what was left out and why."""
    from ckptgeo.analysis.inputs import left_out_text

    items = []
    c, acc = analysis.curves, analysis.accuracy
    models = sorted(set(c["model"]) | set(acc["model"])) if c is not None and acc is not None else []
    src = Path(analysis.root) / "sources.json"
    sources = {}
    if src.is_file():
        try:
            sources = json.loads(src.read_text(encoding="utf-8"))
        except ValueError:
            sources = {}
    shown = ", ".join(_e(m) + (f' <span class="muted">({_e(sources[m])})</span>' if isinstance(sources.get(m), str)
                               else "") for m in models[:12])
    items.append(f"<li><b>{len(models)} model{'s' if len(models) != 1 else ''}</b>: {shown}"
                 + (f" and {len(models) - 12} more (the run table below lists every one)" if len(models) > 12 else "")
                 + "</li>")
    revs = analysis.tables.get("revisions")
    if isinstance(revs, pd.DataFrame) and not revs.empty and "status" in revs.columns:
        counts = revs["status"].astype(str).value_counts()
        steps = pd.to_numeric(revs.get("step"), errors="coerce").dropna()
        items.append(f"<li><b>{len(revs)} revisions</b> recorded: "
                     + ", ".join(f"{n} {_e(s)}" for s, n in counts.items())
                     + (f"; steps {int(steps.min()):,} to {int(steps.max()):,}" if len(steps) else "") + "</li>")
    suites = sorted(set(acc["suite"]) | set(c["suite"])) if c is not None and acc is not None else []
    items.append(f"<li><b>{len(suites)} suite{'s' if len(suites) != 1 else ''}</b>: "
                 f"{_e(', '.join(suites[:20]))}{' …' if len(suites) > 20 else ''}</li>")
    metrics = sorted(set(c["metric"])) if c is not None and len(c) else []
    n_ck = c.groupby(["model", "suite"])["step"].nunique() if c is not None and len(c) else pd.Series(dtype=float)
    items.append(f"<li><b>measures</b>: {_e(', '.join(metrics) or 'none')}"
                 + (f"; {int(n_ck.min())} to {int(n_ck.max())} checkpoints a run" if len(n_ck) else "") + "</li>")
    left = left_out_text(analysis.left_out)
    why = f"<details><summary>why</summary><pre>{_e(left)}</pre></details>" if "\n" in left else ""
    items.append(f"<li><b>integrity</b>: {_e(left.splitlines()[0] if left else 'nothing left out')}{why}</li>")
    cfg = analysis.config
    items.append(f'<li class="muted">rules: window {cfg.window} checkpoints, recovery fraction {cfg.recovery:g}, '
                 f"min drop {cfg.min_drop:g}, {cfg.n_permutations} permutations, seed {cfg.seed} (every rule: the "
                 f"Parquet metadata of each table, and report.md)</li>")
    return "<ul>" + "".join(items) + "</ul>"


def _table_html(df: pd.DataFrame, max_rows: int = 200) -> str:
    view = df.head(max_rows).copy()
    for col in view.columns:   # nested values (lists, dicts) as text; no object reaches to_html unescaped
        if view[col].dtype == object:
            view[col] = [v if isinstance(v, str) or _isna(v) else str(v) for v in view[col]]
    text = view.to_html(index=False, na_rep="–", border=0, escape=True,
                        float_format=lambda v: number_text(v))
    more = f'<p class="muted">{len(df) - max_rows} more rows in the Parquet table.</p>' if len(df) > max_rows else ""
    return f'<div class="wide">{text}</div>{more}'


def _tables(analysis, page: Path) -> str:
    """Each table the analysis wrote, folded (precursor rates open), then links to every Parquet table."""
    parts = []
    for name, folder in analysis.folders.items():
        t = analysis.tables.get(name)
        if not isinstance(t, pd.DataFrame) or name == "events":
            continue
        open_ = " open" if name == "precursor_rates" and len(t) else ""
        parts.append(f"<details{open_}><summary><b>{_e(name.replace('_', ' '))}</b> <span class='muted'>"
                     f"({len(t)} rows, {_e(folder)}/{_e(name)}.parquet)</span></summary>"
                     f"{_table_html(t) if len(t) else '<p>(none)</p>'}</details>")
    links = []
    out = Path(analysis.out)
    for folder in ("events", "summary", "forecast", "compare"):
        for p in sorted((out / folder).glob("*.parquet")) + sorted((out / folder).glob("*.csv")):
            links.append(f'<li><a href="{_rel(p, page)}">{_e(p.relative_to(out).as_posix())}</a></li>')
    root = Path(analysis.root)
    for table in ("geometry", "behavior", "probes", "revisions"):
        if (root / table).is_dir():
            n = len(list((root / table).glob("*.parquet")))
            links.append(f'<li><a href="{_rel(root / table, page)}/">{_e(table)}/</a> <span class="muted">({n} part '
                         f"file{'s' if n != 1 else ''}, one per revision: read the folder with "
                         f"pandas.read_parquet)</span></li>")
    for file in (page.parent / "reproduction.md", out / "report.md", out / "claims.md"):
        if file.is_file():
            links.append(f'<li><a href="{_rel(file, page)}">{_e(file.name)}</a></li>')
    return "".join(parts) + "<h3>Files</h3><ul>" + "".join(links) + "</ul>"


def _figures(figures: Iterable[Path], page: Path) -> str:
    """Summary figures (no ``__`` in the name: gaps, grid) open; each run's figures folded under its name."""
    figures = [Path(p) for p in figures if p is not None and Path(p).is_file()]
    if not figures:
        return "<p>No figures (written with plots off).</p>"
    summary = [p for p in figures if "__" not in p.stem]
    per_run: dict[str, list[Path]] = {}
    for p in figures:
        if "__" in p.stem:
            per_run.setdefault(("forecast: " if p.parent.name == "forecast" else "")
                               + " · ".join(p.stem.split("__")[:2]), []).append(p)

    def img(p: Path) -> str:
        return (f'<figure><a href="{_rel(p, page)}"><img loading="lazy" src="{_rel(p, page)}" alt="{_e(p.stem)}">'
                f'</a><figcaption class="muted">{_e(p.name)}</figcaption></figure>')

    parts = [img(p) for p in summary]
    parts += [f"<details><summary>{_e(k)} <span class='muted'>({len(v)} figure{'s' if len(v) != 1 else ''})</span>"
              f"</summary>{''.join(img(p) for p in v)}</details>" for k, v in sorted(per_run.items())]
    return "".join(parts)


def write_html(analysis, path: str | os.PathLike | None = None, *, title: str | None = None,
               claims: pd.DataFrame | None = None, calibration: pd.DataFrame | None = None,
               figures: Iterable[Path] | None = None, intro: str = "", metric: str = "rankme") -> Path:
    """Write ``report.html`` for an analysis (see the module docstring for what it holds).

    Parameters
    ----------
    analysis : Analysis
        A finished analysis (:func:`ckptgeo.analysis.pipeline.analyze`).
    path : path or None, default=None
        The page; None: ``analysis.out / "report.html"``. Links to figures and tables are relative to its folder.
    title : str or None, default=None
    claims : DataFrame or None, default=None
        A claim table (:func:`ckptgeo.claimtable.table.claim_table`), shown second.
    calibration : DataFrame or None, default=None
        Its calibration on null copies (``ckptgeo claims --calibrate``), folded.
    figures : iterable of Path or None, default=None
        PNGs to show; None: every PNG under ``analysis.out / "figures"``.
    intro : str, default=""
        A paragraph of plain text under the title.
    metric : str, default="rankme"
        The measure of the run table and the chart.

    Returns
    -------
    Path
        The page, written atomically.
    """
    page = Path(path) if path is not None else Path(analysis.out) / "report.html"
    page = page.resolve()
    figures = sorted(Path(analysis.out, "figures").rglob("*.png")) if figures is None else list(figures)
    title = title or f"ckptgeo analysis of {Path(analysis.root).name}"
    view = runs_view(analysis, metric)
    data = chart_data(analysis, view.attrs.get("metric", metric)) if not view.empty else {}
    xcol = "tokens" if getattr(analysis, "x", "steps") == "tokens" else "step"
    head_js, chart = _chart(data, view.attrs.get("metric", metric), xcol) if data else ("", "<p>No curve to draw.</p>")
    from ckptgeo._version import __version__

    sections = [f"<h1>{_e(title)}</h1>",
                f'<p class="muted">{_e(Path(analysis.root).resolve())} · ckptgeo {_e(__version__)} · written '
                f"{_e(datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'))}</p>",
                f"<p>{_e(intro)}</p>" if intro else "",
                "<h2>What was measured</h2>", _measured(analysis)]
    if claims is not None and len(claims):
        sections += ["<h2>Claims</h2>", '<p class="muted">Each claim of arXiv:2602.15997 with the value measured here, '
                     "its test's p and the Holm-adjusted p (the primary row is not adjusted), the verdict that test "
                     "gives, and why in one phrase; click a claim for the whole row.</p>", _claims_table(claims)]
        if calibration is not None and len(calibration):
            sections.append(f"<details><summary><b>calibration on null copies</b> ({len(calibration)} rows)</summary>"
                            f"{_table_html(calibration)}</details>")
    n_runs = len(view)
    sections += [f"<h2>One row per run</h2>",
                 f'<p class="muted">{_e(view.attrs.get("metric", metric))} at each run\'s summary layer (the deepest): '
                 "status, acquisition, recovery onset and the precursor gap (acquisition minus recovery onset; a gap "
                 "within the checkpoint spacing is unresolved, not a precursor). Click a header to sort, type to "
                 "filter. Every layer: <code>events/events.parquet</code>.</p>",
                 _runs_table(view),
                 "<h2>Curves</h2>", chart if n_runs else "<p>No curve to draw.</p>",
                 "<h2>Figures</h2>", _figures(figures, page),
                 "<h2>Tables</h2>", _tables(analysis, page)]
    doc = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
           f'content="width=device-width, initial-scale=1"><title>{_e(title)}</title><style>{_CSS}</style>'
           f"{head_js}<script>{_JS}</script></head><body>\n" + "\n".join(sections) + "\n</body></html>\n")
    return atomic_write_text(page, doc)
