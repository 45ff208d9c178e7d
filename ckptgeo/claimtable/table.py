"""The paper's claims, one row each, judged by a test against chance on a training grid's events.

:func:`claim_table` is a pure function of the analysis tables (:class:`ckptgeo.analysis.pipeline.Analysis`:
``events``, ``probe_lead``, ``curves``, ``accuracy``) of a grid whose models are run folders named
``<task>-L<level>-<size>-s<seed>`` (:func:`ckptgeo.training.trainer.run_name`). It reads nothing and
writes nothing; :mod:`ckptgeo.studies.reproduce` writes its result into ``reproduction.md``.

Every row carries the measured value with its interval (over settings, :mod:`ckptgeo.claimtable.inference`; a
rate's never narrower than the exact binomial interval of its count), the value the same rule gives
by chance (:mod:`ckptgeo.claimtable.chance`: acquisition steps permuted across runs of one checkpoint schedule,
noise curves at each run's schedule), the test's p-value, and a verdict from that test
(:mod:`ckptgeo.claimtable.verdicts`: :func:`~ckptgeo.claimtable.verdicts.definitions`, and every rule and threshold as
:func:`~ckptgeo.claimtable.verdicts.rules`, written into the study's metadata).

Each row is a registered function ``fn(ctx: ClaimContext) -> Claim`` (:mod:`ckptgeo.claimtable.registry`) that
declares the analysis tables it reads; the built-in rows are the modules of :mod:`ckptgeo.claimtable.rows`.
:func:`grid_runs` is the grid's runs as the rows see them (``ctx.runs``).
"""

from __future__ import annotations

import dataclasses
import math
from types import MappingProxyType
from typing import Any, Callable, Mapping

import pandas as pd

import ckptgeo.stats as stats
from ckptgeo._settings import replace_params
from ckptgeo.claimtable.registry import CLAIMS, Claim, ClaimContext, ClaimSettings, claim_ids
from ckptgeo.claimtable.verdicts import numeric, size_params
from ckptgeo.events.curves import NOT_COUNTED, grid_run, preferred_variant, run_identity, run_rows, summary_rows
from ckptgeo.suites.tasks import is_hard

__all__ = ["claim_table", "claim_settings", "holm_permutations", "grid_runs", "spacing_table", "claim_context"]


def grid_runs(events: pd.DataFrame, metric: str = "rankme",
               hard: Callable[[str, int], bool] | None = None) -> pd.DataFrame:
    """One row per grid run as the claim rows see it (``ctx.runs``): its summary-layer events of ``metric``
    (uncentred where both exist), ``counted`` and ``hard`` flagged; models that are no grid run are left out. (The
    paper's runs table, ``runs.csv``, is :func:`ckptgeo.events.runs.runs_table`.)

    Parameters
    ----------
    events : DataFrame
        :attr:`Analysis.events`.
    metric : str, default="rankme"
    hard : callable (task, level) -> bool, optional
        The difficulty rule, fixed before the outcome (default :func:`is_hard`).

    Returns
    -------
    DataFrame
        Columns: model, task, level, size, n_parameters, seed, acquisition_step, acquisition_status,
        collapse_step, collapse_floor, onset_step, gap_steps, resolution_steps, status, counted, hard,
        suite, config_hash.
    """
    hard = hard or is_hard
    cols = ["model", "task", "level", "size", "n_parameters", "seed", "acquisition_step", "acquisition_status",
            "collapse_step", "collapse_floor", "onset_step", "gap_steps", "resolution_steps", "status", "counted",
            "hard", "suite", "config_hash"]
    if events is None or events.empty:
        return pd.DataFrame(columns=cols).astype({"counted": bool, "hard": bool})
    rows = []
    for r in run_rows(events, metric).itertuples(index=False):
        if grid_run(r.model) is None:
            continue
        run = run_identity(r.model, getattr(r, "suite", None), getattr(r, "task", None))
        rows.append({"model": r.model, **run, "n_parameters": size_params(run["size"]),
                     "acquisition_step": r.acquisition_step, "acquisition_status": r.acquisition_status,
                     "collapse_step": r.collapse_step, "collapse_floor": r.collapse_floor, "onset_step": r.onset_step,
                     "gap_steps": r.gap_steps, "resolution_steps": r.resolution_steps, "status": r.status,
                     "counted": r.status not in NOT_COUNTED, "hard": bool(hard(run["task"], run["level"])),
                     "suite": getattr(r, "suite", None), "config_hash": getattr(r, "config_hash", None)})
    df = pd.DataFrame(rows, columns=cols).astype({"counted": bool, "hard": bool})
    return df.sort_values(["n_parameters", "task", "level", "seed"], kind="stable", ignore_index=True)



