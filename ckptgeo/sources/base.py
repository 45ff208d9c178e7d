"""The one interface the scan engine sees: :class:`CheckpointSource`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from ..errors import SourceNotFoundError
from ..revisions import Revision

__all__ = ["CheckpointSource", "WeightFile", "open_source"]


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


def open_source(spec: str | Path, *, step_pattern: str | None = None, keep_cache: bool = False,
                cache_dir: str | Path | None = None) -> CheckpointSource:
    """A :class:`LocalSource` when ``spec`` is an existing folder, else a :class:`HubSource` repo id.

    Raises
    ------
    SourceNotFoundError
        ``spec`` is neither an existing folder nor a valid repo id (e.g. a mistyped path).
    """
    from ..constants import STEP_PATTERN

    pattern = step_pattern or STEP_PATTERN
    path = Path(spec).expanduser()
    if not path.is_dir() and (path.exists() or path.parent != Path(".") and path.parent.is_dir()):
        # "runs/nosuch" next to an existing runs/: a mistyped folder, not a Hub repo id
        raise SourceNotFoundError(f"{spec} is not a folder of step{{N}} checkpoints (its parent {path.parent} "
                                  f"exists locally); to use a Hub repo of that name, run from another directory",
                                  path=str(spec))
    if path.is_dir():
        from .local import LocalSource

        return LocalSource(path, step_pattern=pattern)
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(str(spec))
    except HFValidationError as err:
        raise SourceNotFoundError(f"{spec} is not an existing checkpoint folder, nor a Hub repo id ('org/name')",
                                  path=str(spec)) from err
    from .hub import HubSource

    return HubSource(str(spec), step_pattern=pattern, keep_cache=keep_cache, cache_dir=cache_dir)
