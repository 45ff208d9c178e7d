"""Build the model once, then swap each revision's weights into it.

:class:`ModelHolder` builds the architecture from the first revision's ``config.json`` and, for every
revision, opens the weight files (safetensors, sharded or not; PyTorch ``.bin`` as a fallback), checks
their names and shapes from the headers alone (complete, same tensor shapes), then streams them into
the existing parameters one tensor at a time, checking each is finite: no second full copy of the
weights is ever held. safetensors files are memory-mapped and read straight to the model's device
(``safe_open(device=...)``: on a GPU the bytes go from the page cache to device memory); ``.bin``
files load through :func:`ckptgeo._io.load_torch_safely` (``weights_only=True``: no pickle code runs),
whole, as that loader reads them. :func:`read_ahead` asks the kernel to start reading a folder's weight
files into the page cache, so the next revision's load reads memory, not disk.
Config fields that change no tensor shape are ignored.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ckptgeo._io import load_torch_safely
from ckptgeo.errors import ArchitectureMismatchError, CorruptCheckpointError, InvalidParameterError, UnsafeFileError
from ckptgeo.sources.weights import weight_shards

__all__ = ["ModelHolder", "LoadStats", "load_state_dict", "open_checkpoint", "read_ahead", "sha256_file",
           "DTYPES", "needs_own_code"]

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}
_SHAPE_FIELDS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                 "vocab_size", "num_key_value_heads")


def sha256_file(path: str | Path, chunk: int = 8 << 20) -> str:
    """Hex sha256 of a file, read in 8 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def load_state_dict(folder: str | Path, *, revision: str = "") -> dict[str, torch.Tensor]:
    """All tensors of the checkpoint in ``folder`` (on CPU, in their stored dtype), as one dict.

    Raises
    ------
    CorruptCheckpointError
        No weight file, a shard named by the index is missing, or a file cannot be parsed (truncated,
        corrupt); the message names the revision and the file.
    """
    with open_checkpoint(folder, revision=revision) as ckpt:
        return dict(ckpt.tensors())


class _Checkpoint:
    """The weight files of one checkpoint, opened: tensor names and shapes read from the headers, data
    read only by :meth:`tensors`. A context manager (closes the files)."""

    def __init__(self, files: list[Path], revision: str, device: torch.device):
        self.files, self.revision, self.device = files, revision, device
        self.stack = contextlib.ExitStack()
        self.handles: list[tuple[Path, object]] = []
        #: tensor name -> shape, over every file
        self.shapes: dict[str, tuple[int, ...]] = {}

    def __enter__(self) -> "_Checkpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.stack.close()

    def open(self) -> "_Checkpoint":
        from safetensors import safe_open

        for f in self.files:
            if not f.exists():
                raise CorruptCheckpointError(f"{self.revision}: weight file {f.name} is missing",
                                             revision=self.revision, path=str(f))
            try:
                if f.suffix == ".safetensors":
                    # safetensors reads CPU or CUDA devices directly; others (mps ...) go through the CPU
                    where = str(self.device) if self.device.type in ("cpu", "cuda") else "cpu"
                    handle = self.stack.enter_context(safe_open(str(f), framework="pt", device=where))
                    shapes = {k: tuple(handle.get_slice(k).get_shape()) for k in handle.keys()}
                else:
                    handle = load_torch_safely(f, label=f"{self.revision}: weight file ")
                    shapes = {k: tuple(t.shape) for k, t in handle.items()}
            except UnsafeFileError as err:
                raise UnsafeFileError(str(err), revision=self.revision, path=str(f)) from None
            except Exception as err:  # safetensors / torch raise many types on a truncated file
                raise CorruptCheckpointError(
                    f"{self.revision}: weight file {f} is damaged (truncated or corrupt; {type(err).__name__}: "
                    f"{err}); {damaged_file_advice(f)}", revision=self.revision, path=str(f)) from err
            self.handles.append((f, handle))
            self.shapes.update(shapes)
        return self

    def tensors(self, names=None):
        """(name, tensor) one at a time, in file order (only ``names`` when given); a tensor is read when
        it is reached, so at most one is held outside the model."""
        for f, handle in self.handles:
            keys = handle.keys() if names is None else [k for k in handle.keys() if k in names]
            for key in keys:
                try:
                    tensor = handle.get_tensor(key) if f.suffix == ".safetensors" else handle[key]
                except Exception as err:
                    raise CorruptCheckpointError(
                        f"{self.revision}: weight file {f} is damaged (tensor {key} unreadable; "
                        f"{type(err).__name__}: {err}); {damaged_file_advice(f)}", revision=self.revision,
                        path=str(f)) from err
                yield key, tensor


