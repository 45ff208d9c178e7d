"""The item schema shared by every suite, and the loaders that read suites into it.

An item is one JSON object per line (docs/definitions.md#items). Three kinds exist:

* multiple choice: ``id``, ``suite``, ``prompt``, ``choices`` (list of str), ``answer`` (index), optional ``label``
* minimal pair:    ``id``, ``suite``, ``good``, ``bad``
* generation:      ``id``, ``suite``, ``prompt``, ``target`` (str), optional ``label``

Extra fields are kept in :attr:`Item.extra` and otherwise ignored. A suite file may start with
one header line ``{"suite_header": {...}}`` (name, description, difficulty, chance, ...).

:func:`load_suite` takes a suite *name* (a file in ``diagnostics/`` or a registered loader), a
*path* (JSON lines in this schema, BLiMP JSON lines, BIG-bench task JSON, BIG-bench Hard JSON) and
returns a :class:`Suite`. Every format is a loader in :data:`LOADERS` (``jsonl``, ``bigbench``, ``blimp``,
and ``hf``: :func:`load_hf`, a dataset read with the ``datasets`` library); ``PREFIX:rest`` picks one.
Other formats register a loader with :func:`register_loader` or the ``ckptgeo.suites`` entry points.

BLiMP rows (``sentence_good``, ``sentence_bad``, ``UID``, ``pairID`` ...) become minimal pairs with id
``{UID}-{pairID}``; their other fields are kept in :attr:`Item.extra`.
"""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptgeo._io import atomic_write_text
from ckptgeo._registry import Registry
from ckptgeo.errors import InvalidParameterError, SuiteFormatError

__all__ = [
    "Item", "Suite", "load_suite", "load_jsonl", "load_bigbench", "item_from_dict", "write_jsonl",
    "register_loader", "LOADERS", "diagnostics_dir", "available_suites", "select_items", "load_blimp", "load_hf",
    "is_blimp_row",
]

KINDS = ("multiple_choice", "minimal_pair", "generation")
_CORE = {"id", "suite", "prompt", "choices", "answer", "label", "good", "bad", "target"}


@dataclass(frozen=True)
class Item:
    """One evaluation item in the item schema (docs/definitions.md#items). ``kind`` is derived from the fields
    present."""

    id: str
    suite: str
    kind: str
    prompt: str | None = None
    choices: tuple[str, ...] | None = None
    answer: int | None = None
    good: str | None = None
    bad: str | None = None
    target: str | None = None
    label: Any = None
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def to_dict(self) -> dict:
        """The item as its JSON object (kind implied by fields, extras merged back)."""
        out: dict = {"id": self.id, "suite": self.suite}
        for name in ("prompt", "choices", "answer", "good", "bad", "target", "label"):
            value = getattr(self, name)
            if value is not None:
                out[name] = list(value) if name == "choices" else value
        out.update(self.extra)
        return out


@dataclass(frozen=True)
class Suite:
    """A named list of items plus the header it came with.

    ``source`` is where it was read from (path, name or Hub id); ``header`` the optional first-line
    metadata (e.g. ``difficulty``, ``chance``).
    """

    name: str
    items: tuple[Item, ...]
    source: str = ""
    header: dict = field(default_factory=dict, compare=False, hash=False)

    def __len__(self) -> int:
        return len(self.items)

    @property
    def kinds(self) -> set[str]:
        return {it.kind for it in self.items}


def _fail(msg: str, path, line, fld=None):
    raise SuiteFormatError(f"{path}:{line}: {msg}" if line else f"{path}: {msg}",
                           path=str(path) if path else None, line=line, field=fld)


