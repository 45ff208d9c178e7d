"""Which revisions of a source hold genuine, distinct weights: checked from metadata alone.

Public checkpoint suites are not always what their branch names say (EleutherAI/pythia#205: on
``pythia-2.8b`` the branches ``step0`` ... ``step53000`` serve the weights of ``main``, ``step54000`` ...
serve ``step143000``'s; #206: some ``pythia-12b`` branches reuse the final model's first shard; #107:
branches without a weight file). The Hub lists the sha256 of every LFS file per revision
(``list_repo_tree``), so all of this can be seen before a byte of weights is downloaded.

A **group** is a set of revisions (at different training points, or one revision and ``main`` where that
revision is not the last) joined by identical weights: the same sha256 for every weight file (``kind="identical"``),
or one weight file byte-identical while the whole set differs (``kind="shared shards"``, #206). The
members of a group cannot be told apart by their hashes, so none of them is trusted to be the step its
name says: the analysis leaves the whole group out unless the user keeps one member on purpose
(:func:`ckptgeo.analysis.inputs.leave_out_grouped`).

:func:`check_source` asks the source for the metadata (one listing of branches, one listing of files
per distinct commit; no weight file is downloaded) and returns an :class:`IntegrityReport`;
:func:`check_weights` is the same check on metadata already in hand (what a scan's plan holds).
"""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ckptgeo.errors import CorruptCheckpointError, RevisionNotFoundError
from ckptgeo.sources.protocol import WeightFile
from ckptgeo.sources.revisions import Revision

__all__ = ["WeightGroup", "IntegrityReport", "check_weights", "check_source", "main_weight_files", "weights_digest",
           "file_sha256", "damaged_revisions", "SIZE_SHARE"]

#: a name given to the ``main`` branch in groups
MAIN = "main"
#: a weight file smaller than this share of the median size of the same file in the other revisions (and ``main``)
#: has its header read (:func:`damaged_revisions`); the revisions of one run hold files of one size to a few bytes
SIZE_SHARE = 0.9


@dataclass(frozen=True)
class WeightGroup:
    """Revisions that serve the same weights (or share a weight file).

    Attributes
    ----------
    kind : {"identical", "shared shards"}
    revisions : tuple of str
        Member names in training order.
    steps : tuple of int
        Their steps, in the same order.
    matches : str or None
        ``"main"`` when ``main`` serves these weights, else the last revision's name when it is a member,
        else None.
    files : tuple of str
        For ``"shared shards"``: the weight files some members share.
    """

    kind: str
    revisions: tuple[str, ...]
    steps: tuple[int, ...]
    matches: str | None = None
    files: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The group's id: its earliest member."""
        return self.revisions[0]

    def describe(self) -> str:
        """One line: ``"54 revisions step0 … step53000 serve the weights of main"``."""
        n = len(self.revisions)
        who = (f"{n} revisions {self.revisions[0]} … {self.revisions[-1]}" if n > 2
               else " and ".join(self.revisions) if n == 2 else f"revision {self.revisions[0]}")
        if self.kind == "shared shards":
            return f"{who} share weight file(s) {', '.join(self.files)} while their other weights differ"
        verb = "serves" if n == 1 else "serve"
        if self.matches == MAIN:
            return f"{who} {verb} the weights of main"
        if self.matches is not None:
            return f"{who} {verb} the weights of the last step ({self.matches})"
        return f"{who} serve identical weights"