def open_checkpoint(folder: str | Path, *, revision: str = "", device: str | torch.device = "cpu") -> _Checkpoint:
    """The checkpoint in ``folder`` opened for streaming (names and shapes read, no tensor data yet).

    Raises
    ------
    CorruptCheckpointError
        No weight file, a shard named by the index is missing, or a file's header cannot be parsed
        (truncated, corrupt); the message names the revision and the file.
    """
    folder = Path(folder)
    files = weight_shards(folder, revision=revision)
    if not files:
        raise CorruptCheckpointError(f"{revision}: no weight file (*.safetensors or pytorch_model*.bin) in {folder}",
                                     revision=revision, path=str(folder))
    ckpt = _Checkpoint(files, revision, torch.device(device))
    try:
        return ckpt.open()
    except BaseException:
        ckpt.stack.close()
        raise


def read_ahead(folder: str | Path) -> int:
    """Ask the kernel to read ``folder``'s weight files into the page cache in the background
    (``posix_fadvise(WILLNEED)``); returns the bytes advised (0 where unsupported or nothing is there).
    Never raises: a read-ahead that cannot happen only leaves the load to read the disk itself."""
    advise = getattr(os, "posix_fadvise", None)
    total = 0
    try:
        files = weight_shards(folder)
    except (CorruptCheckpointError, OSError):
        return 0
    for f in files:
        try:
            fd = os.open(f, os.O_RDONLY)
        except OSError:
            continue
        try:
            size = os.fstat(fd).st_size
            if advise is not None:
                advise(fd, 0, size, os.POSIX_FADV_WILLNEED)
                total += size
        except OSError as err:
            log.debug("read-ahead of %s failed: %s", f, err)
        finally:
            os.close(fd)
    return total


def _all_finite(tensor: torch.Tensor) -> bool:
    """Whether every element is finite: the sum is (NaN and inf propagate into it), or, when the sum
    overflows, the element-wise check says so. The sum reads the tensor once without a mask the size of
    the tensor (about 15x faster than ``isfinite(t).all()`` on a CPU)."""
    return bool(torch.isfinite(tensor.sum())) or bool(torch.isfinite(tensor).all())


@dataclass(frozen=True)
class LoadStats:
    """One :meth:`ModelHolder.load`: ``bytes`` of weight files read and ``seconds`` taken (wall, from
    opening the files to the last tensor copied)."""

    bytes: int
    seconds: float

    @property
    def seconds_per_gb(self) -> float:
        """Seconds per 10^9 bytes read (inf for an empty load)."""
        return self.seconds / (self.bytes / 1e9) if self.bytes else float("inf")


def damaged_file_advice(path: str | Path) -> str:
    """What to do about a damaged weight file: a Hugging Face cache copy can be deleted and fetched again;
    a file in the user's own checkpoint folder must not be (it may be the only copy)."""
    parts = Path(path).parts
    if "snapshots" in parts and any(p.startswith("models--") for p in parts):
        return "delete it from the Hub cache and rerun to download it again"
    return "it is your checkpoint, not a cached copy: restore or re-save it, then rerun (ckptgeo never deletes it)"