def item_from_dict(obj: dict, *, suite: str | None = None, path: str | None = None,
                   line: int | None = None) -> Item:
    """Validate one JSON object against the schema and build an :class:`Item`.

    Raises
    ------
    SuiteFormatError
        A required field is missing or has the wrong type; the message names the line and field.
    """
    if not isinstance(obj, dict):
        _fail(f"expected a JSON object, got {type(obj).__name__}", path, line)
    name = obj.get("suite", suite)
    if not isinstance(name, str) or not name:
        _fail("field 'suite' is missing (and no suite name was given)", path, line, "suite")
    if "id" not in obj:
        _fail("field 'id' is missing", path, line, "id")
    extra = {k: v for k, v in obj.items() if k not in _CORE}
    common = dict(id=str(obj["id"]), suite=name, label=obj.get("label"), extra=extra)
    if "choices" in obj:
        choices, answer, prompt = obj["choices"], obj.get("answer"), obj.get("prompt")
        if not isinstance(prompt, str):
            _fail("multiple-choice item needs a string 'prompt'", path, line, "prompt")
        if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) for c in choices):
            _fail("'choices' must be a list of at least two strings", path, line, "choices")
        if isinstance(answer, bool) or not isinstance(answer, int) or not 0 <= answer < len(choices):
            _fail(f"'answer' must be an index into choices (0..{len(choices) - 1}); got {answer!r}",
                  path, line, "answer")
        return Item(kind="multiple_choice", prompt=prompt, choices=tuple(choices), answer=answer, **common)
    if "good" in obj or "bad" in obj:
        for f in ("good", "bad"):
            if not isinstance(obj.get(f), str) or not obj[f]:
                _fail(f"minimal-pair item needs a non-empty string '{f}'", path, line, f)
        return Item(kind="minimal_pair", good=obj["good"], bad=obj["bad"], **common)
    if "target" in obj:
        if not isinstance(obj.get("prompt"), str):
            _fail("generation item needs a string 'prompt'", path, line, "prompt")
        if not isinstance(obj["target"], str) or not obj["target"]:
            _fail("'target' must be a non-empty string", path, line, "target")
        return Item(kind="generation", prompt=obj["prompt"], target=obj["target"], **common)
    _fail("item is none of multiple choice (choices), minimal pair (good/bad) or generation (target)",
          path, line)
    raise AssertionError  # unreachable


