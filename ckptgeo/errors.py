"""Every exception and warning ckptgeo raises.

Each error subclasses :class:`CkptgeoError` and the builtin a caller would already catch
(``LookupError``, ``OSError``, ``ValueError`` ...), and carries the fields that locate it
(``repo_id``, ``revision``, ``path``, ``layer``) so the CLI and tests read them without parsing text.
"""

from __future__ import annotations

__all__ = [
    "CkptgeoError",
    "InvalidParameterError",
    "SourceNotFoundError",
    "RevisionNotFoundError",
    "EmptySelectionError",
    "CorruptCheckpointError",
    "UnsafeFileError",
    "DamagedSourceError",
    "ArchitectureMismatchError",
    "NonFiniteActivationsError",
    "SuiteFormatError",
    "DiskSpaceError",
    "DatasetLayoutError",
    "OutputLockedError",
    "HubUnreachableError",
    "RunMismatchError",
    "DuplicateNameError",
    "PluginLoadError",
    "AnalysisStepError",
    "CkptgeoWarning",
    "DuplicateWeightsWarning",
    "ProbeConvergenceWarning",
    "NegativeCurvatureWarning",
    "ChainDivergenceWarning",
]


class CkptgeoError(Exception):
    """Base class of every error ckptgeo raises on purpose."""

    exit_code = 2


class InvalidParameterError(CkptgeoError, ValueError):
    """A parameter is out of its valid range or choices.

    Attributes: ``name`` (the parameter), ``value`` (what was received).
    """

    def __init__(self, message: str, *, name: str | None = None, value: object = None):
        super().__init__(message)
        self.name = name
        self.value = value


class SourceNotFoundError(CkptgeoError, LookupError):
    """A Hub repository or local checkpoint folder does not exist."""

    exit_code = 3

    def __init__(self, message: str, *, repo_id: str | None = None, path: str | None = None):
        super().__init__(message)
        self.repo_id = repo_id
        self.path = path


class RevisionNotFoundError(CkptgeoError, LookupError):
    """A requested revision is not among the source's revisions.

    Attributes: ``repo_id``, ``revision``, ``closest`` (existing revision names nearest to it).
    """

    exit_code = 3

    def __init__(self, message: str, *, repo_id: str | None = None, revision: str | None = None,
                 closest: tuple[str, ...] = ()):
        super().__init__(message)
        self.repo_id = repo_id
        self.revision = revision
        self.closest = closest


class EmptySelectionError(CkptgeoError, LookupError):
    """A revision selector matched no revision."""

    exit_code = 3


class CorruptCheckpointError(CkptgeoError, OSError):
    """A weight file is truncated, unreadable, missing or holds non-finite values.

    Attributes: ``revision``, ``path`` (the file).
    """

    exit_code = 4

    def __init__(self, message: str, *, revision: str | None = None, path: str | None = None):
        super().__init__(message)
        self.revision = revision
        self.path = path


class UnsafeFileError(CorruptCheckpointError):
    """Loading a file would run code from the input, so ckptgeo refuses it: a pickle (``*.bin``, ``*.pt``)
    that asks for more than tensors, numbers and containers (``torch.load(weights_only=True)`` fails on
    it), or a ``config.json`` / ``tokenizer_config.json`` whose ``auto_map`` needs the repository's own
    Python code (ckptgeo passes ``trust_remote_code=False``).

    Attributes: ``revision``, ``path`` (the file).
    """


class DamagedSourceError(CorruptCheckpointError):
    """A weight file is damaged as the source itself serves it: a Hub file whose bytes match the listing's sha256
    but do not form a valid checkpoint (truncated on the Hub), or whose safetensors header declares more bytes
    than the listing's size. Permanent while the source serves that commit: a new download gives the same bytes,
    so a scan records the revision as ``damaged`` (not ``failed``), a rerun does not retry it, ``ckptgeo status``
    does not ask for one, and the ``genuine`` selector leaves it out.

    Attributes: ``revision``, ``path`` (the file).
    """


class ArchitectureMismatchError(CkptgeoError, ValueError):
    """A revision's weights do not fit the model built for the first revision."""

    exit_code = 4

    def __init__(self, message: str, *, revision: str | None = None):
        super().__init__(message)
        self.revision = revision


