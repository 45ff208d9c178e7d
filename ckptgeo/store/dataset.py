"""The Parquet dataset a scan writes: one atomic part file per revision and table.

::

    DIR/
      ckptgeo.json                 marks a ckptgeo dataset: format, schema_version, writer version
      runs/<config_hash>.json      the full settings behind each config hash
                                   (and ``planned``: the revisions its scans selected, per model)
      sources.json                 which folder or monitored run each ``model`` name stands for
      models.json                  a monitored model's parameter count (``model`` -> {"n_parameters": N})
      difficulty.json              the difficulty class per suite an analysis uses by default (``suite`` ->
                                   class), written by ``ckptgeo demo`` (hard/easy by the studies' rule)
      geometry/<model>--<revision>--<config_hash>.parquet
      behavior/ ... probes/ ...    same naming
      revisions/<model>--<revision>--<config_hash>.parquet   written last: the revision is done
      artifacts/<metric>/<model>--<revision>--<config_hash>.safetensors   a cross-checkpoint measure's
                                   per-revision artifact (CKA, weight distance), written before the
                                   revisions part; metadata ``ckptgeo`` = the revision's identity (JSON)
      compare/compare.parquet      rows built from the artifacts after the scan (whole, rewritten)
      events/                      written by ``ckptgeo analyze``
      states/<model>--<revision>--<config_hash>/<suite>.safetensors   with --save-states
      .locks/<model>--<revision>--<config_hash>.claim   exists while a worker measures it (its host, pid,
                                                        start, Slurm job; mtime = heartbeat): ckptgeo status

A part is written to ``.<name>.tmp-<pid>-<random>`` in its table folder and ``os.replace``-d into
place (:func:`ckptgeo._io.atomic_path`); readers (pyarrow, pandas) skip names starting with ``.`` or ``_``, so a killed writer leaves
nothing a reader picks up. A revision counts as done when its ``revisions`` part exists with status
``ok`` or ``duplicate`` and records the commit the revision has now; a rerun skips it, so no row is
written twice. Parts are named by the ``model`` their rows carry (a Hub repo's full id), so two repos
or folders never share a part; ``sources.json`` keeps the folder (or monitored run) behind each name. Every table loads with
``pandas.read_parquet(DIR + "/geometry")``.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ckptgeo._version import __version__
from ckptgeo._io import Claim, atomic_path, atomic_write_bytes, distinct_name, read_claim, safe_name
from ckptgeo.constants import DATASET_SCHEMA_VERSION
from ckptgeo.errors import DatasetLayoutError, DiskSpaceError, OutputLockedError
from ckptgeo.store.schemas import SCHEMAS

__all__ = ["Dataset", "part_name", "read_table", "read_difficulty", "shared_shards", "RUN_EXTRAS", "run_settings"]


def part_name(model: str, revision: str, config_hash: str) -> str:
    """Deterministic part name: ``<model>--<revision>--<config_hash>.parquet``, the model name made safe by
    :func:`ckptgeo._io.safe_name` and the revision name by :func:`ckptgeo._io.distinct_name` (one path
    component, at most 80 bytes each; two revision names never share a part: ``a/b`` and ``a_b`` differ).

    Raises
    ------
    InvalidParameterError
        An empty model or revision name.

    Examples
    --------
    >>> part_name("EleutherAI/pythia-160m", "step1000", "ab12")
    'EleutherAI_pythia-160m--step1000--ab12.parquet'
    >>> part_name("pythia-160m", "pythia-160m-seed1@step1000", "ab12")
    'pythia-160m--pythia-160m-seed1_step1000-a0ddb155--ab12.parquet'
    """
    return (f"{safe_name(model, what='model name')}--{distinct_name(revision, what='revision name')}--"
            f"{config_hash}.parquet")


def _read_part(path: Path, read):
    """``read(path)`` of one Parquet part; a file that is not Parquet (another tool's ``*.parquet`` in a table
    folder, or a damaged one) is a :class:`DatasetLayoutError` naming it. The file is left as it is."""
    try:
        return read(path)
    except pa.ArrowException as err:  # ArrowInvalid: "Parquet magic bytes not found" & co.
        raise DatasetLayoutError(
            f"{path} is not a Parquet table ckptgeo can read ({type(err).__name__}: {str(err).splitlines()[0]}). "
            f"ckptgeo reads every *.parquet in {path.parent}: move that file out of the folder (ckptgeo leaves it "
            f"as it is) and rerun.", path=str(path)) from None


#: the columns that tie a row to a checkpoint: a part of a table with a schema must have those of them the schema has
_KEY_COLUMNS = ("model", "step")


def _foreign_check(path: Path, df: pd.DataFrame, table: str) -> pd.DataFrame:
    """``df`` itself, or a :class:`DatasetLayoutError` naming ``path`` when it lacks the key columns of
    ``table`` (a valid Parquet file of another tool in the table folder would otherwise join the table)."""
    schema = SCHEMAS.get(table)
    missing = [c for c in _KEY_COLUMNS if schema is not None and c in schema.names and c not in df.columns]
    if missing:
        raise DatasetLayoutError(
            f"{path} is not a part of ckptgeo's {table} table (it has no {', '.join(missing)} "
            f"column{'s' if len(missing) > 1 else ''}). ckptgeo reads "
            f"every *.parquet in {path.parent}: move that file out of the folder (ckptgeo leaves it as it is) and "
            f"rerun.", path=str(path))
    return df


def _parts(d: Path, model: str | None = None) -> list[Path]:
    """The parts of table folder ``d``, sorted, hidden (``.``, ``_``) names skipped; with ``model``, only those
    :func:`part_name` gave to that model's revisions (``<model>--*``)."""
    if not d.is_dir():
        return []
    pattern = f"{safe_name(model, what='model name')}--*.parquet" if model is not None else "*.parquet"
    return sorted(p for p in d.glob(pattern) if not p.name.startswith((".", "_")))


