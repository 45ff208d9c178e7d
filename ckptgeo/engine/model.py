"""Build the model once, then swap each revision's weights into it.

:class:`ModelHolder` builds the architecture from the first revision's ``config.json`` and, for every
revision, reads the weight files (safetensors, sharded or not; PyTorch ``.bin`` as a fallback), checks
them (readable, complete, finite, same tensor shapes) and copies them into the existing parameters.
Config fields that change no tensor shape are ignored.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path

import torch

from ckptgeo._io import load_torch_safely
from ckptgeo.errors import ArchitectureMismatchError, CorruptCheckpointError, InvalidParameterError, UnsafeFileError
from ckptgeo.sources.weights import weight_shards

__all__ = ["ModelHolder", "load_state_dict", "sha256_file", "DTYPES", "needs_own_code"]

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
    """All tensors of the checkpoint in ``folder`` (on CPU, in their stored dtype).

    Raises
    ------
    CorruptCheckpointError
        No weight file, a shard named by the index is missing, or a file cannot be parsed (truncated,
        corrupt); the message names the revision and the file.
    """
    from safetensors.torch import load_file

    folder = Path(folder)
    files = weight_shards(folder, revision=revision)
    if not files:
        raise CorruptCheckpointError(f"{revision}: no weight file (*.safetensors or pytorch_model*.bin) in {folder}",
                                     revision=revision, path=str(folder))
    state: dict[str, torch.Tensor] = {}
    for f in files:
        if not f.exists():
            raise CorruptCheckpointError(f"{revision}: weight file {f.name} is missing", revision=revision,
                                         path=str(f))
        try:
            if f.suffix == ".safetensors":
                state.update(load_file(str(f)))
            else:
                state.update(load_torch_safely(f, label=f"{revision}: weight file "))
        except UnsafeFileError as err:
            raise UnsafeFileError(str(err), revision=revision, path=str(f)) from None
        except Exception as err:  # safetensors / pickle raise many types on a truncated file
            raise CorruptCheckpointError(
                f"{revision}: weight file {f} is damaged (truncated or corrupt; {type(err).__name__}: {err}); "
                f"{damaged_file_advice(f)}", revision=revision, path=str(f)) from err
    return state


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
        config = _read_config(folder, revision)
        if self.model is None:
            self._build(config)
        else:
            for f in _SHAPE_FIELDS:
                old, new = getattr(self.config, f, None), getattr(config, f, None)
                if old != new:
                    raise ArchitectureMismatchError(
                        f"{revision}: config field {f} is {new!r}, but the model was built with {old!r} from the "
                        f"first revision; scan differing architectures separately", revision=revision)
        state = self._rename(load_state_dict(folder, revision=revision))
        params = dict(self.model.named_parameters())
        buffers = dict(self.model.named_buffers())
        for name, tensor in state.items():
            target = params.get(name, buffers.get(name))
            if target is None:
                continue  # stale buffers of old checkpoints (e.g. attention.bias masks)
            if tuple(target.shape) != tuple(tensor.shape):
                raise ArchitectureMismatchError(
                    f"{revision}: tensor {name} has shape {tuple(tensor.shape)}, the model expects "
                    f"{tuple(target.shape)}", revision=revision)
            if tensor.is_floating_point() and not torch.isfinite(tensor).all():
                raise CorruptCheckpointError(f"{revision}: weight tensor {name} holds NaN or inf",
                                             revision=revision, path=str(folder))
        missing = [n for n in params if n not in state and not self._is_tied(n, state)]
        if missing:
            raise CorruptCheckpointError(
                f"{revision}: {len(missing)} parameters missing from the weight files, e.g. {missing[:3]}",
                revision=revision, path=str(folder))
        with torch.no_grad():
            for name, tensor in state.items():
                target = params.get(name, buffers.get(name))
                if target is not None:
                    target.copy_(tensor.to(dtype=target.dtype))
            self._retie()
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
            self._build(_read_config(Path(folder), revision))

    def _build(self, config) -> None:
        from transformers import AutoModelForCausalLM

        self.config = config
        self.model = AutoModelForCausalLM.from_config(config, dtype=self.dtype, trust_remote_code=False)
        self.model.to(self.device).eval()

    def _rename(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Map checkpoint key names to the model's, with transformers' own renaming rules (e.g. GPT-NeoX's
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
        for key, tensor in state.items():
            if key not in own:
                for pattern, target in self._renames:
                    new = pattern.sub(target, key)
                    if new != key and new in own:
                        key = new
                        break
            out[key] = tensor
        return out

    def _is_tied(self, name: str, state: dict) -> bool:
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
        return AutoConfig.from_pretrained(folder, trust_remote_code=False)  # never a prompt, never its code
    except Exception as err:
        own = needs_own_code(folder)
        if own is not None:
            raise UnsafeFileError(f"{revision}: the repository needs its own code ({own}), which ckptgeo does not "
                                  f"run; only architectures built into transformers can be measured",
                                  revision=revision, path=str(folder / "config.json")) from None
        raise CorruptCheckpointError(f"{revision}: unreadable config.json in {folder}: {err}",
                                     revision=revision, path=str(folder / "config.json")) from err


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
