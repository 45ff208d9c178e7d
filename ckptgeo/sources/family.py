"""A family of Hub repos walked as one source: one repo per seed (PolyPythia ``pythia-160m-seed{k}``)
or one repo per checkpoint (MultiBERTs ``multiberts-seed_{s}-step_{k}k``, TinyLlama's intermediate steps).

A family is given as a list (``org/a,org/b``) or a pattern with brace groups, expanded as a shell does:
``EleutherAI/pythia-160m-seed{1..3}``, ``google/multiberts-seed_{0,1}-step_{20,40}k``.

* A member whose branches (or ``main``'s folders) name checkpoints contributes each of them, named
  ``<member>@<branch>``; its rows carry the member's name as ``model``.
* A member with no such branch is one checkpoint, its ``main``: the step is read from the repo name
  (``step_20k`` -> 20000, ``step-1431k`` -> 1431000, ``step{N}``), and its rows' ``model`` is the repo name
  without that part (``multiberts-seed_0``), so the checkpoints of one seed form one curve.

The seed is read from the member name (``seed3``, ``seed_3``, ``seed-3``) and written as ``run_seed``.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
from pathlib import Path

from ckptgeo.errors import SourceNotFoundError
from ckptgeo.sources.protocol import CheckpointSource, DownloadOptions, WeightFile
from ckptgeo.sources.revisions import Revision

__all__ = ["FamilySource", "expand_family", "is_family_spec"]

_SEED = re.compile(r"seed[_-]?(\d+)", re.I)
_STEP = re.compile(r"[-_]?step[_-]?(\d+)(k?)(?=$|[-_])", re.I)


def is_family_spec(spec: str) -> bool:
    """Whether a source spec names several repos (a comma list or a brace pattern)."""
    return "," in spec or bool(re.search(r"\{[^{}]*(,|\.\.)[^{}]*\}", spec))


def expand_family(spec: str) -> list[str]:
    """The repo ids of a family spec, in order.

    >>> expand_family("org/p-seed{1..3}")
    ['org/p-seed1', 'org/p-seed2', 'org/p-seed3']
    >>> expand_family("g/m-seed_{0,1}-step_{20,40}k")
    ['g/m-seed_0-step_20k', 'g/m-seed_0-step_40k', 'g/m-seed_1-step_20k', 'g/m-seed_1-step_40k']
    >>> expand_family("org/a, org/b")
    ['org/a', 'org/b']
    """
    items, depth, cur = [], 0, ""
    for ch in spec:  # commas outside braces separate repos
        depth += (ch == "{") - (ch == "}")
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    out = []
    for item in (i.strip() for i in items if i.strip()):
        parts = re.split(r"(\{[^{}]*\})", item)
        choices = []
        for part in parts:
            m = re.fullmatch(r"\{(\d+)\.\.(\d+)\}", part)
            if m:
                lo, hi = int(m.group(1)), int(m.group(2))
                step = 1 if lo <= hi else -1
                choices.append([str(v) for v in range(lo, hi + step, step)])
            elif re.fullmatch(r"\{[^{}]*,[^{}]*\}", part):
                choices.append([c.strip() for c in part[1:-1].split(",")])
            else:
                choices.append([part])
        out += ["".join(c) for c in itertools.product(*choices)]
    return list(dict.fromkeys(out))


def seed_of(name: str) -> int | None:
    """``pythia-160m-seed3`` -> 3, ``multiberts-seed_0-step_20k`` -> 0, else None."""
    m = _SEED.search(name)
    return int(m.group(1)) if m else None


def step_of(name: str) -> tuple[int, str] | None:
    """(step, name without the step part) for a one-checkpoint repo name, or None.

    >>> step_of("multiberts-seed_0-step_20k"), step_of("TinyLlama-1.1B-intermediate-step-1431k-3T")
    ((20000, 'multiberts-seed_0'), (1431000, 'TinyLlama-1.1B-intermediate-3T'))
    """
    m = None
    for m in _STEP.finditer(name):
        pass
    if m is None:
        return None
    step = int(m.group(1)) * (1000 if m.group(2) else 1)
    return step, (name[: m.start()] + name[m.end():]).strip("-_")


class FamilySource(CheckpointSource):
    """Several Hub repos, one training run (seed) or one checkpoint each, walked as one source.

    Parameters
    ----------
    spec : str
        A comma list or brace pattern of repo ids (see module docstring).
    step_pattern, keep_cache, cache_dir
        As for :class:`~ckptgeo.sources.hub.HubSource`, applied to every member.

    Raises
    ------
    SourceNotFoundError
        A member repo does not exist, or a member has neither checkpoint branches nor a step in its name.
    """

    options = DownloadOptions
    downloads = True
    #: asked by :func:`~ckptgeo.sources.registry.open_source` after local folders, before other sources.
    claim_order = 10

    @classmethod
    def claims(cls, spec: str) -> bool:
        """Whether ``spec`` is a list or brace pattern of repo ids."""
        return is_family_spec(spec)

    @classmethod
    def from_spec(cls, spec: str, options: DownloadOptions | None = None) -> "FamilySource":
        """The family ``spec`` with ``options`` (applied to every member), every member checked to be a repo
        id first.

        Raises
        ------
        SourceNotFoundError
            A member is not a Hub repo id.
        """
        from huggingface_hub.errors import HFValidationError
        from huggingface_hub.utils import validate_repo_id

        for member in expand_family(spec):
            try:
                validate_repo_id(member)
            except HFValidationError as err:
                raise SourceNotFoundError(f"{member!r} (in the family {spec}) is not a Hub repo id ('org/name')",
                                          path=spec) from err
        return cls(spec, **dataclasses.asdict(options or DownloadOptions()))

    def __init__(self, spec: str, *, step_pattern: str | None = None, keep_cache: bool = False,
                 cache_dir: str | Path | None = None):
        from ckptgeo.sources.hub import HubSource

        self.repo_id = spec
        self.repo_ids = expand_family(spec)
        names = [r.split("/")[-1] for r in self.repo_ids]
        self.name = os.path.commonprefix(names).rstrip("-_.") or "family"
        self.members = {r: HubSource(r, step_pattern=step_pattern, keep_cache=keep_cache, cache_dir=cache_dir)
                        for r in self.repo_ids}
        self.offline = any(m.offline for m in self.members.values())
        self.downloads = not self.offline
        self.missing_note = next(iter(self.members.values())).missing_note
        self.cache_dir = next(iter(self.members.values())).cache_dir
        tps = {m.tokens_per_step for m in self.members.values()}
        self.tokens_per_step = tps.pop() if len(tps) == 1 else None
        self._inner: dict[str, tuple[object, Revision]] = {}
        self._revisions: list[Revision] | None = None

    @property
    def default_selector(self) -> str:
        per_checkpoint = all(not src.revisions() for src in self.members.values())
        return "all" if per_checkpoint else "every-1000"

    def revisions(self) -> list[Revision]:
        if self._revisions is not None:
            return self._revisions
        out = []
        for repo_id, src in self.members.items():
            member = repo_id.split("/")[-1]
            seed = seed_of(member)
            own = src.revisions()
            if own:
                for r in own:
                    outer = Revision(step=r.step, name=f"{member}@{r.name}", commit=r.commit, size=r.size,
                                     stage=r.stage, tokens=r.tokens, seed=seed, repo_id=repo_id,
                                     subfolder=r.subfolder, model=repo_id)
                    self._inner[outer.name] = (src, r)
                    out.append(outer)
                continue
            parsed = step_of(member)
            main = src.branches.get("main")
            if parsed is None or main is None:
                raise SourceNotFoundError(
                    f"family member {repo_id} has no checkpoint branches and no step in its name "
                    f"(e.g. -step_20k); list it on its own with `ckptgeo revisions {repo_id}`", repo_id=repo_id)
            step, model = parsed
            inner = Revision(step=step, name="main", commit=main)
            tokens = step * src.tokens_per_step if src.tokens_per_step else None
            outer = Revision(step=step, name=member, commit=main, tokens=tokens, seed=seed, repo_id=repo_id,
                             model=f"{repo_id.rsplit('/', 1)[0]}/{model}" if "/" in repo_id else model)
            self._inner[outer.name] = (src, inner)
            out.append(outer)
        self._revisions = sorted(out)
        return self._revisions

    def _member(self, revision: Revision):
        if revision.name not in self._inner:
            self.revisions()
        return self._inner[revision.name]

    def weight_files(self, revision: Revision) -> list[WeightFile]:
        src, inner = self._member(revision)
        return src.weight_files(inner)

    def fetch(self, revision: Revision) -> Path:
        src, inner = self._member(revision)
        return src.fetch(inner)

    def expect(self, revisions: list[Revision]) -> None:
        """Tell each member which of its revisions are still to come, so that a file its branches share (the
        config, a weight shard) is kept between them and downloaded once (:meth:`HubSource.expect`)."""
        todo: dict[str, list[Revision]] = {r: [] for r in self.members}
        for r in revisions:
            src, inner = self._member(r)
            todo[src.repo_id].append(inner)
        for repo_id, inner in todo.items():
            self.members[repo_id].expect(inner)

    def release(self, revision: Revision) -> None:
        src, inner = self._member(revision)
        src.release(inner)

    def config_folder(self, revision: Revision) -> Path:
        src, inner = self._member(revision)
        return src.config_folder(inner)

    def cached_folder(self, revision: Revision) -> Path | None:
        src, inner = self._member(revision)
        return src.cached_folder(inner)

    def listing_note(self, selected, selector: str | None = None) -> str | None:
        from ckptgeo.sources.hub import offline_note

        return offline_note(list(self.members.values()), self.repo_id, selected, selector) if self.offline else None

    def tokenizer_path(self) -> Path:
        """The tokenizer of the last member (the members of a family share one)."""
        revs = self.revisions()
        src = self._member(revs[-1])[0] if revs else next(iter(self.members.values()))
        return src.tokenizer_path()

    def default_suites(self) -> list[str]:
        from ckptgeo.suites.items import available_suites

        return available_suites()
