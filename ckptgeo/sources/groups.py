"""The groups of revisions serving the same weights, as a scan recorded them in its ``revisions`` table.

One place reads them for every consumer: the analysis leaves the groups out
(:func:`ckptgeo.analysis.inputs.leave_out_grouped`), and cross-checkpoint tables never take a grouped revision as a
partner (:func:`ckptgeo.metrics.cross.combine`, given these by the scan and by ``analyze``).
"""

from __future__ import annotations

import pandas as pd

__all__ = ["groups_of", "grouped_revisions"]


def groups_of(revs: pd.DataFrame) -> dict[tuple[str, str], tuple[str, str]]:
    """(model, revision) -> (group id, why) for every revision in a group of one model's ``revisions`` rows:
    those the scan recorded (``weight_group``, from metadata that also knew ``main``), plus the groups
    :func:`ckptgeo.sources.integrity.check_weights` finds from the recorded sha256 (older datasets)."""
    from ckptgeo.sources.integrity import check_weights
    from ckptgeo.sources.protocol import WeightFile
    from ckptgeo.sources.revisions import Revision

    out: dict[tuple[str, str], tuple[str, str]] = {}
    for model, g in revs.groupby("model", sort=False):
        by_name, files = {}, {}
        for row in g.itertuples(index=False):
            tokens = getattr(row, "tokens", None)
            stage = getattr(row, "stage", None)
            by_name[row.revision] = Revision(int(row.step), str(row.revision),
                                             stage=None if stage is None or pd.isna(stage) else str(stage),
                                             tokens=None if tokens is None or pd.isna(tokens) else int(tokens))
            names, shas = getattr(row, "files", None), getattr(row, "sha256", None)
            if names is not None and shas is not None and len(names):
                files[row.revision] = [WeightFile(str(f), None, None if h is None else str(h))
                                       for f, h in zip(names, shas)]
            else:   # an older dataset: the whole-weights digest only
                whole = getattr(row, "weights_sha256", None)
                files[row.revision] = [WeightFile("weights", None, None if whole is None or pd.isna(whole)
                                                  else str(whole))]
        if "weight_group" in g.columns:
            notes = g["group_note"] if "group_note" in g.columns else pd.Series(None, index=g.index)
            for r, grp, note in zip(g["revision"], g["weight_group"], notes):
                if grp is not None and not pd.isna(grp):
                    out[(str(model), str(r))] = (str(grp), str(note) if note is not None and not pd.isna(note)
                                                 else f"serves the weights of {grp}")
        for grp in check_weights(list(by_name.values()), files, source=str(model)).groups:
            for r in grp.revisions:
                out.setdefault((str(model), r), (grp.name, grp.describe()))
    return out


def grouped_revisions(revisions: pd.DataFrame) -> dict[tuple[str, str], tuple[str, str]]:
    """(model, revision) -> (group, why) for every revision of the ``revisions`` table that belongs to a group of
    revisions serving the same weights (or sharing a weight file): the revisions :func:`ckptgeo.analysis.inputs.leave_out_grouped` leaves
    out by default. Empty for an empty table or one without ``model``, ``revision``, ``step`` and ``status``."""
    if revisions.empty or not {"model", "revision", "step", "status"} <= set(revisions.columns):
        return {}
    revs = revisions.assign(model=revisions["model"].astype(str), revision=revisions["revision"].astype(str))
    revs = revs[revs["status"].astype(str).isin(["ok", "duplicate"])].drop_duplicates(["model", "revision"],
                                                                                       keep="last")
    return groups_of(revs)