@dataclass
class IntegrityReport:
    """What the metadata of a source's revisions says about them.

    Attributes
    ----------
    source : str
    revisions : list of Revision
        Every revision checked, in training order.
    groups : list of WeightGroup
        In training order of their first member.
    weightless : list of str
        Revisions without a weight file (pythia#107).
    failed : dict of str to str
        Revisions whose metadata could not be read (the error).
    unchecked : list of str
        Revisions whose files have no sha256 in the metadata (not LFS, or a local folder): not checked.
    """

    source: str
    revisions: list[Revision]
    groups: list[WeightGroup] = field(default_factory=list)
    weightless: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unchecked: list[str] = field(default_factory=list)
    #: revisions whose weight file the source serves damaged (:func:`damaged_revisions`): revision -> why
    damaged: dict[str, str] = field(default_factory=dict)
    #: how the sha256 were had: from the source's metadata, or by hashing a local folder's files
    how: str = "from metadata (no weights downloaded)"

    @property
    def group_of(self) -> dict[str, WeightGroup]:
        """Revision name -> its group."""
        return {r: g for g in self.groups for r in g.revisions}

    @property
    def genuine(self) -> list[Revision]:
        """The revisions in no group, with weights and readable metadata (the ``genuine`` selector)."""
        bad = set(self.group_of) | set(self.weightless) | set(self.failed) | set(self.damaged)
        return [r for r in self.revisions if r.name not in bad]

    def text(self) -> str:
        """The report ``ckptgeo revisions SOURCE --integrity`` prints."""
        n, genuine = len(self.revisions), self.genuine
        lines = [f"{self.source}: {n} revisions checked {self.how}"]
        if self.groups:
            lines.append(f"{len(self.groups)} group(s) of revisions whose weights cannot be told apart "
                         f"({sum(len(g.revisions) for g in self.groups)} revisions; left out of the analysis "
                         f"unless kept with `ckptgeo analyze --keep-grouped`):")
            lines += [f"  {g.describe()}" + (f": {', '.join(g.revisions)}" if len(g.revisions) > 2 else "")
                      for g in self.groups]
        elif len(self.unchecked) >= n:
            lines.append("no revision could be checked: none has a sha256 in the metadata (a local folder, or files "
                         "not stored by LFS); `ckptgeo scan` hashes the weights as it loads them and marks duplicates")
        else:
            checked = n - len(self.unchecked)
            lines.append(f"no two of the {checked} checked revisions serve the same weights or share a weight file")
        if self.weightless:
            lines.append(f"{len(self.weightless)} without weight files: {', '.join(self.weightless)}")
        for name, err in self.failed.items():
            lines.append(f"metadata unreadable for {name}: {err}")
        for name, why in self.damaged.items():
            lines.append(f"damaged on the source (permanent; left out of genuine): {name}: {why}")
        if self.unchecked:
            lines.append(f"{len(self.unchecked)} not checked (no sha256 in the metadata): "
                         f"{_names(self.unchecked)}")
        lines.append(f"genuine trajectory: {len(genuine)} of {n} revisions"
                     + (f", steps {genuine[0].step} … {genuine[-1].step}" if genuine else "")
                     + (f" (the {len(self.unchecked)} not checked count as genuine)" if self.unchecked else ""))
        lines.append(f"selector: --revisions genuine  (= {_names([r.name for r in genuine]) or 'none'})")
        return "\n".join(lines)


def _names(names: list[str], limit: int = 8) -> str:
    return ", ".join(names) if len(names) <= limit else ", ".join(names[:limit]) + f", … ({len(names)} in all)"


def weights_digest(files: list[WeightFile]) -> str | None:
    """One sha256 over the names and sha256 of a revision's weight files; None if any is unknown."""
    if not files or any(f.sha256 is None for f in files):
        return None
    return hashlib.sha256("".join(f"{f.name}:{f.sha256};" for f in sorted(files, key=lambda f: f.name))
                          .encode()).hexdigest()


def _digest(files: list[WeightFile]) -> str | None:
    """:func:`weights_digest` of the weight files proper: a shard index (``*.json``, a plain git file without
    an LFS sha256 in the metadata) is the same for every checkpoint of one layout and is left out."""
    return weights_digest([f for f in files if not f.name.endswith(".json")])


class _Union:
    def __init__(self):
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def join(self, a: str, b: str) -> None:
        self.parent[self.find(a)] = self.find(b)