class NonFiniteActivationsError(CkptgeoError, FloatingPointError):
    """NaN or inf in hidden states (or in a metric's input).

    Attributes: ``revision``, ``layer``, ``suite``.
    """

    exit_code = 4

    def __init__(self, message: str, *, revision: str | None = None, layer: int | None = None,
                 suite: str | None = None):
        super().__init__(message)
        self.revision = revision
        self.layer = layer
        self.suite = suite


class SuiteFormatError(CkptgeoError, ValueError):
    """A suite file is empty, malformed, or an item breaks the item schema.

    Attributes: ``path``, ``line`` (1-based, where known), ``field``.
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 field: str | None = None):
        super().__init__(message)
        self.path = path
        self.line = line
        self.field = field


class DiskSpaceError(CkptgeoError, OSError):
    """Not enough disk (or ``--max-disk`` budget) for the work asked.

    Attributes: ``needed`` and ``available`` in bytes.
    """

    exit_code = 5

    def __init__(self, message: str, *, needed: int | None = None, available: int | None = None):
        super().__init__(message)
        self.needed = needed
        self.available = available


class DatasetLayoutError(CkptgeoError, OSError):
    """An output folder is not a ckptgeo dataset, or was written by an incompatible version."""

    exit_code = 6

    def __init__(self, message: str, *, path: str | None = None):
        super().__init__(message)
        self.path = path


class OutputLockedError(CkptgeoError, OSError):
    """Another process holds the lock on this part of an output folder."""

    exit_code = 7

    def __init__(self, message: str, *, path: str | None = None):
        super().__init__(message)
        self.path = path


class HubUnreachableError(CkptgeoError, ConnectionError):
    """The Hub (``HF_ENDPOINT``) cannot be reached after retries."""

    exit_code = 8


class CkptgeoWarning(UserWarning):
    """Base class of ckptgeo's warnings: a result was produced but is suspect."""


class DuplicateWeightsWarning(CkptgeoWarning):
    """Two revisions hold byte-identical weights."""


class ProbeConvergenceWarning(CkptgeoWarning):
    """A probe's solver stopped before converging."""


class NegativeCurvatureWarning(CkptgeoWarning):
    """The Hessian has negative eigenvalues among those asked for."""


class ChainDivergenceWarning(CkptgeoWarning):
    """An SGLD chain of the LLC estimate diverged (NaN or inf loss) and was left out of the mean."""


class RunMismatchError(CkptgeoError, ValueError):
    """An output folder holds a training run with other settings than the ones asked for.

    Attributes: ``path`` (the run folder), ``differences`` (``(field, recorded, requested)`` tuples).
    """

    exit_code = 6

    def __init__(self, message: str, *, path: str | None = None, differences: tuple = ()):
        super().__init__(message)
        self.path = path
        self.differences = differences


class DuplicateNameError(CkptgeoError, ValueError):
    """Two different objects are registered under one name (a measure, source, suite loader or command).

    Attributes: ``name`` (the name registered twice). The message names both targets.
    """

    def __init__(self, message: str, *, name: str | None = None):
        super().__init__(message)
        self.name = name


class PluginLoadError(CkptgeoError, ImportError):
    """An installed package's entry point (``ckptgeo.metrics``, ``ckptgeo.sources`` ...) failed to load, or
    loaded without registering what it declares.

    Attributes: ``name`` (the registered name), ``entry_point`` (its ``module:object`` value).
    """

    def __init__(self, message: str, *, name: str | None = None, entry_point: str | None = None):
        super().__init__(message)
        self.name = name
        self.entry_point = entry_point


class AnalysisStepError(CkptgeoError, ValueError):
    """The analysis steps (or claim rows) do not fit together: a step reads a table no step writes and the
    dataset does not provide, two steps write one table, steps read each other's tables in a cycle, or a step
    returned other tables than it declares.

    Attributes: ``step`` (the step named first), ``table`` (the table at fault, where one is).
    """

    def __init__(self, message: str, *, step: str | None = None, table: str | None = None):
        super().__init__(message)
        self.step = step
        self.table = table