def read_table(root: str | Path, table: str, *, model: str | None = None) -> pd.DataFrame:
    """A table of the dataset at ``root`` as one DataFrame: the one reader of ckptgeo's tables.

    Parts are read one by one (so parts whose schemas differ slightly, e.g. a column that is all-null in
    one, still combine); hidden (``.``, ``_``) names are skipped; rows are sorted by model, step, suite,
    layer and metric where present. ``model``: only the parts a scan of that model wrote (named
    ``<model>--<revision>--<config_hash>.parquet``; a family's parts carry the family's name, their rows
    each member's), so a scan's own revisions are read without reading a large dataset's every part.

    Returns
    -------
    DataFrame
        Never None: when the table has no part (or only empty ones) an empty DataFrame with the table's
        columns (:data:`ckptgeo.store.schemas.SCHEMAS`; no columns for a table without a schema). Test
        ``df.empty``.

    Raises
    ------
    DatasetLayoutError
        ``root`` does not exist or is not a folder; a ``*.parquet`` in the table folder is not a Parquet file,
        or lacks the table's model or step column (another tool's table; the message names it; it is left as
        it is).
    InvalidParameterError
        ``table`` is neither one of ckptgeo's tables (:data:`ckptgeo.store.schemas.SCHEMAS`) nor a folder
        under ``root`` (a typo; the message names the closest table).
    """
    root = Path(root)
    if not root.is_dir():
        raise DatasetLayoutError(f"Dataset folder {root} does not exist{'' if not root.exists() else ' (a file)'}"
                                 f"; run `ckptgeo scan` first, or check the path.", path=str(root))
    present = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    if table not in SCHEMAS and table not in present:
        import difflib

        from ckptgeo.errors import InvalidParameterError

        known = sorted(set(SCHEMAS) | set(present))
        close = difflib.get_close_matches(str(table), known, n=1, cutoff=0.6)
        raise InvalidParameterError(f"no table {table!r} in {root}" + (f"; did you mean {close[0]!r}?" if close else "")
                                    + f" (tables: {', '.join(known)})", name="table", value=table)
    return _read(root, table, model)


def _read(root: Path, table: str, model: str | None) -> pd.DataFrame:
    """The parts of ``table`` under ``root`` as one frame (no check of the names: :class:`Dataset` reads its
    own tables, which may not exist yet)."""
    parts = _parts(Path(root) / table, model)
    frames = [df for df in (_foreign_check(p, _read_part(p, pd.read_parquet), table) for p in parts) if len(df)]
    if not frames:
        schema = SCHEMAS.get(table)
        return schema.empty_table().to_pandas() if schema is not None else pd.DataFrame()
    df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    order = [c for c in ("model", "step", "suite", "layer", "metric") if c in df.columns]
    return df.sort_values(order, kind="stable", ignore_index=True) if order else df


