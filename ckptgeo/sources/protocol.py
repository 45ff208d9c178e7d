"""The one interface the scan engine sees: :class:`CheckpointSource`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from ckptgeo.sources.revisions import Revision

__all__ = ["CheckpointSource", "WeightFile"]


@dataclass(frozen=True)
class WeightFile:
    """One weight file of a revision: ``name`` (path in the checkpoint), ``size`` (bytes, None if
    unknown before download), ``sha256`` (hex, None until known)."""

    name: str
    size: int | None = None
    sha256: str | None = None


@runtime_checkable
class CheckpointSource(Protocol):
    """A place that holds the checkpoints of one training run.

    ``name`` is the model name written in every row; ``tokens_per_step`` is None where unknown;
    ``downloads`` says whether :meth:`fetch` puts files on disk (so disk budgets apply);
    ``default_selector`` is the revision selector used when the user gives none.
    """

    name: str
    tokens_per_step: int | None
    downloads: bool
    default_selector: str

    def revisions(self) -> list[Revision]:
        """Every step revision, sorted by step (raises SourceNotFoundError / HubUnreachableError)."""

    def weight_files(self, revision: Revision) -> list[WeightFile]:
        """The weight files of ``revision`` with size / sha256 where known without downloading."""

    def fetch(self, revision: Revision) -> Path:
        """A local folder holding ``config.json`` and the weights of ``revision`` (downloads if needed)."""

    def release(self, revision: Revision) -> None:
        """Free what :meth:`fetch` put on disk for ``revision`` (no-op where nothing was downloaded)."""

    def config_folder(self, revision: Revision) -> Path:
        """A local folder holding ``revision``'s ``config.json`` (fetching only that file)."""

    def tokenizer_path(self) -> Path:
        """A local folder from which ``AutoTokenizer.from_pretrained`` loads the tokenizer."""

    def default_suites(self) -> list[str]:
        """Suite specs measured when the user names none."""