def check_weights(revisions: list[Revision], files: dict[str, "list[WeightFile] | Exception"], *,
                  main: list[WeightFile] | None = None, source: str = "source") -> IntegrityReport:
    """Group ``revisions`` by their weight files' sha256.

    Parameters
    ----------
    revisions : list of Revision
    files : dict of str to (list of WeightFile or Exception)
        Each revision's weight files as the source lists them (an exception where listing failed; a
        :class:`~ckptgeo.errors.CorruptCheckpointError` saying "no weight files" marks a weightless branch).
    main : list of WeightFile, optional
        The weight files of ``main`` (a Hub repo's default branch), to say which group it serves.
    source : str
        Name for the report.

    Returns
    -------
    IntegrityReport

    Examples
    --------
    >>> from ckptgeo.sources.protocol import WeightFile as W
    >>> revs = [Revision(s, f"step{s}") for s in (0, 1, 2, 3)]
    >>> fs = {"step0": [W("m", 1, "a")], "step1": [W("m", 1, "b")], "step2": [W("m", 1, "c")],
    ...       "step3": [W("m", 1, "a")]}
    >>> rep = check_weights(revs, fs, main=[W("m", 1, "a")])
    >>> rep.groups[0].describe(), [r.name for r in rep.genuine]
    ('step0 and step3 serve the weights of main', ['step1', 'step2'])
    """
    revs = sorted(revisions)
    report = IntegrityReport(source=source, revisions=revs)
    union = _Union()
    digest: dict[str, str] = {}
    owner: dict[str, str] = {}          # a weight file's sha256 -> the first revision holding it
    shared: dict[str, set[str]] = {}    # revision -> its files that another revision also holds
    main_digest = _digest(main) if main else None
    for r in revs:
        got = files.get(r.name)
        if isinstance(got, Exception):
            if isinstance(got, CorruptCheckpointError) and "no weight files" in str(got):
                report.weightless.append(r.name)
            else:
                report.failed[r.name] = f"{type(got).__name__}: {got}"
            continue
        d = _digest(got or [])
        if d is None:
            report.unchecked.append(r.name)
            continue
        digest[r.name] = d
        union.find(r.name)
        if main_digest is not None and d == main_digest:
            union.join(r.name, MAIN)
        for f in got:
            if f.name.endswith(".json"):
                continue  # an index is the same for every checkpoint of one layout
            first = owner.setdefault(f.sha256, r.name)
            if first != r.name:
                union.join(r.name, first)
                if digest[first] != d:
                    shared.setdefault(r.name, set()).add(f.name)
                    shared.setdefault(first, set()).add(f.name)
    last = revs[-1].name if revs else None
    components: dict[str, list[str]] = {}
    for name in digest:
        components.setdefault(union.find(name), []).append(name)
    has_main = union.find(MAIN) if MAIN in union.parent else None
    steps = {r.name: r.step for r in revs}
    tok = {r.name: r.tokens for r in revs}
    for root, members in components.items():
        with_main = root == has_main
        if len(members) < 2 and not (with_main and members[0] != last):
            continue
        kind = "identical" if len({digest[m] for m in members}) == 1 else "shared shards"
        tokens = {tok[m] for m in members}
        if kind == "identical" and not with_main and len(tokens) == 1 and None not in tokens:
            continue  # one training point under two names (OLMo-2: stage 2 starts from stage 1's end)
        matches = MAIN if with_main else (last if last in members else None)
        files_shared = tuple(sorted({f for m in members for f in shared.get(m, ())}))
        report.groups.append(WeightGroup(kind, tuple(members), tuple(steps[m] for m in members), matches,
                                         files_shared if kind == "shared shards" else ()))
    order = {r.name: i for i, r in enumerate(revs)}
    report.groups.sort(key=lambda g: order[g.revisions[0]])
    return report