def read_difficulty(root: str | Path) -> dict[str, str]:
    """``difficulty.json`` of the dataset at ``root``: suite -> difficulty class, as
    :meth:`Dataset.record_difficulty` wrote it; empty when absent or unreadable. Read as untrusted: only
    string -> short string entries count.

    Examples
    --------
    >>> import tempfile; d = Path(tempfile.mkdtemp())
    >>> _ = (d / "difficulty.json").write_text('{"copy-L1": "easy", "x": 3, "addition-L1": "hard"}')
    >>> read_difficulty(d)
    {'copy-L1': 'easy', 'addition-L1': 'hard'}
    """
    try:
        data = json.loads((Path(root) / "difficulty.json").read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str) and 0 < len(v) <= 40}


#: Keys of ``runs/<config_hash>.json`` that say where from and how a run ran, not what the hash stands for: the
#: source, ckptgeo's version, ``runtime`` (threads, batch sizes) and the ``planned`` revisions
RUN_EXTRAS = ("source", "ckptgeo_version", "runtime", "planned")


def run_settings(record: dict) -> dict:
    """The settings of a ``runs/<config_hash>.json`` record: the record without :data:`RUN_EXTRAS`.

    Examples
    --------
    >>> run_settings({"seed": 0, "source": "org/m", "runtime": {"threads": 2}})
    {'seed': 0}
    """
    return {k: v for k, v in record.items() if k not in RUN_EXTRAS}


