"""Which :class:`~ckptgeo.sources.protocol.CheckpointSource` a source spec opens."""

from __future__ import annotations

from pathlib import Path

from ckptgeo.errors import SourceNotFoundError
from ckptgeo.sources.protocol import CheckpointSource

__all__ = ["open_source"]


def open_source(spec: str | Path, *, step_pattern: str | None = None, keep_cache: bool = False,
                cache_dir: str | Path | None = None) -> CheckpointSource:
    """A :class:`LocalSource` when ``spec`` is an existing folder, a :class:`FamilySource` for a list or
    brace pattern of repo ids (``org/pythia-160m-seed{1..3}``), else a :class:`HubSource` repo id.

    Raises
    ------
    SourceNotFoundError
        ``spec`` is neither an existing folder nor a valid repo id (e.g. a mistyped path).
    """
    pattern = step_pattern
    path = Path(spec).expanduser()
    if not path.is_dir() and (path.exists() or path.parent != Path(".") and path.parent.is_dir()):
        # "runs/nosuch" next to an existing runs/: a mistyped folder, not a Hub repo id
        raise SourceNotFoundError(f"{spec} is not a folder of step{{N}} checkpoints (its parent {path.parent} "
                                  f"exists locally); to use a Hub repo of that name, run from another directory",
                                  path=str(spec))
    if path.is_dir():
        from ckptgeo.sources.local import LocalSource

        return LocalSource(path, step_pattern=pattern)
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    from ckptgeo.sources.family import expand_family, is_family_spec

    if is_family_spec(str(spec)):
        for member in expand_family(str(spec)):
            try:
                validate_repo_id(member)
            except HFValidationError as err:
                raise SourceNotFoundError(f"{member!r} (in the family {spec}) is not a Hub repo id ('org/name')",
                                          path=str(spec)) from err
        from ckptgeo.sources.family import FamilySource

        return FamilySource(str(spec), step_pattern=pattern, keep_cache=keep_cache, cache_dir=cache_dir)

    try:
        validate_repo_id(str(spec))
    except HFValidationError as err:
        raise SourceNotFoundError(f"{spec} is not an existing checkpoint folder, nor a Hub repo id ('org/name')",
                                  path=str(spec)) from err
    from ckptgeo.sources.hub import HubSource

    return HubSource(str(spec), step_pattern=pattern, keep_cache=keep_cache, cache_dir=cache_dir)