class ModelHolder:
    """One causal LM instance reused across revisions.

    Parameters
    ----------
    device : str
        ``"cpu"``, ``"cuda"``, ``"cuda:1"`` ...
    dtype : {"float32", "float64", "bfloat16", "float16"}, default="float32"
        Dtype of the forward pass (metrics upcast; RankMe is never computed in half precision).
    """

    def __init__(self, *, device: str = "cpu", dtype: str = "float32"):
        if dtype not in DTYPES:
            raise InvalidParameterError(f"dtype must be one of {sorted(DTYPES)}; got {dtype!r}", name="dtype",
                                        value=dtype)
        self.device = torch.device(device)
        self.dtype = DTYPES[dtype]
        self.model: torch.nn.Module | None = None
        self.config = None
        self._renames: list | None = None
        self._last_config: tuple | None = None
        #: what the last :meth:`load` read and how long it took
        self.last_load: LoadStats | None = None

    def load(self, folder: str | Path, *, revision: str = "") -> torch.nn.Module:
        """Put the weights in ``folder`` into the model (building it on first use) and return it in eval mode.

        Raises
        ------
        CorruptCheckpointError
            Unreadable/missing weight file, or NaN/inf in a weight tensor (tensor named).
        ArchitectureMismatchError
            ``config.json`` changes a shape field, or a tensor's shape differs from the first revision's.
        """
        folder = Path(folder)
        config = self._config_of(folder, revision)
        if self.model is None:
            self._build(config)
        else:
            for f in _SHAPE_FIELDS:
                old, new = getattr(self.config, f, None), getattr(config, f, None)
                if old != new:
                    raise ArchitectureMismatchError(
                        f"{revision}: config field {f} is {new!r}, but the model was built with {old!r} from the "
                        f"first revision; scan differing architectures separately", revision=revision)
        t0 = time.perf_counter()
        with open_checkpoint(folder, revision=revision, device=self.device) as ckpt:
            names = self._rename_map(ckpt.shapes)
            params = dict(self.model.named_parameters())
            buffers = dict(self.model.named_buffers())
            for key, name in names.items():
                target = params.get(name, buffers.get(name))
                if target is not None and tuple(target.shape) != ckpt.shapes[key]:
                    raise ArchitectureMismatchError(
                        f"{revision}: tensor {name} has shape {ckpt.shapes[key]}, the model expects "
                        f"{tuple(target.shape)}", revision=revision)
            present = set(names.values())
            missing = [n for n in params if n not in present and not self._is_tied(n, present)]
            if missing:
                raise CorruptCheckpointError(
                    f"{revision}: {len(missing)} parameters missing from the weight files, e.g. {missing[:3]}",
                    revision=revision, path=str(folder))
            wanted = {k for k, n in names.items() if n in params or n in buffers}
            with torch.no_grad():
                # a NaN found part way leaves earlier tensors copied: the revision fails, and the next load
                # overwrites every parameter (all are required above)
                for key, tensor in ckpt.tensors(wanted):
                    target = params.get(names[key], buffers.get(names[key]))
                    target.copy_(tensor)
                    del tensor
                    if target.is_floating_point() and not _all_finite(target):
                        raise CorruptCheckpointError(f"{revision}: weight tensor {names[key]} holds NaN or inf",
                                                     revision=revision, path=str(folder))
                self._retie()
            nbytes = sum(f.stat().st_size for f, _ in ckpt.handles)
        self.last_load = LoadStats(nbytes, time.perf_counter() - t0)
        return self.model

    def build(self, folder: str | Path, *, revision: str = "") -> None:
        """Build the model from ``folder/config.json`` alone (no weights read), fixing the architecture every
        revision loaded later must match; a no-op once the model exists.

        Raises
        ------
        CorruptCheckpointError
            ``config.json`` is missing or unreadable.
        """
        if self.model is None:
            self._build(self._config_of(Path(folder), revision))

    def _config_of(self, folder: Path, revision: str):
        """``folder``'s config, read once when :meth:`build` and then :meth:`load` ask for the same folder (one
        read, one warning)."""
        if self._last_config is not None and self._last_config[0] == folder:
            return self._last_config[1]
        config = _read_config(folder, revision)
        self._last_config = (folder, config)
        return config

    def _build(self, config) -> None:
        from transformers import AutoModelForCausalLM

        self.config = config
        self.model = AutoModelForCausalLM.from_config(config, dtype=self.dtype, trust_remote_code=False)
        self.model.to(self.device).eval()

    def _rename_map(self, keys) -> dict[str, str]:
        """Checkpoint key -> the model's name, with transformers' own renaming rules (e.g. GPT-NeoX's
        ``embed_out`` is ``lm_head`` in transformers 5). Rules other than pure renames are not applied."""
        if self._renames is None:
            try:
                from transformers.conversion_mapping import get_model_conversion_mapping
                from transformers.core_model_loading import WeightRenaming

                rules = [t for t in get_model_conversion_mapping(self.model) if type(t) is WeightRenaming]
                self._renames = [(re.compile(src), tgt) for t in rules
                                 for src, tgt in zip(t.source_patterns, t.target_patterns * len(t.source_patterns))]
            except ImportError:  # transformers 4: keys already match
                self._renames = []
        own = set(self.model.state_dict())
        out = {}
        for key in keys:
            name = key
            if key not in own:
                for pattern, target in self._renames:
                    new = pattern.sub(target, key)
                    if new != key and new in own:
                        name = new
                        break
            out[key] = name
        return out

    def _is_tied(self, name: str, present) -> bool:
        if not getattr(self.config, "tie_word_embeddings", False):
            return False
        out = self.model.get_output_embeddings()
        return out is not None and name.startswith(_module_name(self.model, out))

    def _retie(self) -> None:
        if getattr(self.config, "tie_word_embeddings", False) and hasattr(self.model, "tie_weights"):
            self.model.tie_weights()


