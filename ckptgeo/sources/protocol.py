"""The one interface the scan engine sees: :class:`CheckpointSource`, and the options a source declares.

Every checkpoint source subclasses :class:`CheckpointSource`. It implements the required methods
(:meth:`~CheckpointSource.revisions`, :meth:`~CheckpointSource.weight_files`, :meth:`~CheckpointSource.fetch`,
:meth:`~CheckpointSource.release`, :meth:`~CheckpointSource.config_folder`,
:meth:`~CheckpointSource.tokenizer_path`, :meth:`~CheckpointSource.default_suites`) and overrides the optional
members whose defaults here do not fit it (``repo_id``, ``root``, ``missing_note``, :meth:`expect`,
:meth:`cached_folder`, :meth:`main_revision`, :meth:`listing_note`); the engine and the commands read only
these, never a source's own attributes.

Its options are a frozen dataclass named by its ``options`` class attribute, each field declared with
:func:`ckptgeo._settings.setting` as a measure's options are: :class:`SourceOptions` (``step_pattern``) for a
source that reads files where they are, :class:`DownloadOptions` (``keep_cache``, ``cache_dir`` too) for one
that downloads. :func:`~ckptgeo.sources.registry.open_source` checks the options given against that class
(``source_options={"cache_dir": "/scratch/hf"}``, ``--source-option cache_dir=/scratch/hf``) and hands the
instance to ``from_spec(spec, options)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ckptgeo._settings import NonEmptyStr, setting
from ckptgeo.sources.revisions import Revision

__all__ = ["CheckpointSource", "WeightFile", "SourceOptions", "DownloadOptions"]


@dataclass(frozen=True)
class WeightFile:
    """One weight file of a revision: ``name`` (path in the checkpoint), ``size`` (bytes, None if
    unknown before download), ``sha256`` (hex, None until known)."""

    name: str
    size: int | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class SourceOptions:
    """The options of a source that reads checkpoints where they are (a folder)."""

    step_pattern: str | None = setting(
        None, "Regex reading the step from revision names (named group ``step`` or the first group; optional "
              "``stage``, ``tokens``); default: the built-in naming schemes of :mod:`ckptgeo.sources.naming`.",
        admits=(NonEmptyStr, None))


@dataclass(frozen=True)
class DownloadOptions(SourceOptions):
    """The options of a source that downloads (the Hub, a family of Hub repos)."""

    keep_cache: bool = setting(False, "Never evict a fetched revision from the download cache.")
    cache_dir: str | None = setting(
        None, "The download cache folder; default: the Hub client's (``HF_HUB_CACHE``).", coerce=str,
        admits=(NonEmptyStr, None))


class CheckpointSource:
    """A place that holds the checkpoints of one training run (module docstring: what a source implements).

    Attributes
    ----------
    options : type
        The frozen dataclass of its options (class attribute; :class:`SourceOptions` by default).
    claim_order : int
        The order in which :func:`~ckptgeo.sources.registry.open_source` asks sources to claim an unprefixed
        spec (lower first; class attribute).
    name : str
        The model name written in every row.
    tokens_per_step : int or None
        Training tokens per step, where known.
    downloads : bool
        Whether :meth:`fetch` puts files on disk (so disk budgets apply).
    default_selector : str
        The revision selector used when the user gives none.
    repo_id : str or None
        The Hub repo id behind it (a family: its spec); None for anything else.
    root : Path or None
        The local folder it reads; None for anything else.
    missing_note : str or None
        Added to the error naming a revision that is not there (why it may be missing).
    cache_dir : str or None
        Where it downloads to (None: the Hub client's cache, or nowhere).
    """

    options: ClassVar[type] = SourceOptions
    claim_order: ClassVar[int] = 50
    name: str = ""
    tokens_per_step: int | None = None
    downloads: bool = False
    default_selector: str = "all"
    repo_id: str | None = None
    root: Path | None = None
    missing_note: str | None = None
    cache_dir: str | None = None

    @classmethod
    def claims(cls, spec: str) -> bool:
        """Whether an unprefixed ``spec`` is meant for this source (default: never; ``NAME:spec`` still is)."""
        return False

    @classmethod
    def from_spec(cls, spec: str, options=None) -> CheckpointSource:
        """The source that ``spec`` names, with ``options`` (an instance of :attr:`options`; None: defaults)."""
        raise NotImplementedError(f"{cls.__qualname__}.from_spec")

    @property
    def label(self) -> str:
        """How messages name it: its repo id, else its name."""
        return self.repo_id or self.name

    # -- required ------------------------------------------------------------------------------
    def revisions(self) -> list[Revision]:
        """Every step revision, sorted by step (raises SourceNotFoundError / HubUnreachableError)."""
        raise NotImplementedError

    def weight_files(self, revision: Revision) -> list[WeightFile]:
        """The weight files of ``revision`` with size / sha256 where known without downloading."""
        raise NotImplementedError

    def fetch(self, revision: Revision) -> Path:
        """A local folder holding ``config.json`` and the weights of ``revision`` (downloads if needed)."""
        raise NotImplementedError

    def release(self, revision: Revision) -> None:
        """Free what :meth:`fetch` put on disk for ``revision`` (no-op where nothing was downloaded)."""
        raise NotImplementedError

    def config_folder(self, revision: Revision) -> Path:
        """A local folder holding ``revision``'s ``config.json`` (fetching only that file)."""
        raise NotImplementedError

    def tokenizer_path(self) -> Path:
        """A local folder from which ``AutoTokenizer.from_pretrained`` loads the tokenizer."""
        raise NotImplementedError

    def default_suites(self) -> list[str]:
        """Suite specs measured when the user names none."""
        raise NotImplementedError

    # -- optional (defaults for a source that downloads nothing) ---------------------------------
    def expect(self, revisions: Sequence[Revision]) -> None:
        """Be told the revisions still to be fetched, in order (so that what a later one shares is kept)."""

    def declared_size(self, revision: Revision, name: str) -> float | None:
        """The bytes weight file ``name`` of ``revision`` declares in its own header, read without downloading the
        weights (inf: a header that cannot be parsed); None where the source cannot tell (this default)."""
        return None

    def cached_folder(self, revision: Revision) -> Path | None:
        """The local folder already holding ``revision``'s files without a download, else None."""
        return None

    def main_revision(self) -> Revision | None:
        """The repository's current head (``main``) as a revision, where it has one apart from its
        checkpoints, else None (known after :meth:`revisions`)."""
        return None

    def listing_note(self, selected: Sequence[Revision], selector: str | None = None) -> str | None:
        """A line on what the listing could not know (an offline Hub cache), else None."""
        return None