def damaged_revisions(revisions: list[Revision], files: dict[str, "list[WeightFile] | Exception"], *,
                      main: list[WeightFile] | None = None, declared=None) -> dict[str, str]:
    """Revisions whose weight file the source serves damaged, found from the listing: a file far smaller than the
    same file of the other revisions (under :data:`SIZE_SHARE` of their median, ``main`` included) whose own
    header, read from the source (``declared(revision, name)``: the bytes its safetensors header declares, inf when
    the header itself cannot be read, None when unknown), asks for more bytes than the file has. A file only
    smaller (a smaller architecture) is not flagged: its header fits its size.

    Returns
    -------
    dict of str to str
        Revision name -> the reason, e.g. ``"model.safetensors is 14.1 MB (the others' median 28.1 MB) and its
        header declares 28.1 MB: truncated as the source serves it"``.

    Examples
    --------
    >>> from ckptgeo.sources.protocol import WeightFile as W
    >>> revs = [Revision(s, f"step{s}") for s in (0, 1, 2)]
    >>> fs = {"step0": [W("m.safetensors", 28_100_000, "a")], "step1": [W("m.safetensors", 14_050_000, "b")],
    ...       "step2": [W("m.safetensors", 28_100_000, "c")]}
    >>> print(damaged_revisions(revs, fs, declared=lambda r, name: 28_099_000)["step1"])
    m.safetensors is 14.1 MB (the other revisions: 28.1 MB) and its header declares 28.1 MB: truncated as the source serves it
    """
    import math
    import statistics

    if declared is None:
        return {}
    sizes: dict[str, list[int]] = {}
    for fs in [*files.values(), main or []]:
        for f in fs if isinstance(fs, list) else []:
            if f.size is not None and not f.name.endswith(".json"):
                sizes.setdefault(f.name, []).append(f.size)
    out: dict[str, str] = {}
    for r in revisions:
        for f in files.get(r.name) if isinstance(files.get(r.name), list) else []:
            same = sizes.get(f.name, [])
            if f.size is None or len(same) < 2 or f.size >= SIZE_SHARE * statistics.median(same):
                continue
            need = declared(r, f.name)
            if need is None or need <= f.size:
                continue
            median = statistics.median(same)
            says = "cannot be read" if math.isinf(need) else f"declares {need / 1e6:,.1f} MB"
            out[r.name] = (f"{f.name} is {f.size / 1e6:,.1f} MB (the other revisions: {median / 1e6:,.1f} MB) and its "
                           f"header {says}: truncated as the source serves it")
            break
    return out


def main_weight_files(source) -> list[WeightFile] | None:
    """The weight files of a Hub source's ``main`` branch (None where there is none, or it has none);
    no request when ``main``'s commit is one of the listed revisions' (the listing is reused)."""
    main = source.main_revision()
    if main is None:
        return None
    try:
        return source.weight_files(main)
    except (CorruptCheckpointError, RevisionNotFoundError):
        return None


def file_sha256(path, chunk: int = 1 << 23) -> str:
    """The sha256 of a file's bytes (hex), read in chunks of ``chunk`` bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def check_source(source, revisions: list[Revision] | None = None, *, label: str | None = None,
                 workers: int = 8) -> IntegrityReport:
    """:func:`check_weights` on the metadata of ``source``'s revisions (all, or ``revisions``).

    Only listings are requested (for a Hub repo: the branches, then the files of each distinct commit,
    ``workers`` at a time); nothing is downloaded. A source that does not download (a local folder) lists no
    sha256, but its files are at hand: they are hashed here (read once, ``workers`` files at a time).

    Raises
    ------
    SourceNotFoundError, HubUnreachableError
        As :meth:`~ckptgeo.sources.protocol.CheckpointSource.revisions`.
    """
    revs = source.revisions() if revisions is None else revisions

    def listing(r: Revision):
        try:
            files = source.weight_files(r)
            if not source.downloads and any(f.sha256 is None for f in files):
                folder = source.fetch(r)   # a local folder: the files themselves, nothing is copied
                files = [f if f.sha256 is not None else WeightFile(f.name, f.size, file_sha256(folder / f.name))
                         for f in files]
            return files
        except (CorruptCheckpointError, RevisionNotFoundError) as err:
            return err

    with ThreadPoolExecutor(max_workers=workers) as pool:
        files = dict(zip([r.name for r in revs], pool.map(listing, revs)))
    main = main_weight_files(source)
    report = check_weights(revs, files, main=main, source=label or source.label)
    report.damaged = damaged_revisions(revs, files, main=main, declared=source.declared_size)
    if not source.downloads:
        report.how = "by hashing the local files (sha256 of every weight file)"
    return report