def _read_config(folder: Path, revision: str):
    from transformers import AutoConfig

    if not (folder / "config.json").is_file():
        raise CorruptCheckpointError(f"{revision}: config.json is missing from {folder} (every checkpoint folder "
                                     f"needs the model's config.json)", revision=revision,
                                     path=str(folder / "config.json"))
    try:
        config = AutoConfig.from_pretrained(folder, trust_remote_code=False)  # never a prompt, never its code
    except Exception as err:
        own = needs_own_code(folder)
        if own is not None:
            raise UnsafeFileError(f"{revision}: the repository needs its own code ({own}), which ckptgeo does not "
                                  f"run; only architectures built into transformers can be measured",
                                  revision=revision, path=str(folder / "config.json")) from None
        raise CorruptCheckpointError(f"{revision}: unreadable config.json in {folder}: {err}",
                                     revision=revision, path=str(folder / "config.json")) from err
    own = needs_own_code(folder)
    if own is not None:
        log.warning("%s: the repository names its own code (%s), which ckptgeo does not run; it is measured as the "
                    "built-in %r architecture its config.json names", revision, own, config.model_type)
    return config


def needs_own_code(folder: str | Path) -> str | None:
    """What in ``folder`` asks transformers to import the repository's own Python code: the first
    ``auto_map`` entry of its ``config.json`` or ``tokenizer_config.json`` (``"config.json auto_map:
    modeling_x.XForCausalLM"``), or None. ckptgeo never runs such code (``trust_remote_code=False``)."""
    for name in ("config.json", "tokenizer_config.json"):
        try:
            data = json.loads((Path(folder) / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        auto = data.get("auto_map") if isinstance(data, dict) else None
        if auto:
            first = next(iter(auto.values()), None) if isinstance(auto, dict) else auto
            if isinstance(first, (list, tuple)):
                first = next((f for f in first if f), None)
            return f"{name} auto_map: {first}"
    return None


def _module_name(model: torch.nn.Module, module: torch.nn.Module) -> str:
    for name, m in model.named_modules():
        if m is module:
            return name
    return "\0"
