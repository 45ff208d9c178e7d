"""Checkpoints in a local folder: ``ROOT/step{N}/`` (or any built-in naming scheme, e.g. a Trainer's
``checkpoint-{N}/``) folders written by ``save_pretrained``.

::

    ROOT/
      step0/  config.json  model.safetensors  [tokenizer files]
      step100/ ...
      suites/*.jsonl        default suites (written by ``ckptgeo train``)
      manifest.json         optional (``ckptgeo train``): its ``tokens_per_step`` fills the ``tokens`` column
      [tokenizer files]     optional; else the first checkpoint folder's are used (or ``--tokenizer``)
"""

from __future__ import annotations

import dataclasses

from pathlib import Path

from ckptgeo.errors import SourceNotFoundError
from ckptgeo.sources.naming import parse_names
from ckptgeo.sources.revisions import Revision, revision_from_name
from ckptgeo.sources.protocol import CheckpointSource, SourceOptions, WeightFile
from ckptgeo.sources.weights import weight_files_in

__all__ = ["LocalSource"]

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json")


def _manifest_value(root: Path, key: str) -> int | None:
    """A non-negative integer ``key`` of the ``manifest.json`` of a run ``ckptgeo train`` wrote, else None."""
    import json

    try:
        value = json.loads((root / "manifest.json").read_text(encoding="utf-8")).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else None


def _manifest_tokens_per_step(root: Path) -> int | None:
    """``tokens_per_step`` of a run ``ckptgeo train`` wrote (its ``manifest.json``), else None."""
    value = _manifest_value(root, "tokens_per_step")
    return value if value else None


class LocalSource(CheckpointSource):
    """A folder of ``step{N}`` checkpoint folders (see module docstring).

    Raises
    ------
    SourceNotFoundError
        ``root`` is not a folder.
    """

    options = SourceOptions
    downloads = False
    default_selector = "all"
    #: asked first by :func:`~ckptgeo.sources.registry.open_source`: an existing folder is always local.
    claim_order = 0

    def __init__(self, root: str | Path, *, step_pattern: str | None = None):
        self.root = Path(root)
        if not self.root.is_dir():
            raise SourceNotFoundError(f"Checkpoint folder {self.root} does not exist", path=str(self.root))
        self.name = self.root.resolve().name
        self.step_pattern = step_pattern
        self.tokens_per_step = _manifest_tokens_per_step(self.root)
        self.seed = _manifest_value(self.root, "seed")   # a trained run's seed: the rows' run_seed

    @classmethod
    def claims(cls, spec: str) -> bool:
        """Whether ``spec`` is an existing folder."""
        return Path(spec).expanduser().is_dir()

    @classmethod
    def from_spec(cls, spec: str, options: SourceOptions | None = None) -> "LocalSource":
        """The source of folder ``spec``."""
        return cls(Path(spec).expanduser(), step_pattern=(options or SourceOptions()).step_pattern)

    def revisions(self) -> list[Revision]:
        names = [p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")]
        out = []
        for name in parse_names(names, self.step_pattern, where=str(self.root)):
            size = sum(f.stat().st_size for f in weight_files_in(self.root / name))
            rev = revision_from_name(name, pattern=self.step_pattern, size=size)
            out.append(rev if self.seed is None or rev.seed is not None else dataclasses.replace(rev, seed=self.seed))
        return sorted(out)

    def weight_files(self, revision: Revision) -> list[WeightFile]:
        return [WeightFile(f.name, f.stat().st_size) for f in weight_files_in(self.root / revision.name)]

    def fetch(self, revision: Revision) -> Path:
        return self.root / revision.name

    def release(self, revision: Revision) -> None:
        return None

    def config_folder(self, revision: Revision) -> Path:
        """The folder holding ``revision``'s ``config.json``."""
        return self.root / revision.name

    def tokenizer_path(self) -> Path:
        if any((self.root / f).exists() for f in _TOKENIZER_FILES):
            return self.root
        for rev in self.revisions():
            if any((self.root / rev.name / f).exists() for f in _TOKENIZER_FILES):
                return self.root / rev.name
        raise SourceNotFoundError(f"No tokenizer files in {self.root} or its checkpoint folders; pass one with "
                                  f"--tokenizer PATH|REPO (tokenizer=... in Python)", path=str(self.root))

    def default_suites(self) -> list[str]:
        return [str(p) for p in sorted((self.root / "suites").glob("*.jsonl"))]
