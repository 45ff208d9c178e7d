"""The step after a scan that turns cross-checkpoint artifacts into rows of the ``compare`` table.

A cross-checkpoint measure (``compare=`` in :func:`~ckptgeo.metrics.registry.register_metric`: CKA,
weight distance) stores one artifact per revision; the revisions of one (model, config_hash) may have
been measured by several processes (``RANK``/``WORLD_SIZE``) or runs (resume). :func:`combine` reads
every artifact, puts the revisions of each (measure, model, config_hash) in training order (stage,
step, name) and compares each with its partners:

``previous``   the genuine revision before it in that order that has an artifact (none for the first);
``first``      the first genuine revision with an artifact (itself for the first: distance 0);
``reference``  the measure's ``reference`` setting: ``"last"`` (the last genuine revision) or a revision name
               (itself: CKA 1).

**Genuine** revisions are those in no group of revisions serving the same weights (EleutherAI/pythia#205:
``step0`` ... ``step53000`` of pythia-2.8b serve ``main``'s; :mod:`ckptgeo.sources.integrity`), as the dataset's
``revisions`` table records them; the analysis leaves the groups out (``analyze --keep-grouped`` keeps a member,
and then it may be a partner too). A grouped revision still gets its own rows (against genuine partners) and
its ``weight_group``; it is never another revision's partner, so "distance from the first checkpoint" is never
distance from a branch that serves the end of training. Each row records the choice in ``partners_from``:
``"genuine"``, or ``"all"`` when no revision of the model is genuine (nothing to choose from).

Rows depend only on the artifacts present, so the table is rebuilt whole each time: the scan does it at
its end (under the dataset's lock, so the last process to finish sees every artifact) and
``ckptgeo analyze`` again. A revision marked duplicate has no artifact and no row.
"""

from __future__ import annotations

import json
import logging
import math
from collections import OrderedDict

import pandas as pd

__all__ = ["combine", "pair_partners", "CARRIED_COLUMNS"]

log = logging.getLogger(__name__)

#: the columns a ``compare`` row copies from its revision's artifact: the revision's identity and the scan's settings
#: columns (:data:`ckptgeo.store.schemas.REVISION` + :data:`~ckptgeo.store.schemas.SETTINGS_COLUMNS`; metrics cannot
#: import the store, a sibling, so ``tests/test_settings.py`` holds the two lists together)
CARRIED_COLUMNS = ("model", "revision", "step", "stage", "commit", "tokens", "run_seed",
                   "n_samples", "position", "dtype", "seed", "config_hash", "ckptgeo_version")


def _order(meta: dict) -> tuple:
    return (meta.get("stage") or "", int(meta.get("step") or 0), str(meta.get("revision")))


def pair_partners(revisions: list[str], partners, reference: str = "last", *,
                  eligible=None) -> list[tuple[str, str, str]]:
    """(revision, against, partner) pairs for ``revisions`` in training order; partners are taken from
    ``eligible`` only (default: every revision; an empty ``eligible`` also means every revision).

    >>> pair_partners(["a", "b", "c"], ("previous", "reference"))
    [('a', 'reference', 'c'), ('b', 'previous', 'a'), ('b', 'reference', 'c'), ('c', 'previous', 'b'), \
('c', 'reference', 'c')]
    >>> pair_partners(["a", "b", "c", "d"], ("previous", "first"), eligible={"b", "d"})
    [('a', 'first', 'b'), ('b', 'first', 'b'), ('c', 'previous', 'b'), ('c', 'first', 'b'), ('d', 'previous', 'b'), \
('d', 'first', 'b')]
    """
    ok = [r for r in revisions if eligible is None or r in eligible] or list(revisions)
    ref = ok[-1] if reference == "last" else reference
    out = []
    for i, r in enumerate(revisions):
        before = [o for o in ok if revisions.index(o) < i]
        for kind in partners:
            if kind == "previous" and before:
                out.append((r, kind, before[-1]))
            elif kind == "first":
                out.append((r, kind, ok[0]))
            elif kind == "reference":
                out.append((r, kind, ref))
    return out


class _Cache:
    """The arrays of the few artifacts in use (current, previous, first, reference), loaded on demand."""

    def __init__(self, dataset, size: int = 4):
        self.dataset, self.size, self.items = dataset, size, OrderedDict()

    def get(self, path):
        if path in self.items:
            self.items.move_to_end(path)
        else:
            self.items[path] = self.dataset.read_artifact(path)
            while len(self.items) > self.size:
                self.items.popitem(last=False)
        return self.items[path]