def load_jsonl(path: str | Path, *, name: str | None = None) -> Suite:
    """Read a JSON-lines suite file (optionally starting with a ``suite_header`` line).

    Raises
    ------
    SuiteFormatError
        Empty file, invalid JSON (line named), or an item breaking the schema (line and field named).
    """
    path = Path(path)
    header: dict = {}
    items: list[Item] = []
    with open(path, encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as err:
                raise SuiteFormatError(f"{path}:{lineno}: invalid JSON ({err.msg})", path=str(path),
                                       line=lineno) from err
            if isinstance(obj, dict) and "suite_header" in obj and not items:
                header = dict(obj["suite_header"])
                continue
            items.append(item_from_dict(obj, suite=name or header.get("name") or path.stem, path=str(path),
                                        line=lineno))
    if not items:
        raise SuiteFormatError(f"{path}: suite file holds no items", path=str(path))
    suite_name = name or header.get("name") or items[0].suite
    return Suite(name=suite_name, items=tuple(items), source=str(path), header=header)


def load_bigbench(path: str | Path, *, name: str | None = None) -> Suite:
    """Read a BIG-bench task JSON (``examples[]`` of ``input`` + ``target_scores``) or a BIG-bench
    Hard JSON (``examples[]`` of ``input`` with lettered options + ``target``).

    BIG-bench: the prompt is ``task_prefix + input``; each choice is a continuation with a leading
    space (as lm-evaluation-harness scores it); the answer is the choice scored 1. BIG-bench Hard:
    options ``(A) ...`` are read from the input; the choices are the letters as ``" (A)"`` etc.

    Raises
    ------
    SuiteFormatError
        Not such a file, no examples, or an example with zero or several correct choices.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise SuiteFormatError(f"{path}: invalid JSON ({err.msg})", path=str(path)) from err
    examples = data.get("examples") if isinstance(data, dict) else None
    if not examples:
        raise SuiteFormatError(f"{path}: no 'examples' list (not a BIG-bench task file)", path=str(path))
    suite = name or data.get("name") or path.stem
    prefix = data.get("task_prefix", "") or ""
    items = []
    for i, ex in enumerate(examples):
        if "target_scores" in ex:
            choices = list(ex["target_scores"])
            correct = [j for j, c in enumerate(choices) if ex["target_scores"][c] == 1]
            if len(correct) != 1:
                raise SuiteFormatError(f"{path}: example {i} has {len(correct)} correct choices, expected 1",
                                       path=str(path), line=None, field="target_scores")
            items.append(Item(id=f"{suite}-{i}", suite=suite, kind="multiple_choice",
                              prompt=prefix + ex["input"], choices=tuple(" " + c for c in choices),
                              answer=correct[0], extra={"source_index": i}))
        elif "target" in ex:
            import re
            letters = re.findall(r"^\(([A-Z])\)", ex["input"], flags=re.M)
            target = str(ex["target"]).strip()
            m = re.fullmatch(r"\(?([A-Z])\)?", target)
            if not letters or m is None or m.group(1) not in letters:
                raise SuiteFormatError(f"{path}: example {i}: target {target!r} is not one of the options "
                                       f"{letters}", path=str(path), field="target")
            items.append(Item(id=f"{suite}-{i}", suite=suite, kind="multiple_choice",
                              prompt=prefix + ex["input"], choices=tuple(f" ({c})" for c in letters),
                              answer=letters.index(m.group(1)), extra={"source_index": i}))
        else:
            raise SuiteFormatError(f"{path}: example {i} has neither 'target_scores' nor 'target'",
                                   path=str(path), field="examples")
    return Suite(name=suite, items=tuple(items), source=str(path),
                 header={"format": "bigbench", "task_prefix": prefix})


#: Suite loaders by prefix: ``--suite PREFIX:rest`` calls ``LOADERS.get(PREFIX)(rest) -> Suite``. The file
#: formats are loaders too (``jsonl:``, ``bigbench:``, ``blimp:`` force one); installed packages add more
#: through the ``ckptgeo.suites`` entry-point group.
LOADERS = Registry("suite loader", "ckptgeo.suites", {
    "jsonl": "ckptgeo.suites.items:load_jsonl", "bigbench": "ckptgeo.suites.items:load_bigbench",
    "blimp": "ckptgeo.suites.items:load_blimp", "hf": "ckptgeo.suites.items:load_hf"})


def register_loader(prefix: str):
    """Register a loader for suite specs of the form ``PREFIX:rest`` (e.g. ``hf:blimp/anaphor...``).

    The decorated function takes the rest of the spec and returns a :class:`Suite`.

    Raises
    ------
    DuplicateNameError
        The prefix is already taken by another function (both named).
    """
    return LOADERS.register(prefix)


def _file_format(path: Path) -> str:
    """The loader of a suite file: ``bigbench`` for ``.json``, ``blimp`` for BLiMP rows, else ``jsonl``."""
    if path.suffix == ".json":
        return "bigbench"
    return "blimp" if is_blimp_row(_first_row(path)) else "jsonl"


def diagnostics_dir() -> Path:
    """The folder of the bundled diagnostic suites (installed as the resource package ``ckptgeo.diagnostics``).

    Read through :mod:`importlib.resources`, so it works from a clone, an editable install, a wheel and a
    zip import alike: a resource folder on disk (for the namespace package ``ckptgeo.diagnostics``, a
    ``MultiplexedPath``, the one of its folders that holds the ``*.jsonl`` suites) is returned as is; suites
    inside an archive are copied once per process into a temporary folder (removed at exit). Without the
    resource package (a clone on ``PYTHONPATH``), the clone's ``diagnostics/`` folder.

    Returns
    -------
    Path
        A folder holding ``{name}.jsonl`` per bundled suite; it may not exist when nothing is bundled.
    """
    global _EXTRACTED
    try:
        from importlib.resources import files

        root = files("ckptgeo.diagnostics")
    except (ModuleNotFoundError, TypeError):
        root = None
    if root is not None:
        if isinstance(root, Path) and root.is_dir():
            return root
        entries = [e for e in root.iterdir() if e.name.endswith(".jsonl")]
        folders = {e.parent if isinstance(e, Path) else None for e in entries}
        if len(folders) == 1 and None not in folders:
            return folders.pop()
        if entries:
            if _EXTRACTED is None:
                import atexit
                import shutil
                import tempfile

                folder = Path(tempfile.mkdtemp(prefix="ckptgeo-diagnostics-"))
                for e in entries:
                    (folder / e.name).write_bytes(e.read_bytes())
                atexit.register(shutil.rmtree, folder, True)
                _EXTRACTED = folder
            return _EXTRACTED
    return Path(__file__).resolve().parents[2] / "diagnostics"


#: the bundled suites copied out of an archive (zip import), once per process; see :func:`diagnostics_dir`
_EXTRACTED: Path | None = None


def available_suites() -> list[str]:
    """Names of the bundled suites (files ``diagnostics/*.jsonl``), sorted."""
    d = diagnostics_dir()
    return sorted(p.stem for p in d.glob("*.jsonl")) if d.is_dir() else []


def _printable_name(suite: Suite, spec: str) -> Suite:
    """``suite``, refused when its name (from a file's header or items: an input) holds control characters,
    which would reach terminals, ``report.md`` and CSV files as they are."""
    if not suite.name or any(ord(c) < 32 or 127 <= ord(c) < 160 for c in suite.name):
        raise SuiteFormatError(f"{spec}: the suite name {suite.name!r} is empty or holds control characters; "
                               f"give the suite a plain name (its header's \"name\")", path=spec)
    return suite


def load_suite(spec: str | Path) -> Suite:
    """Load a suite from a bundled name, a file path, or ``PREFIX:rest`` of a registered loader.
    (:func:`ckptgeo.suites.tasks.load_suite_or_task` also reads algorithmic task levels such as ``"copy-L1"``.)

    A ``.json`` file is read as BIG-bench (or BIG-bench Hard) task JSON; another file as JSON lines,
    BLiMP-shaped (first row has ``sentence_good`` and ``sentence_bad``) or in this module's schema.

    Raises
    ------
    InvalidParameterError
        The spec is neither a bundled name, an existing file, nor a registered prefix.
    SuiteFormatError
        The file exists but breaks the schema, or names the suite with control characters.
    """
    spec_s = str(spec)
    path = Path(spec_s)
    if path.is_file():
        return _printable_name(LOADERS.get(_file_format(path))(spec_s), spec_s)
    bundled = diagnostics_dir() / f"{spec_s}.jsonl"
    if bundled.is_file():
        return load_jsonl(bundled, name=spec_s)
    prefix, sep, rest = spec_s.partition(":")
    if sep and prefix in LOADERS:
        return _printable_name(LOADERS.get(prefix)(rest), spec_s)
    import difflib

    names = available_suites()
    close = difflib.get_close_matches(spec_s, names, n=3)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise InvalidParameterError(
        f"Unknown suite {spec_s!r}: not a file, not a bundled suite, not a task level (copy-L1), not a registered "
        f"loader prefix.{hint} Bundled: {', '.join(names) or '(none)'}; loader prefixes: {', '.join(LOADERS.names())}.",
        name="suite", value=spec_s)


def select_items(suite: Suite, n: int | None, seed: int = 0) -> tuple[Item, ...]:
    """A deterministic subset of ``n`` items (seeded shuffle, then the first ``n``); all if ``n`` is None
    or at least the suite's size. Order is restored to the suite's order."""
    if n is None or n >= len(suite.items):
        return suite.items
    idx = sorted(random.Random(seed).sample(range(len(suite.items)), n))
    return tuple(suite.items[i] for i in idx)


def write_jsonl(path: str | Path, items, *, header: dict | None = None) -> None:
    """Write items (``Item`` or dicts) as JSON lines, optionally with a ``suite_header`` line first, atomically
    (:func:`ckptgeo._io.atomic_path`)."""
    lines = [json.dumps({"suite_header": header})] if header else []
    lines += [json.dumps(it.to_dict() if isinstance(it, Item) else it, ensure_ascii=False) for it in items]
    atomic_write_text(path, "".join(line + "\n" for line in lines))


def is_blimp_row(obj) -> bool:
    """Whether ``obj`` is a BLiMP row (a dict with ``sentence_good`` and ``sentence_bad``)."""
    return isinstance(obj, dict) and "sentence_good" in obj and "sentence_bad" in obj


def _first_row(path: Path):
    """The first non-empty line of a JSON-lines file, parsed; None if unreadable as JSON."""
    with open(path, encoding="utf-8") as f:
        for raw in f:
            if raw.strip():
                try:
                    return json.loads(raw)
                except json.JSONDecodeError:
                    return None
    return None


_BLIMP_TEXT = ("sentence_good", "sentence_bad")


def _blimp_item(obj: dict, *, suite: str, index: int, path: str | None = None, line: int | None = None) -> Item:
    for f in _BLIMP_TEXT:
        if not isinstance(obj.get(f), str) or not obj[f].strip():
            _fail(f"BLiMP row needs a non-empty string {f!r}", path, line, f)
    pair_id = obj.get("pairID", index)
    extra = {k: v for k, v in obj.items() if k not in _BLIMP_TEXT}
    return Item(id=f"{obj.get('UID') or suite}-{pair_id}", suite=suite, kind="minimal_pair",
                good=obj["sentence_good"], bad=obj["sentence_bad"], extra=extra)


def load_blimp(path: str | Path, *, name: str | None = None) -> Suite:
    """Read a BLiMP JSON-lines file (Warstadt et al., 2020) as minimal pairs.

    ``sentence_good`` becomes ``good``, ``sentence_bad`` becomes ``bad``; the id is
    ``{UID}-{pairID}``; the suite is ``name``, else the rows' ``UID``, else the file's stem. The other
    fields (``field``, ``linguistics_term``, ``one_prefix_prefix`` ...) are kept in ``extra``.

    Parameters
    ----------
    path : str or Path
        A BLiMP phenomenon file, e.g. ``anaphor_gender_agreement.jsonl`` (1000 pairs).
    name : str, optional
        The suite name to use instead of the ``UID``.

    Returns
    -------
    Suite
        ``header`` holds ``format="blimp"``, ``field`` and ``linguistics_term`` of the first row.

    Raises
    ------
    SuiteFormatError
        Invalid JSON, a row lacking a sentence (line named), or no rows.

    References
    ----------
    Warstadt et al., "BLiMP: The Benchmark of Linguistic Minimal Pairs for English", TACL 2020.
    """
    path = Path(path)
    rows: list[tuple[int, dict]] = []
    with open(path, encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                rows.append((lineno, json.loads(raw)))
            except json.JSONDecodeError as err:
                raise SuiteFormatError(f"{path}:{lineno}: invalid JSON ({err.msg})", path=str(path),
                                       line=lineno) from err
    if not rows:
        raise SuiteFormatError(f"{path}: BLiMP file holds no rows", path=str(path))
    first = rows[0][1] if isinstance(rows[0][1], dict) else {}
    suite = name or first.get("UID") or path.stem
    items = []
    for i, (lineno, obj) in enumerate(rows):
        if not isinstance(obj, dict):
            _fail(f"expected a JSON object, got {type(obj).__name__}", str(path), lineno)
        items.append(_blimp_item(obj, suite=suite, index=i, path=str(path), line=lineno))
    header = {"format": "blimp", "field": first.get("field"), "linguistics_term": first.get("linguistics_term")}
    return Suite(name=suite, items=tuple(items), source=str(path), header=header)


#: ``hf:blimp/PHENOMENON`` reads the Hub's BLiMP (one config per phenomenon).
_HF_ALIASES = {"blimp": "nyu-mll/blimp"}


def _parse_hf_spec(spec: str) -> tuple[str, str | None, str | None]:
    """``PATH_OR_ID[:CONFIG][@SPLIT]`` -> (path or repo id, config, split)."""
    rest, split = spec, None
    if "@" in spec:
        rest, _, split = spec.rpartition("@")
    path, _, config = rest.partition(":")
    config = config or None
    head, sep, tail = path.partition("/")
    if not config and sep and head in _HF_ALIASES and "/" not in tail and not Path(path).exists():
        path, config = _HF_ALIASES[head], tail
    return path, config, split or None


def _network_errors() -> tuple[type[BaseException], ...]:
    errors: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError)
    try:
        import httpx

        errors += (httpx.TransportError,)
    except ImportError:  # pragma: no cover - httpx comes with huggingface_hub
        pass
    return errors


def load_hf(spec: str, *, name: str | None = None, cache_dir: str | None = None) -> Suite:
    """Read a dataset with the ``datasets`` library: a local folder or a Hub dataset id.

    ``spec`` is ``PATH_OR_ID[:CONFIG][@SPLIT]`` (split default ``train``, or the only split), as typed
    after ``--suite hf:``. ``PATH_OR_ID`` may be a folder written by ``Dataset.save_to_disk`` (read with
    ``load_from_disk``), a folder of JSON-lines / Parquet / CSV files, or a Hub dataset id (fetched from
    ``HF_ENDPOINT``); ``blimp/PHENOMENON`` is short for ``nyu-mll/blimp:PHENOMENON``. Rows that are
    BLiMP-shaped become minimal pairs; other rows must follow this module's item schema (missing ids
    become ``{suite}-{row}``).

    Parameters
    ----------
    spec : str
        E.g. ``"blimp/anaphor_gender_agreement"``, ``"path/to/saved_dataset"``, ``"org/name:config@test"``.
    name : str, optional
        Suite name; default the config, else the last part of the path.
    cache_dir : str, optional
        Passed to ``datasets.load_dataset`` (default: the ``datasets`` cache).

    Returns
    -------
    Suite
        ``source`` is ``"hf:" + spec``; ``header`` holds ``format="hf"``, the path, config and split.

    Raises
    ------
    SourceNotFoundError
        No such folder or dataset (or config / split).
    HubUnreachableError
        The Hub at ``HF_ENDPOINT`` cannot be reached.
    SuiteFormatError
        Rows are neither BLiMP-shaped nor in the item schema; the message names the columns.
    """
    from ckptgeo.errors import HubUnreachableError, SourceNotFoundError

    import datasets

    path, config, split = _parse_hf_spec(spec)
    suite = name or config or Path(path.rstrip("/")).name
    local = Path(path)
    try:
        if local.is_dir() and ((local / "state.json").is_file() or (local / "dataset_dict.json").is_file()):
            data = datasets.load_from_disk(str(local))
        else:
            # a dataset's loading script would be repository code: refused (datasets < 3 ran it by default)
            data = datasets.load_dataset(path, config, split=split, cache_dir=cache_dir, trust_remote_code=False)
    except _network_errors() as err:
        raise HubUnreachableError(f"cannot reach the Hub for dataset {path!r} ({err}); set HF_ENDPOINT to a "
                                  f"reachable mirror or pass a local dataset folder: --suite hf:PATH") from err
    except (FileNotFoundError, ValueError, datasets.exceptions.DatasetNotFoundError) as err:
        raise SourceNotFoundError(f"dataset {spec!r} could not be read: {err}", repo_id=path) from err
    if isinstance(data, (datasets.DatasetDict, dict)):
        splits = list(data)
        chosen = split or ("train" if "train" in splits else splits[0] if len(splits) == 1 else None)
        if chosen not in data:
            raise SourceNotFoundError(f"dataset {spec!r} has splits {splits}; pick one with @SPLIT", repo_id=path)
        data, split = data[chosen], chosen
    items = []
    for i, row in enumerate(data):
        row = {k: v for k, v in row.items() if v is not None}
        if is_blimp_row(row):
            items.append(_blimp_item(row, suite=suite, index=i, path=f"hf:{spec}", line=i + 1))
        elif "choices" in row or "good" in row or "target" in row:
            row.setdefault("id", f"{suite}-{i}")
            items.append(item_from_dict(row, suite=suite, path=f"hf:{spec}", line=i + 1))
        else:
            raise SuiteFormatError(f"hf:{spec}: row {i} has columns {sorted(row)}; expected BLiMP "
                                   "(sentence_good, sentence_bad) or the item schema (choices/answer, good/bad, "
                                   "target)", path=f"hf:{spec}", line=i + 1)
    if not items:
        raise SuiteFormatError(f"hf:{spec}: the dataset has no rows", path=f"hf:{spec}")
    return Suite(name=suite, items=tuple(items), source=f"hf:{spec}",
                 header={"format": "hf", "path": path, "config": config, "split": split})


_ = dataclasses  # re-exported for type users