class Dataset:
    """An output folder of ckptgeo tables (layout in the module docstring).

    Raises
    ------
    DatasetLayoutError
        ``root`` is a non-empty folder that is not a ckptgeo dataset, or was written with another
        schema version (both versions named).
    """

    def __init__(self, root: str | Path, *, create: bool = True):
        self.root = Path(root)
        marker = self.root / "ckptgeo.json"
        if not marker.exists():
            if self.root.exists() and not self.root.is_dir():
                raise DatasetLayoutError(f"{self.root} is a file, not a folder; choose another --out folder.",
                                         path=str(self.root))
            # (dot files alone, e.g. the marker's temp file of a writer killed before its rename, are not foreign)
            foreign = self.root.exists() and any(not p.name.startswith(".") for p in self.root.iterdir())
            if foreign and not marker.exists():   # looked at again: another process may just have created it
                raise DatasetLayoutError(
                    f"{self.root} is not empty and is not a ckptgeo dataset (no ckptgeo.json); refusing to write "
                    f"into it. Choose another --out folder.", path=str(self.root))
            if not foreign and create:
                self.root.mkdir(parents=True, exist_ok=True)
                atomic_write_bytes(marker, json.dumps(
                    {"format": "ckptgeo-dataset", "schema_version": DATASET_SCHEMA_VERSION, "writer": __version__},
                    indent=2).encode())
        if marker.exists():
            try:
                meta = json.loads(marker.read_text())
            except ValueError as err:
                raise DatasetLayoutError(f"{marker} is unreadable: {err}", path=str(self.root)) from err
            if meta.get("schema_version") != DATASET_SCHEMA_VERSION:
                raise DatasetLayoutError(
                    f"{self.root} was written by ckptgeo {meta.get('writer', '?')} with table schema "
                    f"{meta.get('schema_version')}; this ckptgeo ({__version__}) writes schema "
                    f"{DATASET_SCHEMA_VERSION}. Write to a new --out folder.", path=str(self.root))

    def write_part(self, table: str, name: str, rows: list[dict]) -> Path:
        """Write ``rows`` as the part ``table/name`` atomically, with the table's explicit schema.

        Raises
        ------
        DiskSpaceError
            The disk filled while writing (nothing is left behind; the earlier parts are intact).
        """
        schema = SCHEMAS[table]
        data = {f.name: [r.get(f.name) for r in rows] for f in schema}
        return self._write_table(table, name, pa.Table.from_pydict(data, schema=schema))

    def _write_table(self, table: str, name: str, tbl: pa.Table) -> Path:
        path = self.root / table / name
        try:
            with atomic_path(path) as tmp:
                pq.write_table(tbl, tmp)
        except OSError as err:
            if err.errno == errno.ENOSPC:
                free = shutil.disk_usage(path.parent).free
                raise DiskSpaceError(f"disk full while writing {path} ({free / 1e6:.1f} MB free); free space and "
                                     f"rerun: finished revisions are kept", needed=None, available=free) from err
            raise
        return path

    def write_whole(self, table: str, rows: list[dict]) -> Path:
        """Write ``rows`` as the whole table ``table/<table>.parquet`` (atomically replacing it): for tables
        derived from the entire dataset (``compare``)."""
        schema = SCHEMAS[table]
        data = {f.name: [r.get(f.name) for r in rows] for f in schema}
        return self._write_table(table, f"{table}.parquet", pa.Table.from_pydict(data, schema=schema))

    def write_artifact(self, metric: str, name: str, arrays: dict, meta: dict) -> Path:
        """Store a cross-checkpoint measure's artifact of one revision, atomically, as
        ``artifacts/<metric>/<name>.safetensors`` (``name``: the part name without ``.parquet``) with ``meta``
        (JSON) as its metadata.

        Parameters
        ----------
        arrays : dict of str to ndarray
            The artifact (contiguous numpy arrays).
        meta : dict
            The revision's identity and settings (JSON-serialisable).
        """
        import numpy as np
        from safetensors.numpy import save_file

        path = self.root / "artifacts" / safe_name(metric, what="metric name") / f"{name}.safetensors"
        with atomic_path(path) as tmp:
            save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()}, str(tmp),
                      metadata={"ckptgeo": json.dumps(meta, sort_keys=True, default=str)})
        return path

    def artifacts(self, metric: str) -> list[tuple[dict, Path]]:
        """(metadata, path) of every stored artifact of ``metric``, the metadata read without the arrays.

        Raises
        ------
        DatasetLayoutError
            A file there is not a safetensors file with ckptgeo's metadata (named).
        """
        from safetensors import safe_open

        d = self.root / "artifacts" / safe_name(metric, what="metric name")
        out = []
        for path in sorted(d.glob("*.safetensors")) if d.is_dir() else []:
            if path.name.startswith((".", "_")):
                continue
            try:
                with safe_open(str(path), framework="numpy") as f:
                    meta = json.loads((f.metadata() or {})["ckptgeo"])
            except Exception as err:  # safetensors raises its own error type on a damaged file
                raise DatasetLayoutError(f"{path} is not an artifact ckptgeo wrote ({type(err).__name__}: {err}); "
                                         f"move it out of {d}", path=str(path)) from err
            out.append((meta, path))
        return out

    @staticmethod
    def read_artifact(path: Path) -> dict:
        """The arrays of one artifact (safetensors: no code runs), as numpy arrays by name."""
        from safetensors.numpy import load_file

        return load_file(str(path))

    def part_of(self, model: str, revision: str, config_hash: str) -> str:
        """The part name of ``revision``: :func:`part_name`, or, in a dataset written before part names were
        one-to-one (revision names made safe only, so ``a/b`` and ``a_b`` met), the older name where that
        part exists, the new one does not, and the part's rows are of this very revision (so resume finds it)."""
        name = part_name(model, revision, config_hash)
        old = f"{safe_name(model, what='model name')}--{safe_name(revision, what='revision name')}--{config_hash}"
        old += ".parquet"
        path = self.root / "revisions" / old
        if old == name or (self.root / "revisions" / name).exists() or not path.exists():
            return name
        held = _read_part(path, lambda p: pq.read_table(p, columns=["revision"])).column("revision").to_pylist()
        return old if held and set(held) == {revision} else name

    def has_part(self, table: str, name: str) -> bool:
        return (self.root / table / name).exists()

    def is_done(self, name: str, commit: str | None = None, revision: str | None = None) -> bool:
        """Whether the ``revisions`` part ``name`` exists with status ok or duplicate (one small read) and,
        when ``commit`` is given, was measured at that commit (a branch moved since is not done); when
        ``revision`` is given, holds that revision's rows (not another's that an older dataset named alike)."""
        path = self.root / "revisions" / name
        if not path.exists():
            return False
        tbl = _read_part(path, lambda p: pq.read_table(p, columns=["status", "commit", "revision"]))
        status = tbl.column("status").to_pylist()
        if commit is not None and any(c not in (None, commit) for c in tbl.column("commit").to_pylist()):
            return False
        if revision is not None and any(r != revision for r in tbl.column("revision").to_pylist()):
            return False
        return bool(status) and all(s in ("ok", "duplicate") for s in status)

    def recorded_damage(self, name: str, commit: str | None) -> str | None:
        """The error recorded with the revision of ``revisions`` part ``name`` when it was recorded ``damaged`` (the
        source serves its weights damaged, :class:`~ckptgeo.errors.DamagedSourceError`) at ``commit``; None when it
        was not, or at another commit (the branch moved: its new weights are tried)."""
        path = self.root / "revisions" / name
        if not path.exists():
            return None
        tbl = _read_part(path, lambda p: pq.read_table(p, columns=["status", "commit", "error"])).to_pylist()
        row = next((r for r in tbl if r["status"] == "damaged" and r["commit"] in (None, commit)), None)
        return None if row is None else str(row["error"] or "damaged").removeprefix("DamagedSourceError: ")

    def recorded_commit(self, name: str) -> str | None:
        """The ``commit`` recorded in the ``revisions`` part ``name``; None if absent or not recorded."""
        path = self.root / "revisions" / name
        if not path.exists():
            return None
        commits = [c for c in _read_part(path, lambda p: pq.read_table(p, columns=["commit"])).column("commit").to_pylist() if c]
        return commits[0] if commits else None

    def sources(self) -> dict[str, str]:
        """``sources.json``: model name -> what it stands for (``folder:/abs/path``, ``monitor:<run id>``);
        empty for a dataset written before it existed.

        A folder beside the dataset (under the folder that holds it, as a study's ``runs/`` beside its
        ``dataset/``) is stored relative to the dataset (``folder:../runs/x``) and returned absolute, so a copied
        or moved study keeps its model names and resumes."""
        try:
            data = json.loads((self.root / "sources.json").read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {str(k): self._absolute(str(v)) for k, v in data.items()}

    def _absolute(self, identity: str) -> str:
        kind, _, where = identity.partition(":")
        if kind != "folder" or not where or os.path.isabs(where):
            return identity
        return f"folder:{os.path.normpath(self.root.resolve() / where)}"

    def _relative(self, identity: str) -> str:
        kind, _, where = identity.partition(":")
        home = self.root.resolve().parent
        if kind != "folder" or not os.path.isabs(where) or not Path(where).is_relative_to(home):
            return identity
        return f"folder:{os.path.relpath(where, self.root.resolve())}"

    def record_source(self, model: str, identity: str) -> None:
        """Record that ``model`` stands for ``identity`` (under the dataset-wide lock; kept if already there)."""
        with self.lock_all():
            known = self.sources()
            if known.get(model) != identity:
                stored = {k: self._relative(v) for k, v in {**known, model: identity}.items()}
                atomic_write_bytes(self.root / "sources.json",
                                   json.dumps(stored, indent=2, sort_keys=True).encode())

    def record_model(self, model: str, n_parameters: int) -> None:
        """Record ``model``'s parameter count in ``models.json`` (under the dataset-wide lock; kept if already
        there). The monitor records the live model's, which its name may not give (``runs.tex``'s ``size``)."""
        with self.lock_all():
            known = self._models_json()
            if known.get(model) != {"n_parameters": int(n_parameters)}:
                known[model] = {"n_parameters": int(n_parameters)}
                atomic_write_bytes(self.root / "models.json", json.dumps(known, indent=2, sort_keys=True).encode())

    def _models_json(self) -> dict:
        try:
            data = json.loads((self.root / "models.json").read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def model_parameters(self) -> dict[str, int]:
        """``models.json``: model name -> parameter count, for the models a monitor recorded; empty when absent.
        An entry that is not a positive integer count is left out (the file is read as untrusted)."""
        out = {}
        for model, info in self._models_json().items():
            n = info.get("n_parameters") if isinstance(info, dict) else None
            if isinstance(n, int) and not isinstance(n, bool) and n > 0:
                out[str(model)] = n
        return out

    def record_difficulty(self, classes: dict[str, str]) -> None:
        """Record the difficulty class of each suite (``{"copy-L1": "easy", "addition-L1": "hard"}``) in
        ``difficulty.json``, merged into what is there; ``ckptgeo analyze`` of this dataset uses it unless given
        ``--difficulty`` (:func:`read_difficulty`)."""
        with self.lock_all():
            known = {**read_difficulty(self.root), **{str(k): str(v) for k, v in classes.items()}}
            atomic_write_bytes(self.root / "difficulty.json", json.dumps(known, indent=2, sort_keys=True).encode())

    def write_run(self, config_hash: str, settings: dict, *, planned: tuple[str, list[str]] | None = None) -> None:
        """Record the settings behind ``config_hash`` (once) and, with ``planned`` = (model, revision names in
        order), add those names to the run's ``planned`` entry (``{model: [names]}``: a rerun on more revisions
        appends the new ones), so ``ckptgeo status`` lists the revisions a run has not saved yet. Under the
        dataset-wide lock (workers of one dataset start runs at once)."""
        path = self.root / "runs" / f"{config_hash}.json"
        with self.lock_all():
            old = json.loads(path.read_text()) if path.exists() else None
            record = dict(old if old is not None else settings)
            if planned is not None:
                model, names = planned
                have = list((record.get("planned") or {}).get(model) or [])
                record["planned"] = {**(record.get("planned") or {}),
                                     model: have + [n for n in dict.fromkeys(names) if n not in have]}
            if record != old:
                atomic_write_bytes(path, json.dumps(record, indent=2, sort_keys=True, default=str).encode())

    def runtime(self, config_hash: str) -> dict:
        """The ``runtime`` of ``runs/<config_hash>.json`` (threads, batch sizes); ``{}`` when not recorded."""
        path = self.root / "runs" / f"{config_hash}.json"
        return (json.loads(path.read_text()).get("runtime") or {}) if path.exists() else {}

    def record_runtime(self, config_hash: str, **entries) -> None:
        """Add ``entries`` to the ``runtime`` of ``runs/<config_hash>.json`` (how the run ran, values unchanged:
        the forward batch sizes chosen at its first revision), replacing entries of the same name; nothing
        when the run was never recorded."""
        path = self.root / "runs" / f"{config_hash}.json"
        with self.lock_all():   # not to lose another worker's planned revisions (write_run)
            if path.exists():
                record = json.loads(path.read_text())
                record["runtime"] = {**(record.get("runtime") or {}), **entries}
                atomic_write_bytes(path, json.dumps(record, indent=2, sort_keys=True, default=str).encode())

    def done_revisions(self, model: str, config_hash: str) -> set[str]:
        """Revision names whose ``revisions`` part for this model and hash says ok or duplicate."""
        df = self.read("revisions", model=model)
        if df.empty:
            return set()
        sel = df[(df.model == model) & (df.config_hash == config_hash) & df.status.isin(["ok", "duplicate"])]
        return set(sel.revision)

    def read(self, table: str, *, model: str | None = None) -> pd.DataFrame:
        """:func:`read_table` of this dataset."""
        return _read(self.root, table, model)

    def lock(self, name: str, **claim_options) -> Claim:
        """Claim ``.locks/<name>.claim`` for this process; returns the :class:`~ckptgeo._io.Claim` (close it to
        release).

        The claim is an atomically created file with a heartbeat, so it holds on NFS and Lustre, and a dead
        holder's claim (its pid gone on this host, or no heartbeat for ``stale_after`` seconds) is taken over.
        ``claim_options`` go to :class:`~ckptgeo._io.Claim` (``stale_after``, ``heartbeat``, ``clock``).

        Raises
        ------
        OutputLockedError
            Another live process holds it.
        """
        path = self.root / ".locks" / f"{name}.claim"
        try:
            return Claim(path, **claim_options)
        except BlockingIOError as err:
            who = getattr(err, "holder", {}) or {}
            raise OutputLockedError(f"{name} is being measured by another process writing to {self.root} "
                                    f"({who.get('host', '?')} pid {who.get('pid', '?')})", path=str(path)) from err

    def claims(self) -> dict[str, dict]:
        """The claims held now, by part name (without ``.parquet``): each holder as
        :func:`ckptgeo._io.read_claim` gives it."""
        d = self.root / ".locks"
        if not d.is_dir():
            return {}
        got = {p.name[: -len(".claim")]: read_claim(p) for p in sorted(d.glob("*.claim"))
               if not p.name.startswith(".")}
        return {k: v for k, v in got.items() if v is not None and k != "resolve"}

    def lock_all(self) -> Claim:
        """Wait for, and take, the dataset-wide claim ``.locks/resolve.claim`` (one process at a time rewrites
        parts of every revision, e.g. :meth:`resolve_duplicates`); close it, or use it in ``with``."""
        return Claim(self.root / ".locks" / "resolve.claim", blocking=True)

    def resolve_duplicates(self, model: str | None = None) -> pd.DataFrame:
        """Set ``duplicate_of`` and ``shared_shards_with`` in every ``revisions`` part (with ``model``: in the
        parts a scan of that model wrote, as :func:`read_table` selects them; a scan resolves its own
        trajectory, so a study of 81 runs in one dataset does not reread every run's parts after each scan).

        ``duplicate_of``: the earliest (stage, step) revision of the same model with identical weights (same
        ``weights_sha256``). ``shared_shards_with``: the earlier revisions of the same model one of whose
        weight files (not ``*.json`` indexes) is byte-identical to one of this revision's, where the whole
        set is not (pythia#206, OLMo#915); see :func:`shared_shards`. Rewrites only parts whose values change;
        returns the duplicate pairs as a DataFrame (model, revision, duplicate_of)."""
        parts = {p: _read_part(p, pq.read_table) for p in _parts(self.root / "revisions", model)}
        if not parts:
            return pd.DataFrame(columns=["model", "revision", "duplicate_of"])
        everything = pd.concat([t.to_pandas() for t in parts.values()], ignore_index=True)
        allrev = everything[everything.weights_sha256.notna()].drop_duplicates(["model", "revision"])
        first = _in_training_order(allrev).groupby(["model", "weights_sha256"]).revision.first()
        shared: dict[tuple, list[str]] = {}
        for m, r, other, _ in shared_shards(everything):
            shared.setdefault((m, r), []).append(other)
        found = []
        for path, tbl in parts.items():
            cols = tbl.to_pydict()
            new = [None if sha is None or first.get((m, sha)) in (None, r) else first.get((m, sha))
                   for m, r, sha in zip(cols["model"], cols["revision"], cols["weights_sha256"])]
            new_shared = [sorted(set(shared[(m, r)])) if (m, r) in shared else None
                          for m, r in zip(cols["model"], cols["revision"])]
            if new != cols["duplicate_of"] or new_shared != cols.get("shared_shards_with", [None] * len(new)):
                for name, values, typ in (("duplicate_of", new, pa.string()),
                                          ("shared_shards_with", new_shared, pa.list_(pa.string()))):
                    i = tbl.schema.get_field_index(name)
                    arr = pa.array(values, typ)
                    tbl = tbl.set_column(i, name, arr) if i >= 0 else tbl.append_column(name, arr)
                self._write_table("revisions", path.name, tbl)
            found += [(m, r, o) for m, r, o in zip(cols["model"], cols["revision"], new) if o is not None]
        return pd.DataFrame(found, columns=["model", "revision", "duplicate_of"]).drop_duplicates()


def _in_training_order(df: pd.DataFrame) -> pd.DataFrame:
    """Rows sorted by (stage, step, revision), revisions without a stage first."""
    if "stage" not in df.columns:
        df = df.assign(stage=None)
    df = df.assign(_s=df["stage"].fillna(""))
    return df.sort_values(["_s", "step", "revision"], kind="stable").drop(columns="_s")


def shared_shards(revisions: pd.DataFrame) -> list[tuple[str, str, str, list[str]]]:
    """Weight files shared between revisions whose whole weight sets differ.

    For each revision (rows of a ``revisions`` table), the earlier revisions in (stage, step) order of the
    same model holding a byte-identical weight file (same sha256; ``*.json`` indexes, which are equal for
    every checkpoint of one layout, are not compared). Whole duplicates (same ``weights_sha256``) are
    ``duplicate_of``'s business and are left out.

    Returns
    -------
    list of (model, revision, earlier revision, [its files that this revision also has])
    """
    if revisions.empty or "sha256" not in revisions.columns:
        return []
    rows = _in_training_order(revisions.drop_duplicates(["model", "revision"], keep="last"))
    owner: dict[tuple[str, str], tuple[str, str, str | None]] = {}
    out = []
    for m, r, files, shas, whole in zip(rows["model"], rows["revision"], rows["files"], rows["sha256"],
                                        rows["weights_sha256"]):
        pairs = [(f, s) for f, s in zip(list(files if files is not None else []),
                                        list(shas if shas is not None else []))
                 if s is not None and not str(f).endswith(".json")]
        hits: dict[str, list[str]] = {}
        for f, sha in pairs:
            if (m, sha) in owner:
                other, other_file, other_whole = owner[(m, sha)]
                if other != r and (whole is None or other_whole != whole):
                    hits.setdefault(other, []).append(f)
            else:
                owner[(m, sha)] = (r, f, whole)
        out += [(m, r, other, sorted(fs)) for other, fs in hits.items()]
    return out