def _contexts(runs: pd.DataFrame, curves: pd.DataFrame | None, accuracy: pd.DataFrame | None) -> tuple[dict, dict]:
    """Per run: its summary-layer RankMe curve (chance.Curve) and its accuracy curve."""
    from ckptgeo.events.acquisition_null import schedule
    from ckptgeo.claimtable.chance import Curve

    acc_by, cur_by = {}, {}
    if accuracy is not None and len(accuracy):
        for (model, suite), g in accuracy.groupby(["model", "suite"], sort=True):
            if model in set(runs["model"]):
                g = g.sort_values("step").drop_duplicates("step")
                ch = numeric(g["chance"]).iloc[0] if "chance" in g.columns else math.nan
                acc_by[model] = (g["step"].to_numpy(float), numeric(g["accuracy"]).to_numpy(), float(ch))
    if curves is None or not len(curves):
        return cur_by, acc_by
    rk = curves[curves["metric"] == "rankme"]
    for r in runs.itertuples(index=False):
        g = rk[(rk["model"] == r.model)]
        if r.config_hash is not None and "config_hash" in g.columns and (g["config_hash"] == r.config_hash).any():
            g = g[g["config_hash"] == r.config_hash]
        if not len(g):
            continue
        g = summary_rows(preferred_variant(g)).sort_values("step")
        grid = acc_by.get(r.model, (g["step"].to_numpy(float),))[0]
        acq = numeric(pd.Series([r.acquisition_step])).iloc[0]
        cur_by[r.model] = Curve(g["step"].to_numpy(float), g["value"].to_numpy(float),
                                None if (not r.counted or math.isnan(acq)) else int(acq),
                                schedule(grid), "recovery")
    return cur_by, acc_by


def claim_table(events: pd.DataFrame, probe_lead: pd.DataFrame | None = None, *, curves: pd.DataFrame | None = None,
                accuracy: pd.DataFrame | None = None, probes: pd.DataFrame | None = None, config=None,
                hard: Callable[[str, int], bool] | None = None, settings: ClaimSettings | None = None,
                tables: Mapping[str, Any] | None = None, **overrides) -> pd.DataFrame:
    """The claims of arXiv:2602.15997 against a grid's events, one row each, each with its test.

    Parameters
    ----------
    events : DataFrame
        :attr:`Analysis.events` of a dataset whose models are grid runs (``<task>-L<level>-<size>-s<seed>``);
        other models are ignored.
    probe_lead : DataFrame, optional
        :attr:`Analysis.probe_lead`; missing: the probe row is inconclusive.
    curves, accuracy : DataFrame, optional
        :attr:`Analysis.curves` and :attr:`Analysis.accuracy`: the nulls need them; without them rows have
        no p-value and the tested claims are inconclusive.
    probes : DataFrame, optional
        The probes table, for the probe's sanity gate.
    config : AnalysisConfig, optional
        The analysis's settings (the nulls re-run its rules; its ``alpha`` is every test's level); default
        ``AnalysisConfig()``.
    hard : callable (task, level) -> bool, optional
        The difficulty rule (default :func:`is_hard`).
    settings : ClaimSettings, optional
        The work of the tests and their seed (default ``ClaimSettings()``); ``n_permutations`` is raised to
        :func:`holm_permutations` of the row count where smaller.
    tables : mapping of str to DataFrame, optional
        Further analysis tables by name (``Analysis.tables``, its ``top_down`` included), for rows an installed
        package registers.
    **overrides
        Fields of :class:`ClaimSettings` set by name (``n_permutations=199``), checked against their declaration.

    Returns
    -------
    DataFrame
        One row per registered claim (:data:`CLAIMS`, in its order: the built-in rows in the order of the
        paper's argument, then the installed ones). Columns ``id``, ``claim``, ``paper``, ``measured``,
        ``verdict`` (one of :data:`VERDICTS`), ``reason``, ``evidence``, ``source``, ``value``, ``low``,
        ``high``, ``null``, ``p_value``, ``test``, ``kind``, ``p_holm``, ``margin``, ``mde``. The primary row
        (``contrast``) is judged at alpha; every other tested row also by its Holm-adjusted p. Rules:
        :func:`~ckptgeo.claimtable.verdicts.definitions`, :func:`~ckptgeo.claimtable.verdicts.rules`.

    Raises
    ------
    InvalidParameterError
        An override that is no field of :class:`ClaimSettings`, or a value out of its declared range.

    References
    ----------
    Billa, "The Geometric Anatomy of Capability Acquisition in Transformers", arXiv:2602.15997.
    """
    events = events if events is not None else pd.DataFrame(columns=["model", "metric", "layer", "status"])
    runs = grid_runs(events, hard=hard)
    cur_by, acc_by = _contexts(runs, curves, accuracy)
    given = dict(tables or {})
    settings = claim_settings(settings, **overrides)
    given.update((name, t) for name, t in (("events", events), ("probe_lead", probe_lead),
                                           ("curves", curves), ("accuracy", accuracy), ("probes", probes))
                 if t is not None or name not in given)
    names = claim_ids()
    alpha = ClaimContext(runs, config=config).alpha
    ctx = ClaimContext(runs, cur_by, acc_by, config,
                       max(int(settings.n_permutations), holm_permutations(len(names), alpha)), settings.seed,
                       n_power=settings.n_power)
    rows = []
    for name in names:
        row = CLAIMS.get(name)
        view = MappingProxyType({t: given.get(t) for t in row.reads})
        claim = row.fn(dataclasses.replace(ctx, tables=view, claim=row.claim, source=row.source_text))
        rows.append(Claim(**claim) if isinstance(claim, Mapping) else claim)
    return pd.DataFrame([r.__dict__ for r in _adjusted(rows, alpha)], columns=list(Claim.__dataclass_fields__))


