"""The claim rows by name: what a row is (:class:`ClaimRow`), what it sees (:class:`ClaimContext`), what it returns
(:class:`Claim`), and the registry they are kept in (:data:`CLAIMS`, :func:`register_claim`).

A row is a function ``fn(ctx: ClaimContext) -> Claim`` (or a dict of :class:`Claim`'s fields) registered with the
analysis tables it reads; the built-in rows are the modules of :mod:`ckptgeo.claimtable.rows`, and an installed
package adds one through the entry-point group ``ckptgeo.claims``::

    from ckptgeo import register_claim

    @register_claim(id="my_claim", reads=("events",))
    def my_claim(ctx):     # returns a Claim, or a dict of its fields
        n = int(ctx.runs["counted"].sum())
        return {"id": "my_claim", "claim": "what the paper says", "paper": "its number",
                "measured": f"{n} counted runs", "verdict": "inconclusive", "reason": "why",
                "evidence": "events/events.parquet"}
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

import ckptgeo.stats as stats
from ckptgeo._registry import Registry
from ckptgeo._settings import Interval, setting, with_settings_doc

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Claim", "ClaimSettings", "ClaimContext", "ClaimRow", "CLAIMS", "NULLS", "register_claim", "claim_ids"]


@dataclass(frozen=True)
class Claim:
    """One row of ``reproduction.md``: the paper's statement, what was measured, the null, the test, the verdict.

    ``value``, ``low``, ``high``: the measured statistic and its 95% interval (NaN when none); ``null``: the
    statistic's mean under the null (NaN when none); ``p_value``: the test's (NaN when none); ``test``: which.
    ``kind``: "primary" (the declared primary row, judged at alpha), "holds" (a claim that something happens),
    "descriptive" (a number shown for comparison, verdict "descriptive", never in Holm's family),
    "absent" (that it does not: judged by equivalence) or "" (no test); ``p_holm``: ``p_value`` adjusted by Holm
    over every row but the primary (:func:`claim_table`); ``margin``: the equivalence margin (absence rows, in
    checkpoints); ``mde``: the smallest lead the row detects with power >= 80% at this design (checkpoints; inf:
    none tried; rank rows, floor_multiplication and across_sizes, in Kendall tau:
    :func:`ckptgeo.claimtable.power.kendall_mde`).
    """

    id: str
    claim: str
    paper: str
    measured: str
    verdict: str
    reason: str
    evidence: str
    source: str = ""
    value: float = math.nan
    low: float = math.nan
    high: float = math.nan
    null: float = math.nan
    p_value: float = math.nan
    test: str = ""
    kind: str = ""
    p_holm: float = math.nan
    margin: float = math.nan
    mde: float = math.nan


@dataclass(frozen=True)
class ClaimSettings:
    """The claim table's own settings: the work of its tests (counts, never seconds) and their seed. Its rules, the
    tests' level ``alpha`` and the event rules are the analysis's (:class:`ckptgeo.analysis.config.AnalysisConfig`).
    Each is declared once, with its ``ckptgeo claims`` flag; a study records the values it ran with
    (``summary/claims_rules.json``, ``study.json``) and ``ckptgeo claims`` on its folder reads them back.

    Attributes
    ----------
    {settings}
    """

    n_permutations: int = setting(
        stats.DEFAULT_N_PERMUTATIONS, "Relabellings per permutation test of a claim row (raised to "
        ":func:`~ckptgeo.claimtable.table.holm_permutations` of the row count where smaller).",
        admits=(Interval(int, 1, None),), flag="--n-permutations", help="relabellings per test (default %(default)s)")
    n_power: int = setting(40, "Planted replicates per lead of each row's power analysis "
                           "(:mod:`ckptgeo.claimtable.power`).", admits=(Interval(int, 1, None),), flag="--power",
                           help="planted replicates per lead in the power analysis (default %(default)s)")
    seed: int = setting(0, "Seed of the claim rows' nulls, power analyses and null copies.",
                        admits=(Interval(int, 0, None),), flag="--seed",
                        help="seed of the nulls and copies (default %(default)s)")


ClaimSettings.__doc__ = with_settings_doc(ClaimSettings.__doc__, ClaimSettings)
_DEFAULT = ClaimSettings()


@dataclass
class ClaimContext:
    """What a claim row sees: the grid's runs, their curves for the nulls, the tests' settings, and the tables
    the row declares it reads.

    Attributes
    ----------
    runs : DataFrame
        :func:`ckptgeo.claimtable.table.grid_runs` of the events (one row per grid run, ``counted`` and ``hard`` flagged).
    curves : dict
        model -> :class:`ckptgeo.claimtable.chance.Curve` (its summary-layer RankMe; for the nulls).
    accuracy : dict
        model -> (steps, accuracy, chance) arrays.
    config : AnalysisConfig or None
    n_permutations, n_power, seed : int
        The table's :class:`ClaimSettings` (``n_permutations`` already raised to
        :func:`~ckptgeo.claimtable.table.holm_permutations` of the row count where smaller).
    tables : mapping of str to DataFrame or None
        The analysis tables of the row's ``reads`` (``ctx.tables["events"]``); None where a table was not given.
    claim, source : str
        The row's statement and where the paper makes it, with its definition's anchor, as its registration
        declares them (:func:`register_claim`; :attr:`ClaimRow.source_text`): what the row puts in its
        :class:`Claim`'s ``claim`` and ``source``.
    """

    runs: pd.DataFrame
    curves: dict = field(default_factory=dict)          # model -> chance.Curve (RankMe, summary layer)
    accuracy: dict = field(default_factory=dict)        # model -> (steps, accuracy, chance)
    config: object = None
    n_permutations: int = _DEFAULT.n_permutations
    seed: int = _DEFAULT.seed
    tables: Mapping[str, Any] = field(default_factory=dict)
    n_power: int = _DEFAULT.n_power
    claim: str = ""
    source: str = ""

    @property
    def alpha(self) -> float:
        """Every test's significance level: the analysis settings' ``alpha`` (:attr:`config`, default
        ``AnalysisConfig()``), the one declaration of it."""
        from ckptgeo.analysis.config import AnalysisConfig

        return (self.config if self.config is not None else AnalysisConfig()).alpha


# ------------------------------------------------------------------------------------------- the registry

#: kinds of null copy (:mod:`ckptgeo.claimtable.calibrate`): ``iid`` and ``random_walk`` void the geometry's timing
#: (each curve keeps its level), ``permuted`` voids which accuracy curve goes with which run of a schedule, ``setting``
#: which setting's accuracy curves go with which setting's geometry (seeds kept together: setting-level structure).
NULLS = ("iid", "random_walk", "permuted", "setting")


@dataclass(frozen=True)
class ClaimRow:
    """One row of the claim table: ``fn(ctx: ClaimContext) -> Claim``, its statement (``claim``), where the paper
    makes it (``source``) and its definition's anchor in ``docs/definitions.md`` (``anchor``), its place in the
    table (``order``), the analysis tables it reads, and ``nulls``: the kinds of :data:`NULLS` that void what the
    row tests (a copy of another kind keeps it, so a "reproduced" there is not false: e.g. a random walk of RankMe
    keeps the acquisition order the across-sizes row ranks)."""

    id: str
    fn: Callable[[ClaimContext], Claim]
    reads: tuple[str, ...] = ()
    nulls: tuple[str, ...] = NULLS
    claim: str = ""
    source: str = ""
    anchor: str = ""
    order: float = math.inf

    @property
    def source_text(self) -> str:
        """``source`` with its definition's link: ``... (docs/definitions.md#claim-order)``."""
        return f"{self.source} (docs/definitions.md#{self.anchor})" if self.anchor else self.source


