"""The schema of every Parquet table ckptgeo writes, in one place.

Tables a scan writes (one part per revision, :class:`~ckptgeo.store.dataset.Dataset`)::

    geometry   one row per (revision, suite, metric, layer[, index]): a measure's value
    behavior   one row per (revision, suite, metric): accuracy, accuracy_norm, loss (the task loss: mean
               cross-entropy in nats over each item's answer tokens, averaged over the items)
    probes     one row per (revision, suite, layer): linear-probe accuracy against its control
    revisions  one row per revision: status, weight files and their sha256, duplicates, the group of
               revisions serving the same weights (``weight_group``, ``group_note``), seconds per stage

The analysis writes ``events`` (one row per curve, :func:`ckptgeo.analysis.pipeline.analyze`).
Cross-checkpoint measures (CKA, weight distance) store an artifact per revision under ``artifacts/``
and, after the scan, ``compare`` (one row per revision, partner, suite, metric and layer or block;
:func:`ckptgeo.metrics.cross.combine`): ``against`` says which partner (``previous``, ``first``,
``reference``), ``partner``/``partner_step`` which revision that was, ``partners_from`` among which revisions
partners were chosen (``genuine``: none of a group serving the same weights) and ``weight_group`` the revision's
own group (null for a genuine one).

Each measurement row carries the revision's identity (:data:`IDENTITY`) and the scan settings
(:data:`SETTINGS_COLUMNS`: the :class:`~ckptgeo.engine.scan.ScanConfig` fields named there, then
``config_hash`` and ``ckptgeo_version``). Changing a table's columns incompatibly means bumping
:data:`ckptgeo.constants.DATASET_SCHEMA_VERSION`.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["SCHEMAS", "SCAN_TABLES", "COMPARE_COLUMNS", "REVISION", "IDENTITY", "SETTINGS_COLUMNS", "SCAN_SETTINGS",
           "RANKME_COLUMNS", "QUALITY_COLUMNS", "EVENTS_COLUMNS", "REVISION_GROUP", "REVISION_SECONDS", "EVENT_TOKENS", "TIMING_COLUMNS"]

_s, _i, _f, _b = pa.string(), pa.int64(), pa.float64(), pa.bool_()

#: who was measured: the model and revision (name, step, commit, tokens seen) and the suite. ``stage``
#: (OLMo-2 ``stage2-ingredient1``; null where the suite has none), ``tokens`` (from the name, or step x
#: tokens per step), ``run_seed`` (the training run's seed in a family of repos; the scan's own ``--seed``
#: is the ``seed`` column).
REVISION = [("model", _s), ("revision", _s), ("step", _i), ("stage", _s), ("commit", _s), ("tokens", _i),
            ("run_seed", _i)]
IDENTITY = REVISION + [("suite", _s)]
#: the :class:`~ckptgeo.engine.scan.ScanConfig` fields stamped on every measurement row, and their types: each is
#: declared ``hashed="value"`` in ``ckptgeo/engine/config.py`` (``tests/test_settings.py`` holds them together).
SCAN_SETTINGS = [("n_samples", _i), ("position", _s), ("dtype", _s), ("seed", _i)]
#: every settings column of a measurement row, in order.
SETTINGS_COLUMNS = SCAN_SETTINGS + [("config_hash", _s), ("ckptgeo_version", _s)]
#: RankMe's settings (its ``columns``) as geometry columns: filled on RankMe's rows, null on other measures'.
#: Every measure's full settings are the JSON ``settings`` column.
RANKME_COLUMNS = [("centered", _b), ("epsilon", _f)]
#: how far a geometry value can be trusted: ``value_low`` / ``value_high`` its interval from resampling the
#: items at that checkpoint (RankMe; ``rankme.n_resamples``, ``rankme.confidence``); ``converged`` False where
#: a budget cut a whole-model estimate short (Hessian: ``max_hvp`` / ``max_seconds``; LLC: ``max_seconds``),
#: the analysis leaves such values out; ``grad_norm`` the task loss's gradient norm at the checkpoint (LLC:
#: near zero at a minimum, where its SGLD estimate is meant to be taken). Null where a measure has none, and in
#: datasets written before they were added.
QUALITY_COLUMNS = [("value_low", _f), ("value_high", _f), ("converged", _b), ("grad_norm", _f)]

#: the group of revisions (at different training points) serving the same weights, or sharing a weight file,
#: as the metadata of the scan's selection and ``main`` showed (:mod:`ckptgeo.sources.integrity`):
#: ``weight_group`` its earliest member's name, ``group_note`` what it is ("... serve the weights of main").
#: Null for a revision in no group. Added after the first datasets: absent (all null) in older ones.
REVISION_GROUP = [("weight_group", _s), ("group_note", _s)]
#: where a revision's time went, in wall seconds: its download (the fetch call, in the background while the
#: previous revision is measured), the wait for it, verifying sha256, loading the weights, each measure
#: (``measure_names`` / ``measure_seconds``, parallel lists) and writing its parts. Null where the stage did
#: not run (a duplicate is not fetched). Absent in datasets written before they were added.
REVISION_SECONDS = [("seconds_download", _f), ("seconds_wait", _f), ("seconds_verify", _f), ("seconds_load", _f),
                    ("measure_names", pa.list_(_s)), ("measure_seconds", pa.list_(_f)), ("seconds_write", _f)]
#: the columns that hold wall time (they differ between two runs of the same scan; compare tables without them)
TIMING_COLUMNS = ("seconds",) + tuple(n for n, t in REVISION_SECONDS if n != "measure_names")

#: the events' checkpoints in training tokens seen (from the ``tokens`` column the scan recorded: the name,
#: or step x the naming scheme's global batch), null where unknown: ``first``, ``last``, ``acquisition``,
#: ``collapse``, ``onset``, ``collapse_onset`` at ``X_tokens``, and ``gap_tokens`` = acquisition - onset.
EVENT_TOKENS = [(f"{c}_tokens", _i) for c in ("first", "last", "acquisition", "collapse", "onset", "collapse_onset",
                                                "gap")]

SCHEMAS: dict[str, pa.Schema] = {
    "geometry": pa.schema(IDENTITY + [("layer", _i), ("metric", _s), ("index", _i), ("value", _f), ("reason", _s),
                                      ("settings", _s), ("seconds", _f)] + SETTINGS_COLUMNS + RANKME_COLUMNS
                        + QUALITY_COLUMNS),
    "behavior": pa.schema(IDENTITY + [("metric", _s), ("value", _f), ("n_items", _i), ("chance", _f), ("kind", _s),
                                      ("seconds", _f)] + SETTINGS_COLUMNS),
    "probes": pa.schema(IDENTITY + [("layer", _i), ("accuracy", _f), ("accuracy_std", _f), ("chance", _f),
                                    ("control_accuracy", _f), ("n", _i), ("k", _i), ("reason", _s), ("settings", _s),
                                    ("p_value", _f)] + SETTINGS_COLUMNS),
    "revisions": pa.schema(REVISION + [("status", _s), ("error", _s), ("files", pa.list_(_s)),
                                           ("sha256", pa.list_(_s)), ("bytes", pa.list_(_i)), ("weights_sha256", _s),
                                           ("duplicate_of", _s), ("shared_shards_with", pa.list_(_s)),
                                           ("seconds", _f), ("config_hash", _s),
                                           ("ckptgeo_version", _s)] + REVISION_GROUP + REVISION_SECONDS),
    # one row per (model, suite, config_hash, metric, layer): ckptgeo.analysis.pipeline (analyze); every event
    # with its spacing on both sides, the gap with its interval from the grid and in checkpoints, accuracy at
    # acquisition with its binomial interval, the gap against accuracy's own onset, the detector's rate on noise
    # at this schedule (summary layer only: jitter_fpr on measurement jitter, iid_fpr on iid noise at the curve's
    # own variance, walk_fpr on random walks of that spread; ckptgeo.stats.noise), the checkpoints left out
    # (n_unconverged: a budget cut the estimate short; n_negative: a negative LLC), the onset against the task
    # loss's own onset (loss_onset_step ..., same rule; the loss itself is a row with metric "loss", layer -1),
    # and every rule's setting.
    "events": pa.schema([
        ("model", _s), ("suite", _s), ("config_hash", _s), ("task", _s), ("difficulty", _s), ("metric", _s),
        ("layer", _i), ("centered", _b), ("seed", _i), ("n_checkpoints", _i), ("first_step", _i), ("last_step", _i),
        ("acquisition_step", _i), ("acquisition_status", _s), ("acquisition_censored_step", _i),
        ("acquisition_spacing_before", _i), ("acquisition_spacing_after", _i), ("acc_at_acquisition", _f),
        ("acc_low", _f), ("acc_high", _f), ("n_items", _i),
        ("collapse_step", _i), ("collapse_floor", _f), ("collapse_drop_fraction", _f),
        ("first_value", _f), ("onset_kind", _s), ("onset_step", _i), ("onset_resolution_steps", _i),
        ("onset_spacing_after", _i), ("collapse_onset_step", _i), ("precursor", _b), ("gap_steps", _i),
        ("gap_checkpoints", _i), ("gap_low_steps", _i), ("gap_high_steps", _i), ("resolution_steps", _i),
        ("status", _s), ("reason", _s), ("acc_onset_step", _i), ("gap_acc_onset_steps", _i),
        ("gap_acc_onset_checkpoints", _i), ("status_acc_onset", _s),
        ("loss_onset_step", _i), ("gap_loss_onset_steps", _i), ("gap_loss_onset_checkpoints", _i),
        ("status_loss_onset", _s),
        ("jitter_fpr", _f), ("jitter_fpr_low", _f), ("jitter_fpr_high", _f), ("iid_fpr", _f), ("iid_fpr_low", _f),
        ("iid_fpr_high", _f), ("walk_fpr", _f), ("walk_fpr_low", _f), ("walk_fpr_high", _f),
        ("jitter_relative_sd", _f), ("own_relative_sd", _f), ("n_unconverged", _i), ("n_negative", _i),
        ("acc_threshold", _f), ("chance", _f), ("window", _i), ("recovery", _f),
        ("collapse_fraction", _f), ("min_drop", _f), ("resolution_checkpoints", _i),
        ("n_noise_curves", _i), ("n_permutations", _i), ("null_seed", _i), ("confidence", _f),
        ("ckptgeo_version", _s)] + EVENT_TOKENS),
    "compare": pa.schema(IDENTITY + [("layer", _i), ("block", _s), ("metric", _s), ("against", _s), ("partner", _s),
                                     ("partner_step", _i), ("value", _f), ("distance", _f), ("partner_norm", _f),
                                     ("n_rows", _i), ("reason", _s), ("settings", _s), ("partners_from", _s),
                                     ("weight_group", _s)] + SETTINGS_COLUMNS),
    # one row per (monitored step, suite): the live acquisition forecast of Monitor(forecast_from=...)
    # (ckptgeo.forecasting.live); NaN steps: beyond the forecast's horizon
    "live_forecast": pa.schema(IDENTITY + [("feature_set", _s), ("median_step", _f), ("low_step", _f),
                                           ("high_step", _f), ("p_next", _f), ("horizon", _i), ("acquired", _b),
                                           ("forecast_from", _s), ("n_runs", _i), ("config_hash", _s),
                                           ("ckptgeo_version", _s)]),
}
#: the tables :func:`ckptgeo.engine.scan.scan` writes, one part per revision.
SCAN_TABLES = ("geometry", "behavior", "probes", "revisions")
#: the compare table's column names, in order.
COMPARE_COLUMNS = tuple(SCHEMAS["compare"].names)
#: the events table's column names, in order.
EVENTS_COLUMNS = tuple(SCHEMAS["events"].names)