def claim_settings(settings: ClaimSettings | None = None, **overrides) -> ClaimSettings:
    """``settings`` (default ``ClaimSettings()``) with ``overrides`` set by field name, checked against each
    field's declaration.

    Raises
    ------
    InvalidParameterError
        A name that is no setting (close names suggested), or a value out of its declared range.
    """
    return replace_params(settings if settings is not None else ClaimSettings(), overrides, owner="claim_table")


def holm_permutations(n_rows: int, alpha: float) -> int:
    """Fewest relabellings per permutation test that let Holm over ``n_rows`` rows reject: the smallest
    p-value, 1 / (N + 1), times ``n_rows`` must fall below alpha. :func:`claim_table` raises a smaller
    ``n_permutations`` to this (the calibration's copies ask for 199, at which Holm over 20 rows could never
    reject, so no row could read "reproduced" on a copy and the calibration would pass by construction).

    >>> holm_permutations(20, 0.05)
    400
    """
    return math.ceil(n_rows / alpha - 1e-9)


def _adjusted(rows: list[Claim], alpha: float) -> list[Claim]:
    """Holm over every tested row but the primary one; a verdict its raw p gave that the adjusted p does not
    keep becomes inconclusive (a "reproduced" that rested on p < alpha, a "not reproduced" absence that rested
    on a significant excess)."""
    from ckptgeo.claimtable.inference import holm

    family = [i for i, r in enumerate(rows) if r.kind not in ("primary", "descriptive") and r.p_value == r.p_value]
    adj = holm([rows[i].p_value for i in family])
    out = list(rows)
    for i, q in zip(family, adj):
        r = dataclasses.replace(rows[i], p_holm=float(q))
        rested = (r.verdict == "reproduced" and r.kind != "absent") or (r.verdict == "not reproduced"
                                                                     and r.kind == "absent")
        if rested and r.p_value < alpha <= q:
            r = dataclasses.replace(r, verdict="inconclusive",
                                    reason=r.reason + f"; Holm-adjusted p = {q:.3g} >= {alpha} over "
                                                      f"{len(family)} rows")
        out[i] = r
    return out


def claim_context(events: pd.DataFrame, curves: pd.DataFrame | None, accuracy: pd.DataFrame | None, *, config=None,
                  hard: Callable[[str, int], bool] | None = None) -> ClaimContext:
    """The :class:`ClaimContext` the rows see (without tables), for tables built beside the claim table."""
    runs = grid_runs(events, hard=hard)
    cur_by, acc_by = _contexts(runs, curves, accuracy)
    return ClaimContext(runs, cur_by, acc_by, config)


def spacing_table(events: pd.DataFrame, curves: pd.DataFrame, accuracy: pd.DataFrame, *, config=None,
                  hard: Callable[[str, int], bool] | None = None) -> pd.DataFrame:
    """Precursor rates of hard and easy runs with every k-th checkpoint kept
    (:func:`ckptgeo.claimtable.chance.subsample_rates`): checkpoint spacing as a factor."""
    from ckptgeo.claimtable.chance import subsample_rates

    runs = grid_runs(events, hard=hard)
    cur_by, acc_by = _contexts(runs, curves, accuracy)
    flags = dict(zip(runs["model"], runs["hard"]))
    return subsample_rates(cur_by, acc_by, lambda m: bool(flags.get(m, False)), config=config)
