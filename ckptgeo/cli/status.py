"""``ckptgeo status DIR``: what is done, failed, in progress and not started in an output folder."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

__all__ = ["add_parser", "collect", "read_record", "run_label", "planned", "STATUSES", "RECORD", "COMMANDS"]

#: the submission record ``ckptgeo submit`` writes, relative to OUT
RECORD = Path("slurm") / "submit.json"
#: the commands ``ckptgeo submit`` runs
COMMANDS = ("scan", "probe", "reproduce")

#: the states of a revision (scan, probe) or run (reproduce), in the order the totals list them
STATUSES = ("done", "failed", "in progress", "not started", "damaged")

_EPILOG = """\
examples:
  ckptgeo status /scratch/p1b             # after ckptgeo submit scan ... --out /scratch/p1b
  ckptgeo status results/pythia-160m      # any scan folder: one row per run and revision (a scan and a
                                          # probe of it are two runs: config hash and measures)
  ckptgeo status results/reproduce        # a reproduce --out: one row per run
  ckptgeo status results/reproduce/dataset   # several models: one row per model

exit code: 0 when everything is done (or damaged on the source: permanent, a rerun cannot fix it), 1 when
something is left (failed, in progress or not started).
next: ckptgeo submit --resubmit DIR sends only what is not done; while something is in progress (a live
process's heartbeat) status says to wait, not to rerun beside it.
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``ckptgeo status`` to an argparse ``subparsers`` object and return its parser."""
    p = subparsers.add_parser(
        "status", help="done / failed / in progress / not started, per revision (or run) of an output folder",
        description="Per revision of each run of a scan or probe folder (a run: one config hash, named by its "
                    "first 8 digits and its measures; per run of a reproduce folder, per model of a dataset of "
                    "several): done, failed (with the error), in progress (which worker, since when), or not "
                    "started (planned by the run, runs/<hash>.json, and not saved); then totals, per run.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", help="the --out folder of a scan, probe or reproduce (submitted or not)")
    p.set_defaults(func=_cmd_status)
    return p


def _worker(info: dict) -> str:
    slurm = info.get("slurm") or {}
    job = (f"job {slurm['SLURM_ARRAY_JOB_ID']}_{slurm.get('SLURM_ARRAY_TASK_ID', '?')}"
           if "SLURM_ARRAY_JOB_ID" in slurm else f"job {slurm['SLURM_JOB_ID']}" if "SLURM_JOB_ID" in slurm else "")
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info["started"])) if "started" in info else "?"
    return f"{info.get('host', '?')} pid {info.get('pid', '?')}{' ' + job if job else ''}, since {since}"


def _claim_status(info: dict, now: float) -> tuple[str, str]:
    from ckptgeo._io import claim_is_stale
    from ckptgeo.constants import CLAIM_STALE_S

    if claim_is_stale(info, now=now, stale_after=CLAIM_STALE_S):
        return "not started", f"stale claim of {_worker(info)} (its worker is gone; the next worker takes it)"
    return "in progress", f"{_worker(info)}, heartbeat {now - info['heartbeat']:.0f} s ago"


def run_label(config_hash: str, record: dict | None) -> str:
    """What a run of a scan folder is called in ``ckptgeo status``: the config hash's first 8 digits and the
    measures its ``runs/<config_hash>.json`` names, e.g. ``49f3ebef (behavior, rankme)``; the hash alone when
    not recorded."""
    metrics = record.get("metrics") if isinstance(record, dict) else None
    return f"{config_hash[:8]} ({', '.join(map(str, metrics))})" if isinstance(metrics, dict) and metrics \
        else config_hash[:8]


def planned(record: dict | None) -> dict[str, list[str]] | None:
    """The revisions a run planned, per model (``planned`` of ``runs/<config_hash>.json``, written when its
    scans start); None for a record without it (written by an older ckptgeo) or with something else there."""
    got = record.get("planned") if isinstance(record, dict) else None
    if not isinstance(got, dict) or not all(isinstance(v, list) for v in got.values()):
        return None
    return {str(m): [str(r) for r in revs] for m, revs in got.items()}


def _scan_rows(out: Path, rec: dict | None) -> list[dict]:
    from ckptgeo.analysis.view import read_runs
    from ckptgeo.store.dataset import Dataset, part_name, read_table

    revisions = read_table(out, "revisions")
    claims = Dataset(out, create=False).claims() if (out / "ckptgeo.json").exists() else {}
    records = read_runs(out)
    now = time.time()
    names: dict[str, list[tuple[str, str]]] = {}   # config hash -> (revision name, part name without .parquet)
    seen: set[str] = set()

    def add(chash: str, name: str, part: str) -> None:
        if part not in seen:
            seen.add(part)
            names.setdefault(chash, []).append((name, part))

    if rec is not None:   # submitted: the record's revisions, under its config hash
        for n in rec["revisions"]:
            add(rec["config_hash"], n, part_name(rec["model"], n, rec["config_hash"])[: -len(".parquet")])
        if not revisions.empty:
            revisions = revisions[revisions.config_hash == rec["config_hash"]]
    else:   # each run's planned revisions (runs/<hash>.json), then what the tables and claims name besides
        for chash, record in records.items():
            for model, revs in (planned(record) or {}).items():
                for n in revs:
                    add(chash, n, part_name(model, n, chash)[: -len(".parquet")])
        if not revisions.empty:
            for m, r, h in revisions[["model", "revision", "config_hash"]].drop_duplicates().itertuples(index=False):
                add(h, r, part_name(m, r, h)[: -len(".parquet")])
        for k in claims:   # a part name: model--revision--hash
            parts = k.split("--")
            if len(parts) == 3:
                add(parts[2], parts[1], k)
            else:
                add("", k, k)
    by_part = {}
    if not revisions.empty:
        for m, r, h, s, e in revisions[["model", "revision", "config_hash", "status", "error"]].itertuples(index=False):
            by_part[part_name(m, r, h)[: -len(".parquet")]] = (s, e)
    rows = []
    for chash, entries in names.items():
        for name, part in entries:
            status, detail = "not started", ""
            claim = _claim_status(claims[part], now) if part in claims else None
            if claim is not None and claim[0] == "in progress":
                status, detail = claim
            elif part in by_part:
                s, e = by_part[part]
                status, detail = (("done", "" if s == "ok" else s) if s in ("ok", "duplicate") else
                                  ("damaged", e or "") if s == "damaged" else ("failed", e or ""))
            elif claim is not None:
                status, detail = claim
            rows.append({"name": name, "status": status, "detail": detail, "run": run_label(chash, records.get(chash)),
                         "model": part.split("--")[0] if part.count("--") == 2 else ""})
    return rows


def by_model(rows: list[dict]) -> list[dict]:
    """One row per model of per-revision ``rows`` (a dataset of several models, e.g. a study's ``dataset/``):
    done when all its revisions (of every run) are; else the first not done, with how many of each status."""
    models: dict[str, list[dict]] = {}
    for r in rows:
        models.setdefault(r.get("model") or "?", []).append(r)
    out = []
    for model, rs in models.items():
        counts = {s: sum(r["status"] == s for r in rs) for s in STATUSES}
        worst = next((s for s in ("in progress", "failed", "not started") if counts[s]), "done")
        first = next((r for r in rs if r["status"] == worst), None)
        detail = ", ".join(f"{n} {s}" for s, n in counts.items() if n) + (
            f"; {first['name']}: {first['detail']}" if worst != "done" and first and first["detail"] else "")
        n_runs = len({r.get("run") for r in rs})
        of = f" of {n_runs} runs" if n_runs > 1 else ""
        out.append({"name": model, "status": worst, "detail": f"{len(rs)} revisions{of}: {detail}"})
    return out


def reproduce_runs(out: Path) -> list[tuple[str, Path]] | None:
    """(run name, folder) of a ``ckptgeo reproduce`` folder not submitted with ``ckptgeo submit``: the runs
    ``study.json`` lists, else the run folders training has made so far; None when ``out`` is not one."""
    if not (out / "runs").is_dir() or not ((out / "dataset").is_dir() or (out / "study.json").is_file()):
        return None
    names = None
    try:
        names = json.loads((out / "study.json").read_text(encoding="utf-8")).get("runs")
    except (OSError, ValueError, AttributeError):
        pass
    if not isinstance(names, list):
        names = sorted(p.parent.name for p in (out / "runs").glob("*/manifest.json"))
    return [(str(n), out / "runs" / str(n)) for n in names]


def _reproduce_rows(out: Path, rec: dict | None) -> list[dict]:
    from collections import namedtuple

    import pandas as pd

    _Run = namedtuple("_Run", "name folder")

    from ckptgeo.store.dataset import Dataset, read_table

    if rec is not None:
        from ckptgeo.cli.reproduce import load_preset
        from ckptgeo.studies.reproduce import plan_study

        runs = [(r.name, r.folder) for r in plan_study(load_preset(rec["preset"]), out)]
    else:
        runs = reproduce_runs(out) or []
    dataset = out / "dataset"
    revisions = read_table(dataset, "revisions") if dataset.is_dir() else pd.DataFrame()
    claims = Dataset(dataset, create=False).claims() if (dataset / "ckptgeo.json").exists() else {}
    now = time.time()
    rows = []
    for name, folder in runs:
        run = _Run(name, folder)
        manifest = run.folder / "manifest.json"
        trained = manifest.is_file() and json.loads(manifest.read_text(encoding="utf-8")).get("complete")
        mine = revisions[revisions.model == run.name] if not revisions.empty else revisions
        live = [_claim_status(info, now) for k, info in claims.items() if k.startswith(f"{run.name}--")]
        live = [c for c in live if c[0] == "in progress"]
        failed = mine[mine.status == "failed"] if not mine.empty else mine
        if live:
            status, detail = "in progress", f"scanning: {live[0][1]}"
        elif len(failed):
            status, detail = "failed", f"{failed.revision.iloc[0]}: {failed.error.iloc[0]}"
        elif trained and not mine.empty:
            status, detail = "done", f"{mine.revision.nunique()} revisions scanned"
        elif manifest.is_file():
            status, detail = "not started", "trained" if trained else "training started, not finished (resumes)"
        else:
            status, detail = "not started", ""
        rows.append({"name": run.name, "status": status, "detail": detail})
    if rows and all(r["status"] == "done" for r in rows) and not (out / "reproduction.md").is_file():
        rows.append({"name": "(analysis)", "status": "not started", "detail": "reproduction.md not written yet"})
    return rows


def read_record(out: Path) -> dict:
    """The submission record of ``out``.

    Raises
    ------
    InvalidParameterError
        ``out`` has no readable ``slurm/submit.json``.
    """
    from ckptgeo.errors import InvalidParameterError

    path = Path(out) / RECORD
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidParameterError(f"{path} does not exist: {out} was not submitted with ckptgeo submit",
                                    name="out", value=str(out)) from None
    except ValueError as err:
        raise InvalidParameterError(f"{path} is unreadable: {err}", name="out", value=str(out)) from None
    if not isinstance(rec, dict) or rec.get("command") not in COMMANDS or not isinstance(rec.get("args"), list):
        raise InvalidParameterError(f"{path} is not a ckptgeo submission record", name="out", value=str(out))
    return rec


def collect(out: str | Path, rec: dict | None = None) -> list[dict]:
    """One row per revision (scan, probe) or run (reproduce) of ``out``: ``name``, ``status`` (one of
    :data:`STATUSES`) and ``detail`` (the error, or the worker holding it and since when).

    ``rec`` is the submission record (``OUT/slurm/submit.json``), read when present: its revisions under its
    config hash. Without one, every run's planned revisions (``planned`` of ``runs/<hash>.json``), then those
    the tables or claims name besides (all a run written by an older ckptgeo tells). A scan folder's rows also
    carry ``run`` (:func:`run_label`) and ``model``."""
    out = Path(out)
    if rec is None and (out / RECORD).is_file():
        rec = read_record(out)
    if rec is not None and rec["command"] == "reproduce":
        return _reproduce_rows(out, rec)
    if rec is None and not (out / "ckptgeo.json").exists() and reproduce_runs(out) is not None:
        return _reproduce_rows(out, None)
    return _scan_rows(out, rec)


def _cmd_status(args: argparse.Namespace) -> int:
    from ckptgeo.errors import InvalidParameterError

    out = Path(args.dir)
    if not out.is_dir():
        raise InvalidParameterError(f"{out} is not a folder", name="dir", value=str(out))
    if not (out / "ckptgeo.json").exists() and (out / "manifest.json").is_file():
        return _training_status(out)
    submitted = (out / RECORD).is_file()
    study = not submitted and not (out / "ckptgeo.json").exists() and reproduce_runs(out) is not None
    if not (out / "ckptgeo.json").exists() and not submitted and not study:
        raise InvalidParameterError(f"{out} is neither a ckptgeo dataset (no ckptgeo.json), a reproduce folder (no "
                                    f"runs/ and dataset/) nor a submitted folder (no {RECORD})", name="dir",
                                    value=str(out))
    rows = collect(out)
    unit = "run" if study or submitted and '"reproduce"' in (out / RECORD).read_text() else "revision"
    live = [r for r in rows if r["status"] == "in progress"]
    if unit == "revision" and len({r.get("model") for r in rows}) > 1:
        per_revision, rows, unit = rows, by_model(rows), "model"
        print(f"{len(per_revision)} revisions of {len(rows)} models; one row per model")
    runs = list(dict.fromkeys(r["run"] for r in rows)) if unit == "revision" else []
    width = max([len(unit)] + [len(r["name"]) for r in rows])
    run_w = max([len("run")] + [len(r) for r in runs])
    print(f"{unit:<{width}}  " + (f"{'run':<{run_w}}  " if runs else "") + f"{'status':<11}  detail")
    for r in rows:
        run = f"{r['run']:<{run_w}}  " if runs else ""
        print(f"{r['name']:<{width}}  {run}{r['status']:<11}  {r['detail']}".rstrip())
    if len(runs) > 1:
        for run in runs:
            mine = [r for r in rows if r["run"] == run]
            print(f"{run}: {len(mine)} revisions: {_totals(mine)}")
        print(f"{len(rows)} revisions of {len(runs)} runs: {_totals(rows)}")
    else:
        print(f"{len(rows)} {unit}s: {_totals(rows)}")
    if study:
        print("(a reproduce folder: one row per run of study.json, or per run folder training has made so far)")
    elif not submitted:
        from ckptgeo.analysis.view import read_runs

        records = read_runs(out)
        monitored = {h for h, rec in records.items()   # a monitored run plans no revisions: it measures as it trains
                     if isinstance(rec, dict) and str(rec.get("source", "")).startswith("monitor:")}
        older = [f"runs/{h}.json" for h, rec in records.items() if planned(rec) is None and h not in monitored]
        if older or not records:
            which = ", ".join(older[:3]) + (" ..." if len(older) > 3 else "") if older else "no runs/<hash>.json"
            print(f"({which}: no planned revisions recorded (written by an older ckptgeo): revisions no worker has "
                  f"started are not listed for {'that run' if len(older) < 2 else 'those runs'})")
    # damaged: the source serves the revision's weights damaged; permanent, so not left for a rerun (exit 0)
    left = [r for r in rows if r["status"] not in ("done", "damaged")]
    damaged = [r["name"] for r in rows if r["status"] == "damaged"]
    if damaged:
        print(f"{len(damaged)} {unit}{'s' if len(damaged) != 1 else ''} damaged on the source ({', '.join(damaged[:5])}"
              f"{' ...' if len(damaged) > 5 else ''}): permanent, a new download gives the same bytes, so nothing is left "
              f"to rerun for them; leave them out (--revisions genuine) or tell the repository's owners")
    if live:
        print(f"next: {len(live)} {unit}{'s' if len(live) != 1 else ''} in progress (a live process sends a "
              f"heartbeat); wait for it and run `ckptgeo status {out}` again; rerun or resubmit only once none "
              f"is in progress")
    elif left:
        print(f"next: ckptgeo submit --resubmit {out}" if submitted else
              "next: rerun the same reproduce command to finish it" if study else
              "next: rerun the same scan command to finish it" if len(runs) < 2 else
              f"next: rerun the same scan (or probe) command of "
              f"{'; '.join(dict.fromkeys(r['run'] for r in left))} to finish it")
    return 1 if left else 0


def _training_status(out: Path) -> int:
    """``ckptgeo status`` of a ``ckptgeo train`` folder: the training (complete, or how far it got) and, where
    ``train --monitor`` made one, the monitor's dataset (``OUT/monitor``), per step. Exit 0 when training is complete
    (and the monitor's steps are done), 1 otherwise."""
    from ckptgeo.training.runfolder import MANIFEST_NAME, training_history

    try:
        manifest = json.loads((out / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        from ckptgeo.errors import InvalidParameterError

        raise InvalidParameterError(f"{out / MANIFEST_NAME} is unreadable: {err}", name="dir", value=str(out)) from None
    complete = bool(manifest.get("complete"))
    try:
        hist = training_history(out)
        last = int(hist["step"].max()) if len(hist) else 0
    except Exception:   # a run that has written no checkpoint yet
        last = 0
    steps = manifest.get("steps", "?")
    print(f"{out}: a ckptgeo train run, " + (f"complete ({steps} steps)" if complete else
                                            f"not complete: last checkpoint at step {last} of {steps} (resumes)"))
    left = not complete
    monitor = out / "monitor"
    if (monitor / "ckptgeo.json").is_file():
        rows = collect(monitor)
        print(f"monitor ({monitor}): {len(rows)} measured steps: {_totals(rows)}")
        left = left or any(r["status"] not in ("done", "damaged") for r in rows)
    print(f"next: rerun the same train command to finish it" if not complete else
          f"next: ckptgeo analyze {monitor}" if monitor.is_dir() else f"next: ckptgeo scan {out}")
    return 1 if left else 0


def _totals(rows: list[dict]) -> str:
    """``"2 done, 0 failed, 1 in progress, 0 not started"``."""
    return ", ".join(f"{sum(r['status'] == s for r in rows)} {s}" for s in STATUSES
                     if s != "damaged" or any(r["status"] == s for r in rows))