def combine(dataset, *, metrics=None, reference: str | None = None, write: bool = True,
            left_out=None, groups=None) -> pd.DataFrame:
    """Compare every stored artifact with its partners; the ``compare`` table.

    Parameters
    ----------
    dataset : Dataset
        The scan's :class:`~ckptgeo.store.dataset.Dataset` (its ``artifacts``, ``read_artifact`` and
        ``write_whole`` are used).
    metrics : iterable of str, optional
        The cross-checkpoint measures to combine (default: every one with artifacts in the dataset).
    reference : str, optional
        Overrides each measure's ``reference`` setting (``"last"`` or a revision name) for this table.
    write : bool, default=True
        Write ``compare/compare.parquet`` (whole, atomically) when there is any artifact.
    left_out : iterable of (model, revision), optional
        The revisions never chosen as partners. The scan passes every grouped revision of its ``revisions`` table
        (:func:`ckptgeo.sources.groups.grouped_revisions`); ``analyze`` passes its ``left_out`` table, which
        honours ``--keep-grouped``. None: every revision in ``groups``.
    groups : mapping of (model, revision) to (group, why), optional
        The weight groups of the dataset's revisions (:func:`ckptgeo.sources.groups.grouped_revisions`; the scan
        and ``analyze`` pass them, since measures may not read the sources' tables), recorded in each row's
        ``weight_group``. None: no revision is grouped.

    Returns
    -------
    DataFrame
        The ``compare`` rows (columns of :data:`ckptgeo.store.schemas.COMPARE_COLUMNS`; a frame without
        columns when there is no artifact): one per (revision, partner, suite, layer or block, measure).
        A reference revision without an artifact gives rows with NaN and a reason.

    Raises
    ------
    DatasetLayoutError
        An artifact file that ckptgeo did not write.
    """
    from ckptgeo.errors import CkptgeoError
    from ckptgeo.metrics.registry import get_metric

    grouped = dict(groups or {})
    excluded = set(grouped) if left_out is None else {(str(m), str(r)) for m, r in left_out}
    root = dataset.root / "artifacts"
    names = sorted(metrics) if metrics is not None else sorted(p.name for p in root.iterdir() if p.is_dir()) \
        if root.is_dir() else []
    rows: list[dict] = []
    cache = _Cache(dataset)
    for name in names:
        try:
            spec = get_metric(name)
        except CkptgeoError as err:   # e.g. the package that registered it is no longer installed
            log.warning("artifacts/%s left out of the compare table: %s", name, err)
            continue
        if not spec.cross:
            log.warning("artifacts/%s left out of the compare table: %s is not a cross-checkpoint measure", name,
                        name)
            continue
        groups: dict[tuple, list] = {}
        for meta, path in dataset.artifacts(name):
            groups.setdefault((meta.get("model"), meta.get("config_hash")), []).append((meta, path))
        for (_model, _chash), records in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
            rows += _group_rows(spec, sorted(records, key=lambda mp: _order(mp[0])), cache, reference,
                                excluded, grouped)
    if write and names:
        dataset.write_whole("compare", rows)
    return pd.DataFrame(rows)


def _group_rows(spec, records: list, cache: _Cache, reference: str | None, excluded: set, grouped: dict
                ) -> list[dict]:
    by_name = {m["revision"]: (m, p) for m, p in records}
    order = [m["revision"] for m, _ in records]
    eligible = {r for r in order if (str(by_name[r][0].get("model")), str(r)) not in excluded}
    chosen_from = "genuine" if eligible else "all"
    if len(eligible) < len(order):
        log.info("%s: %d grouped revision(s) not used as partners (%s)", spec.name, len(order) - len(eligible),
                 ", ".join(r for r in order if r not in eligible))
    settings = dict(records[-1][0].get("settings") or {})
    options = {k: v for k, v in settings.items() if k != "revisions"}
    config = spec.configure(options)
    ref = reference or getattr(config, "reference", "last")
    rows = []
    for rev, against, partner in pair_partners(order, spec.partners, ref, eligible=eligible or None):
        meta, path = by_name[rev]
        group = grouped.get((str(meta.get("model")), str(rev)))
        base = {**{k: meta.get(k) for k in CARRIED_COLUMNS}, "metric": spec.name, "against": against,
                "partner": partner, "partners_from": chosen_from, "weight_group": group[0] if group else None}
        if partner not in by_name:
            rows.append({**base, "value": math.nan, "settings": json.dumps({**settings, "reference": ref}),
                         "reason": f"reference revision {partner!r} has no {spec.name} artifact here (not selected, "
                                   f"not measured yet, failed, or a duplicate)"})
            continue
        pmeta, ppath = by_name[partner]
        values = spec.compare(cache.get(path), cache.get(ppath), config)
        for v in values:
            value = float(v.value)
            rows.append({**base, "partner_step": pmeta.get("step"), "suite": v.suite, "layer": v.layer,
                         "block": v.block, "value": value, "distance": v.distance, "partner_norm": v.partner_norm,
                         "n_rows": v.n_rows, "reason": v.reason or spec.out_of_range(value),
                         "settings": json.dumps({**settings, **({"reference": ref} if "reference" in spec.partners
                                                                else {}), **v.extra}, sort_keys=True, default=str)})
    return rows
