"""The item schema shared by every suite, and the loaders that read suites into it.

An item is one JSON object per line (SPEC.md, "Item schema"). Three kinds exist:

* multiple choice: ``id``, ``suite``, ``prompt``, ``choices`` (list of str), ``answer`` (index), optional ``label``
* minimal pair:    ``id``, ``suite``, ``good``, ``bad``
* generation:      ``id``, ``suite``, ``prompt``, ``target`` (str), optional ``label``

Extra fields are kept in :attr:`Item.extra` and otherwise ignored. A suite file may start with
one header line ``{"suite_header": {...}}`` (name, description, difficulty, chance, ...).

:func:`load_suite` takes a suite *name* (a file in ``diagnostics/`` or a registered loader), a
*path* (JSON lines, BIG-bench task JSON, BIG-bench Hard JSON) and returns a :class:`Suite`.
Other formats register a loader with :func:`register_loader`.
"""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .errors import InvalidParameterError, SuiteFormatError

__all__ = [
    "Item", "Suite", "load_suite", "load_jsonl", "load_bigbench", "item_from_dict", "write_jsonl",
    "register_loader", "diagnostics_dir", "available_suites", "select_items",
]

KINDS = ("multiple_choice", "minimal_pair", "generation")
_CORE = {"id", "suite", "prompt", "choices", "answer", "label", "good", "bad", "target"}


@dataclass(frozen=True)
class Item:
    """One evaluation item in SPEC.md's schema. ``kind`` is derived from the fields present."""

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


_LOADERS: dict[str, Callable[..., Suite]] = {}


def register_loader(prefix: str):
    """Register a loader for suite specs of the form ``PREFIX:rest`` (e.g. ``hf:blimp/anaphor...``).

    The decorated function takes the rest of the spec and returns a :class:`Suite`.
    Raises :class:`ValueError` if the prefix is already taken.
    """

    def deco(fn):
        if prefix in _LOADERS:
            raise ValueError(f"suite loader prefix {prefix!r} is registered twice: {_LOADERS[prefix]} and {fn}")
        _LOADERS[prefix] = fn
        return fn

    return deco


def diagnostics_dir() -> Path:
    """The folder of the bundled diagnostic suites (installed as ``ckptgeo.diagnostics``)."""
    try:
        from importlib.resources import files

        p = Path(str(files("ckptgeo.diagnostics")))
        if p.is_dir():
            return p
    except (ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parent.parent / "diagnostics"


def available_suites() -> list[str]:
    """Names of the bundled suites (files ``diagnostics/*.jsonl``), sorted."""
    d = diagnostics_dir()
    return sorted(p.stem for p in d.glob("*.jsonl")) if d.is_dir() else []


def load_suite(spec: str | Path) -> Suite:
    """Load a suite from a bundled name, a file path, or ``PREFIX:rest`` of a registered loader.

    Raises
    ------
    InvalidParameterError
        The spec is neither a bundled name, an existing file, nor a registered prefix.
    SuiteFormatError
        The file exists but breaks the schema.
    """
    spec_s = str(spec)
    path = Path(spec_s)
    if path.is_file():
        if path.suffix == ".json":
            return load_bigbench(path)
        return load_jsonl(path)
    bundled = diagnostics_dir() / f"{spec_s}.jsonl"
    if bundled.is_file():
        return load_jsonl(bundled, name=spec_s)
    prefix, sep, rest = spec_s.partition(":")
    if sep and prefix in _LOADERS:
        return _LOADERS[prefix](rest)
    import difflib

    names = available_suites()
    close = difflib.get_close_matches(spec_s, names, n=3)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise InvalidParameterError(
        f"Unknown suite {spec_s!r}: not a file, not a bundled suite, not a registered loader prefix.{hint} "
        f"Bundled: {', '.join(names) or '(none)'}; loader prefixes: {', '.join(sorted(_LOADERS)) or '(none)'}.",
        name="suite", value=spec_s)


def select_items(suite: Suite, n: int | None, seed: int = 0) -> tuple[Item, ...]:
    """A deterministic subset of ``n`` items (seeded shuffle, then the first ``n``); all if ``n`` is None
    or at least the suite's size. Order is restored to the suite's order."""
    if n is None or n >= len(suite.items):
        return suite.items
    idx = sorted(random.Random(seed).sample(range(len(suite.items)), n))
    return tuple(suite.items[i] for i in idx)


def write_jsonl(path: str | Path, items, *, header: dict | None = None) -> None:
    """Write items (``Item`` or dicts) as JSON lines, optionally with a ``suite_header`` line first."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        if header:
            f.write(json.dumps({"suite_header": header}) + "\n")
        for it in items:
            f.write(json.dumps(it.to_dict() if isinstance(it, Item) else it, ensure_ascii=False) + "\n")


_ = dataclasses  # re-exported for type users