def _check_row(name: str, obj) -> None:
    if not isinstance(obj, ClaimRow):
        raise TypeError(f"expected a claim row registered with @register_claim(id={name!r}, ...), got "
                        f"{type(obj).__name__} {getattr(obj, '__qualname__', obj)!r}")


#: Every claim row: the built-ins (each module of :mod:`ckptgeo.claimtable.rows` registers its own), those installed
#: packages declare in the ``ckptgeo.claims`` entry-point group, and those registered in this process; the table's
#: order is :func:`claim_ids`.
CLAIMS = Registry("claim", "ckptgeo.claims", {}, check=_check_row, package="ckptgeo.claimtable.rows")


def claim_ids() -> list[str]:
    """Every registered row's id in the table's order: by the ``order`` each declares (the built-ins, in the order
    of the paper's argument), rows that declare none after them, built-ins, then installed, then registered here."""
    names = CLAIMS.names(sorted_=False)
    return sorted(names, key=lambda name: CLAIMS.get(name).order)


def register_claim(*, id: str, claim: str = "", source: str = "", anchor: str = "", order: float = math.inf,
                   reads: tuple[str, ...] = (), nulls: tuple[str, ...] = NULLS):
    """Decorator registering ``fn(ctx: ClaimContext) -> Claim`` (or a dict of :class:`Claim`'s fields) as claim row
    ``id`` in :data:`CLAIMS`.

    ``claim``: the statement the row tests, in our words; ``source``: where the paper makes it (version and
    section); ``anchor``: its definition in ``docs/definitions.md`` (``"claim-order"``; ``tests/test_docs.py``
    checks it exists for a built-in row); the row reads the first two, with the anchor, as ``ctx.claim`` and
    ``ctx.source``. ``order``: its place in the table (:func:`claim_ids`; the built-ins use 10, 20, ...; a row
    without one comes after them).

    ``reads`` names the analysis tables the row uses (``events``, ``curves``, ``accuracy``, ``probe_lead``,
    ``probes``, or any table an analysis step writes, given to :func:`claim_table` as ``tables=``); they are
    ``ctx.tables`` (None where not given). ``nulls``: the null copies that void what the row tests (default
    all of :data:`NULLS`; ``()`` for a row the calibration does not rebuild). Returns ``fn``.

    Raises
    ------
    DuplicateNameError
        ``id`` already registered to another function.
    ValueError
        ``nulls`` names a kind not in :data:`NULLS`.
    """
    unknown = sorted(set(nulls) - set(NULLS))
    if unknown:
        raise ValueError(f"claim {id!r}: unknown null kind(s) {unknown}; known: {', '.join(NULLS)}")

    def deco(fn):
        CLAIMS.register(id, ClaimRow(id=id, fn=fn, reads=tuple(reads), nulls=tuple(nulls), claim=claim,
                                    source=source, anchor=anchor, order=float(order)))
        return fn

    return deco
