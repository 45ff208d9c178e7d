#!/usr/bin/env python
"""Build a git repository of a small GPT-NeoX model with one branch per training step.

The repository looks like an EleutherAI Pythia repo on the Hugging Face Hub: branches ``step0``,
``step1``, ... ``step{N}`` each hold a full checkpoint, ``main`` is the last step. Served by
``scripts/olah_local.py`` it is what ckptgeo's tests scan over real HTTP. Weights are random but
seeded (no training): every step differs from every other, byte for byte, unless asked otherwise.

Layout written (a *bare* repository; weights stored as git-lfs objects by default, written
directly, so git-lfs need not be installed)::

    <path>/                              # e.g. <mirrors>/models/testorg/pythia-tiny
    ├── HEAD -> refs/heads/main
    ├── refs/heads/main, step0, step1, ...
    ├── objects/...                      # small files, and LFS pointer blobs
    └── lfs/objects/aa/bb/<sha256>       # model.safetensors of each distinct checkpoint

Tree of every branch (as on the Hub)::

    .gitattributes  README.md  config.json  generation_config.json  model.safetensors
    special_tokens_map.json  tokenizer.json  tokenizer_config.json

Fault injection for tests: ``duplicate`` makes a branch serve byte-identical weights of another
(as many pythia-2.8b branches do); ``arch_changed`` branches have one more layer; ``config_tweak``
branches change config fields that alter no shape; ``corrupt`` branches serve a truncated
``model.safetensors``. Names not in ``steps`` are added as extra branches.

Examples
--------
>>> from scripts.make_test_repo import make_test_repo           # doctest: +SKIP
>>> repo = make_test_repo("/tmp/m/models/testorg/pythia-tiny",   # doctest: +SKIP
...                       duplicate={"step3000": "step2000"})
>>> repo.commits["main"] == repo.commits["step3000"]           # doctest: +SKIP
True

CLI::

    python scripts/make_test_repo.py /tmp/mirrors/models/testorg/pythia-tiny
    python scripts/make_test_repo.py /tmp/m/models/testorg/pythia-70m-like --shape pythia-70m \\
        --steps 0,1000,2000 --duplicate step3000=step2000 --corrupt step4000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Mapping, Optional, Sequence, Union

__all__ = ["ModelShape", "SHAPES", "DEFAULT_STEPS", "CheckpointRepo", "make_test_repo", "train_tokenizer", "main"]

#: the steps built by default: step0, the powers of two up to 64, then every 1000 up to 3000.
DEFAULT_STEPS: tuple[int, ...] = (0, 1, 2, 4, 8, 16, 32, 64, 1000, 2000, 3000)
_STEP_RE = re.compile(r"^step(\d+)$")
#: commit dates are fixed so that the same inputs give the same commit hashes.
_EPOCH = 1_672_531_200   # 2023-01-01T00:00:00Z


@dataclass(frozen=True)
class ModelShape:
    """Shape of the GPT-NeoX model stored on every branch.

    Parameters
    ----------
    vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size : int
        As in ``transformers.GPTNeoXConfig``.
    dtype : {"float32", "float16"}
        Storage dtype of the weights (Pythia checkpoints are float16).
    max_position_embeddings : int
        Context length (rotary embeddings, so it adds no parameters).
    """

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    dtype: str = "float32"
    max_position_embeddings: int = 2048


#: named shapes: ``tiny`` for fast tests (about 0.25 MB per checkpoint), ``pythia-70m``
#: (EleutherAI/pythia-70m's config, 141 MB per checkpoint in float16) and ``pythia-2.8b`` for benchmarks.
SHAPES: Mapping[str, ModelShape] = MappingProxyType({
    "tiny": ModelShape(vocab_size=512, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=128, dtype="float32"),
    "pythia-70m": ModelShape(vocab_size=50304, hidden_size=512, num_hidden_layers=6, num_attention_heads=8,
                             intermediate_size=2048, dtype="float16"),
    # EleutherAI/pythia-160m's config: 325 MB per checkpoint in float16
    "pythia-160m": ModelShape(vocab_size=50304, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                              intermediate_size=3072, dtype="float16"),
    # EleutherAI/pythia-2.8b's config: 5.6 GB per checkpoint in float16 (for GPU machines)
    "pythia-2.8b": ModelShape(vocab_size=50304, hidden_size=2560, num_hidden_layers=32, num_attention_heads=32,
                              intermediate_size=10240, dtype="float16"),
})


@dataclass(frozen=True)
class CheckpointRepo:
    """What :func:`make_test_repo` built.

    Attributes
    ----------
    path : Path
        The bare git repository.
    commits : Mapping[str, str]
        Branch name -> commit sha (40 hex), every branch including ``main``.
    steps : tuple of int
        Steps of all ``step{N}`` branches, sorted (extra fault branches included).
    weight_sha256 : Mapping[str, str]
        Branch -> sha256 (hex) of its ``model.safetensors`` as served.
    weight_bytes : Mapping[str, int]
        Branch -> size in bytes of its ``model.safetensors`` as served.
    duplicates : Mapping[str, str]
        Branch -> the branch whose weights it serves byte for byte.
    arch_changed, config_tweak, corrupt : tuple of str
        Branches built with one more layer / shape-neutral config changes / truncated weights.
    shape : ModelShape
        The model shape of the regular branches.
    lfs : bool
        Whether weights are git-lfs objects (then the Hub API reports their sha256).
    """

    path: Path
    commits: Mapping[str, str]
    steps: tuple[int, ...]
    weight_sha256: Mapping[str, str]
    weight_bytes: Mapping[str, int]
    duplicates: Mapping[str, str]
    arch_changed: tuple[str, ...]
    config_tweak: tuple[str, ...]
    corrupt: tuple[str, ...]
    shape: ModelShape
    lfs: bool

    @property
    def repo_id(self) -> str:
        """``<org>/<name>``: the Hub id when ``path`` is ``<mirrors>/models/<org>/<name>``."""
        return f"{self.path.parent.name}/{self.path.name}"


# --------------------------------------------------------------------------------------------------
# tokenizer
# --------------------------------------------------------------------------------------------------
# A small English corpus written for this script (plain prose about objects, orderings, people and
# places), so that English prompts such as BIG-bench's logical-deduction items split into plausible
# subwords. Benchmark text itself is deliberately not used for training.
_CORPUS = """\
The old library on the corner of the square keeps its books on tall wooden shelves. On the lowest
shelf there is a red book, a green book and a blue book, and the green one is always to the left of
the others. A visitor who reads the titles from left to right finds the newest book at the far right
and the oldest book at the far left. The librarian says that every book has its own place in a fixed
order, and that she can tell which one is missing just by looking at the gaps between them.
In the park, five birds sat on a branch of the oak tree: a robin, an owl, a crow, a hawk and a quail.
The owl was the second from the left, the crow sat to the right of the hawk, and the robin was the
rightmost bird of all. Children counted them again and again, first from the left and then from the
right, until they agreed on the order.
At the golf tournament on Sunday, Amy finished above Eli, and Eve finished below Joe. Ana finished
third, which surprised everyone, because she had finished last the year before. Rob and Mel were tied
for a while, but in the end Rob finished first and Mel finished second. The results were written on
a white board near the gate so that the players could compare their scores.
The antique shop sells a clock, a lamp, a mirror, a chair and a small table. The clock is older than
the lamp, the mirror is the newest item in the store, and the table is the cheapest thing you can
buy there. The most expensive item is the chair, which is two hundred years old. The owner knows the
age and the price of every object, and he explains the history of each one to curious customers.
A fruit stand at the market sells apples, oranges, peaches, pears, plums, mangoes and watermelons.
The apples cost less than the oranges, the mangoes are more expensive than the peaches, and the
plums are the cheapest fruit of the day. The watermelons are the largest and the heaviest, so they
are placed on the ground below the table rather than on top of it.
In the garage there are several vehicles: a truck, a bus, a sedan, a tractor, a motorcycle, a
convertible and a station wagon. The truck is newer than the bus, the tractor is the oldest vehicle,
and the convertible is the second newest. Each vehicle is parked in a row, and the mechanic can tell
you which one is to the left of which without looking.
Logical reasoning means drawing conclusions that must be true when the statements are true. If the
yellow ball is to the right of the purple ball, and the purple ball is to the right of the brown
ball, then the brown ball is the leftmost of the three. If one statement says that a gray cat is
older than a black cat, and another says that the black cat is older than an orange cat, then the
gray cat is the oldest. Questions about order can be answered by placing the objects one by one.
The weather was cold in the morning and warm in the afternoon. People walked along the river,
talked about their work, and bought bread, milk, cheese and coffee from the shops near the bridge.
In the evening the town was quiet, the lights in the windows went on one after another, and the
last train left the station at eleven o'clock. Tomorrow the market will open again at seven.
Language models read text as a sequence of tokens and predict the next token from the ones before
it. During training, the model sees many examples, its parameters change step by step, and its
internal representations become richer. Researchers save checkpoints at regular steps so that they
can study how the model learns: which abilities appear early, which appear late, and how the
geometry of the hidden states changes along the way.
Numbers such as one, two, three, four, five, six, seven, eight, nine and ten appear often in
ordinary writing, as do words like first, second, third, fourth, fifth, last, next, before, after,
above, below, left, right, top, bottom, newest, oldest, cheapest and most expensive.
"""

SPECIAL_TOKENS = ("<|endoftext|>", "<|padding|>")


def train_tokenizer(vocab_size: int = 512):
    """Train a byte-level BPE tokenizer on the built-in English corpus (deterministic, ~0.1 s).

    Parameters
    ----------
    vocab_size : int, default=512
        Target vocabulary size, including the 256 byte symbols and the special tokens
        ``<|endoftext|>`` (id 0) and ``<|padding|>`` (id 1), as in Pythia.

    Returns
    -------
    tokenizers.Tokenizer
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_CORPUS.splitlines(), trainer)
    return tok


def _tokenizer_files(vocab_size: int) -> dict[str, bytes]:
    """tokenizer.json and Pythia-like tokenizer_config.json / special_tokens_map.json."""
    tok = train_tokenizer(vocab_size)
    eot = SPECIAL_TOKENS[0]
    # Pythia's tokenizer defines no pad token; <|padding|> exists (id 1) but is not declared as pad.
    special = {"bos_token": eot, "eos_token": eot, "unk_token": eot}
    config = {**special, "add_prefix_space": False, "model_max_length": 2048,
              "tokenizer_class": "GPTNeoXTokenizer", "clean_up_tokenization_spaces": False}
    return {
        "tokenizer.json": tok.to_str(pretty=True).encode(),
        "tokenizer_config.json": _json(config),
        "special_tokens_map.json": _json(special),
    }


# --------------------------------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------------------------------
def _config(shape: ModelShape, *, extra_layer: bool = False, tweak: bool = False) -> dict:
    """A Pythia-style config.json (the keys EleutherAI's repos use)."""
    cfg = {
        "architectures": ["GPTNeoXForCausalLM"],
        "bos_token_id": 0,
        "eos_token_id": 0,
        "hidden_act": "gelu",
        "hidden_size": shape.hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": shape.intermediate_size,
        "layer_norm_eps": 1e-05,
        "max_position_embeddings": shape.max_position_embeddings,
        "model_type": "gpt_neox",
        "num_attention_heads": shape.num_attention_heads,
        "num_hidden_layers": shape.num_hidden_layers + (1 if extra_layer else 0),
        "rotary_emb_base": 10000,
        "rotary_pct": 0.25,
        "tie_word_embeddings": False,
        "torch_dtype": shape.dtype,
        "transformers_version": "4.24.0",
        "use_cache": True,
        "use_parallel_residual": True,
        "vocab_size": shape.vocab_size,
    }
    if tweak:   # fields that change no tensor shape
        cfg.update(use_cache=False, transformers_version="4.30.0", layer_norm_eps=1e-06)
    return cfg


def _tensor_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Names and shapes of ``GPTNeoXForCausalLM.state_dict()`` for ``config`` (checked by the tests)."""
    h, f, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    shapes = {"gpt_neox.embed_in.weight": (v, h)}
    for i in range(config["num_hidden_layers"]):
        p = f"gpt_neox.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (h,), p + "input_layernorm.bias": (h,),
            p + "post_attention_layernorm.weight": (h,), p + "post_attention_layernorm.bias": (h,),
            p + "attention.query_key_value.weight": (3 * h, h), p + "attention.query_key_value.bias": (3 * h,),
            p + "attention.dense.weight": (h, h), p + "attention.dense.bias": (h,),
            p + "mlp.dense_h_to_4h.weight": (f, h), p + "mlp.dense_h_to_4h.bias": (f,),
            p + "mlp.dense_4h_to_h.weight": (h, f), p + "mlp.dense_4h_to_h.bias": (h,),
        })
    shapes.update({"gpt_neox.final_layer_norm.weight": (h,), "gpt_neox.final_layer_norm.bias": (h,),
                   "embed_out.weight": (v, h)})
    return shapes


def _weights(config: dict, seed: int, shards: int = 1) -> dict[str, bytes]:
    """Weight files of a GPT-NeoX with seeded random weights: ``{"model.safetensors": bytes}``, or with
    ``shards > 1`` the files ``model-0000K-of-0000S.safetensors`` plus ``model.safetensors.index.json``
    (as ``save_pretrained`` shards them)."""
    if shards <= 1:
        return {"model.safetensors": _weights_one(config, seed)}
    import numpy as np
    from safetensors.numpy import load, save

    tensors = load(_weights_one(config, seed))
    names = sorted(tensors)
    files, weight_map, total = {}, {}, 0
    for k in range(shards):
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[k::shards]}
        files[fname] = save(part, metadata={"format": "pt"})
        weight_map.update({n: fname for n in part})
        total += sum(int(np.asarray(t).nbytes) for t in part.values())
    files["model.safetensors.index.json"] = _json({"metadata": {"total_size": total}, "weight_map": weight_map})
    return files


def _weights_one(config: dict, seed: int) -> bytes:
    """Serialized safetensors of a GPT-NeoX with seeded random weights (every tensor seed-dependent).

    numpy rather than torch keeps the build free of torch/transformers imports (~2 s saved).
    """
    import numpy as np
    from safetensors.numpy import save

    rng = np.random.default_rng(seed)
    dtype = np.dtype(config["torch_dtype"])
    tensors = {}
    for name, shape in _tensor_shapes(config).items():
        if name.endswith("weight") and "norm" in name:
            mean, std = 1.0, 0.05        # layer-norm gains
        elif name.endswith("weight"):
            mean, std = 0.0, 0.02        # matrices and embeddings
        else:
            mean, std = 0.0, 0.01        # biases
        t = rng.standard_normal(shape, dtype=np.float32)
        t *= std
        t += mean
        tensors[name] = np.ascontiguousarray(t.astype(dtype, copy=False))
    return save(tensors, metadata={"format": "pt"})


# --------------------------------------------------------------------------------------------------
# git plumbing (no working tree, no git-lfs)
# --------------------------------------------------------------------------------------------------
def _json(obj) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


class _Git:
    def __init__(self, path: Path):
        self.path = path
        self.env = {**os.environ, "GIT_AUTHOR_NAME": "ckptgeo-tests", "GIT_AUTHOR_EMAIL": "tests@ckptgeo.invalid",
                    "GIT_COMMITTER_NAME": "ckptgeo-tests", "GIT_COMMITTER_EMAIL": "tests@ckptgeo.invalid",
                    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}

    def __call__(self, *args: str, data: Optional[bytes] = None, env: Optional[dict] = None) -> str:
        done = subprocess.run(["git", "--git-dir", str(self.path), *args], input=data, capture_output=True,
                              env={**self.env, **(env or {})})
        if done.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)} failed: {done.stderr.decode(errors='replace')}")
        return done.stdout.decode().strip()

    def blob(self, data: bytes) -> str:
        return self("hash-object", "-w", "--stdin", data=data)

    def tree(self, files: Mapping[str, str]) -> str:
        lines = "".join(f"100644 blob {sha}\t{name}\n" for name, sha in sorted(files.items()))
        return self("mktree", data=lines.encode())

    def commit(self, tree: str, message: str, parent: Optional[str], when: int) -> str:
        date = f"{when} +0000"
        args = ["commit-tree", tree, "-m", message] + (["-p", parent] if parent else [])
        return self(*args, env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})


def _store_weights(git: _Git, data: bytes, lfs: bool) -> str:
    """Write ``data`` as a blob (or an LFS object plus pointer blob); return the blob sha."""
    if not lfs:
        return git.blob(data)
    oid = hashlib.sha256(data).hexdigest()
    obj = git.path / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
    if not obj.exists():
        obj.parent.mkdir(parents=True, exist_ok=True)
        tmp = obj.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, obj)
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {len(data)}\n"
    return git.blob(pointer.encode())


_GITATTRIBUTES = "".join(f"{pattern} filter=lfs diff=lfs merge=lfs -text\n"
                         for pattern in ("*.bin", "*.safetensors", "*.pt", "*.h5", "*.ckpt"))


def _readme(name: str, shape: ModelShape) -> bytes:
    return (f"---\nlicense: apache-2.0\nlibrary_name: transformers\ntags:\n- ckptgeo-test\n---\n"
            f"# {name}\n\nA randomly initialised GPT-NeoX ({shape.num_hidden_layers} layers, d_model "
            f"{shape.hidden_size}, vocab {shape.vocab_size}, {shape.dtype}) built by ckptgeo's "
            f"scripts/make_test_repo.py. One branch per step; `main` is the last step. Not trained.\n").encode()


def _step_of(branch: str) -> Optional[int]:
    m = _STEP_RE.match(branch)
    return int(m.group(1)) if m else None


def make_test_repo(
    path: Union[str, os.PathLike],
    *,
    steps: Sequence[int] = DEFAULT_STEPS,
    shape: Union[str, ModelShape] = "tiny",
    seed: int = 0,
    duplicate: Optional[Mapping[str, str]] = None,
    arch_changed: Sequence[str] = (),
    config_tweak: Sequence[str] = (),
    corrupt: Sequence[str] = (),
    lfs: bool = True,
    branches: Optional[Sequence[str]] = None,
    weightless: Sequence[str] = (),
    shards: int = 1,
    share_shard: Optional[Mapping[str, str]] = None,
    subfolders: Sequence[str] = (),
    main: Optional[str] = None,
) -> CheckpointRepo:
    """Build a bare git repository with one GPT-NeoX checkpoint per ``step{N}`` branch.

    Parameters
    ----------
    path : path-like
        Where to create the repository; must not exist or be an empty directory. To serve it with
        ``scripts/olah_local.py``, use ``<mirrors>/models/<org>/<name>``.
    steps : sequence of int, default=DEFAULT_STEPS
        One branch ``step{N}`` per step, weights seeded by ``(seed, N)``. ``main`` points at the
        commit of the largest step.
    shape : {"tiny", "pythia-70m", "pythia-2.8b"} or ModelShape, default="tiny"
        Model shape (see :data:`SHAPES`).
    seed : int, default=0
        Base seed; the same inputs give byte-identical weights and the same commit hashes.
    duplicate : mapping of str to str, optional
        ``{"step3000": "step2000"}``: branch ``step3000`` serves the exact weights (and config) of
        ``step2000``. The source must be a regular branch.
    arch_changed : sequence of str, default=()
        Branches whose model has one more layer (config and weights agree).
    config_tweak : sequence of str, default=()
        Branches whose config.json differs in fields that change no shape (``use_cache``,
        ``layer_norm_eps``, ``transformers_version``).
    corrupt : sequence of str, default=()
        Branches whose ``model.safetensors`` is cut to half its length (valid header, missing data).
    lfs : bool, default=True
        Store weights as git-lfs objects, as the Hub does, so ``model_info(files_metadata=True)``,
        ``list_repo_tree`` and ``get_paths_info`` report their sha256. ``False`` stores plain blobs
        (then the Hub API gives sizes and git blob ids only).
    branches : sequence of str, optional
        Names of the regular branches instead of ``step{N}`` (another suite's naming, e.g. OLMo-2's
        ``stage1-step1000-tokens5B``); weights seeded by the name; ``main`` is the last one given.
    weightless : sequence of str, default=()
        Branches with config and tokenizer but no weight file (pythia#107).
    shards : int, default=1
        Weight files per checkpoint: above 1, ``model-0000K-of-0000S.safetensors`` plus an index.
    share_shard : mapping of str to str, optional
        ``{"step3000": "step2000"}`` (with ``shards > 1``): branch ``step3000``'s first shard is byte for
        byte ``step2000``'s; the other shards are its own (pythia#206).
    subfolders : sequence of str, default=()
        Instead of branches, one ``main`` commit holding a full checkpoint in each of these folders
        (a Trainer's ``checkpoint-{N}/``), tokenizer files at the top level.
    main : str, optional
        The regular branch whose commit ``main`` points at (default: the last one). ``main="step0"`` with
        duplicates of ``step0`` builds pythia#205's hazard: early branches serving ``main``'s weights, which
        are not the last step's.

    Returns
    -------
    CheckpointRepo
        Branch -> commit mapping, steps, per-branch weight sha256 and sizes.

    Raises
    ------
    ValueError
        If ``steps`` is empty or has negatives, a fault branch name is not a valid branch name, a
        duplicate's source is not a regular step branch, or ``path`` is a non-empty directory.
    RuntimeError
        If a git command fails.
    """
    shape = SHAPES[shape] if isinstance(shape, str) else shape
    duplicate = dict(duplicate or {})
    share_shard = dict(share_shard or {})
    if branches is not None:
        regular = list(dict.fromkeys(branches))
        if not regular:
            raise ValueError("branches must name at least one branch.")
    else:
        steps = sorted(set(int(s) for s in steps))
        if not steps or steps[0] < 0:
            raise ValueError(f"steps must be a non-empty list of non-negative ints; got {steps!r}.")
        regular = [f"step{s}" for s in steps]
    for src in [*duplicate.values(), *share_shard.values()]:
        if src not in regular or src in duplicate:
            raise ValueError(f"duplicate source {src!r} must be one of the regular step branches {regular}.")
    if share_shard and shards < 2:
        raise ValueError("share_shard needs shards >= 2.")
    special = [*duplicate, *arch_changed, *config_tweak, *corrupt, *weightless, *share_shard]
    for name in [*special, *regular]:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or name == "main":
            raise ValueError(f"invalid branch name {name!r}.")
    path = Path(path)
    if path.exists() and any(path.iterdir()):
        raise ValueError(f"{path} exists and is not empty; choose a new path.")
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(path)], check=True, capture_output=True)
    git = _Git(path)

    tokenizer = _tokenizer_files(vocab_size=min(shape.vocab_size, 512))
    common = {name: git.blob(data) for name, data in tokenizer.items()}
    common["README.md"] = git.blob(_readme(path.name, shape))
    common["generation_config.json"] = git.blob(_json({"_from_model_config": True, "bos_token_id": 0,
                                                       "eos_token_id": 0, "transformers_version": "4.24.0"}))
    if lfs:
        common[".gitattributes"] = git.blob(_GITATTRIBUTES.encode())
    configs = {}

    def config_blob(extra_layer=False, tweak=False):
        key = (extra_layer, tweak)
        if key not in configs:
            cfg = _config(shape, extra_layer=extra_layer, tweak=tweak)
            configs[key] = (cfg, git.blob(_json(cfg)))
        return configs[key]

    root = git.commit(git.tree({**common, "config.json": config_blob()[1]}), "Initial commit: tokenizer and config",
                      None, _EPOCH)

    def step_seed(branch: str) -> int:
        step = _step_of(branch) if branches is None else None
        ident = step if step is not None else int(hashlib.sha256(branch.encode()).hexdigest()[:8], 16)
        return seed * 1_000_003 + ident

    def main_weights(files: Mapping[str, bytes]) -> bytes:
        return files.get("model.safetensors") or files[min(n for n in files if n.endswith(".safetensors"))]

    if subfolders:
        tree_files, sha256, nbytes = dict(common), {}, {}
        for folder in subfolders:
            cfg, cfg_blob = config_blob()
            files = _weights(cfg, step_seed(folder), shards)
            tree_files[f"{folder}/config.json"] = cfg_blob
            for fname, data in files.items():
                tree_files[f"{folder}/{fname}"] = _store_weights(git, data, lfs) if fname.endswith(
                    ".safetensors") else git.blob(data)
            sha256[folder] = hashlib.sha256(main_weights(files)).hexdigest()
            nbytes[folder] = len(main_weights(files))
        commit = git.commit(_nested_tree(git, tree_files), "Trainer checkpoints", root, _EPOCH + 60)
        git("update-ref", "refs/heads/main", commit)
        git("symbolic-ref", "HEAD", "refs/heads/main")
        return CheckpointRepo(
            path=path, commits=MappingProxyType({"main": commit}), steps=(), weight_sha256=MappingProxyType(sha256),
            weight_bytes=MappingProxyType(nbytes), duplicates=MappingProxyType({}), arch_changed=(), config_tweak=(),
            corrupt=(), shape=shape, lfs=lfs)

    all_branches = regular + [b for b in dict.fromkeys(special) if b not in regular]
    commits, sha256, nbytes, served, config_of = {}, {}, {}, {}, {}

    # regular branches first, so duplicates and shared shards can copy them
    for k, branch in enumerate(sorted(all_branches, key=lambda b: b in duplicate or b in share_shard)):
        cfg, cfg_blob = config_blob(extra_layer=branch in arch_changed, tweak=branch in config_tweak)
        if branch in duplicate:
            files, cfg_blob = served[duplicate[branch]], config_of[duplicate[branch]]
        else:
            files = _weights(cfg, step_seed(branch), shards)
        if branch in share_shard:
            src = served[share_shard[branch]]
            first = min(n for n in src if n.endswith(".safetensors"))
            files = {**files, first: src[first]}
        if branch in corrupt:
            files = {n: (d[: len(d) // 2] if n.endswith(".safetensors") else d) for n, d in files.items()}
        served[branch], config_of[branch] = files, cfg_blob
        tree = {**common, "config.json": cfg_blob}
        if branch not in weightless:
            tree.update({n: (_store_weights(git, d, lfs) if n.endswith(".safetensors") else git.blob(d))
                         for n, d in files.items()})
        step = _step_of(branch)
        when = _EPOCH + 60 * (1 + (step if step is not None and branches is None else k))
        commits[branch] = git.commit(git.tree(tree), f"Checkpoint {branch}", root, when)
        data = b"" if branch in weightless else main_weights(files)
        sha256[branch] = hashlib.sha256(data).hexdigest()
        nbytes[branch] = len(data)

    if main is not None and main not in regular:
        raise ValueError(f"main={main!r} must be one of the regular branches {regular}.")
    last = main or regular[-1]
    commits["main"], sha256["main"], nbytes["main"] = commits[last], sha256[last], nbytes[last]
    git("update-ref", "--stdin", data="".join(f"update refs/heads/{b} {c}\n" for b, c in commits.items()).encode())
    git("symbolic-ref", "HEAD", "refs/heads/main")

    order = sorted(commits, key=lambda b: (b != "main", _step_of(b) is None, _step_of(b) or 0, b))
    commits = {b: commits[b] for b in order}
    all_steps = sorted({s for b in commits if (s := _step_of(b)) is not None})
    return CheckpointRepo(
        path=path, commits=MappingProxyType(commits), steps=tuple(all_steps),
        weight_sha256=MappingProxyType(sha256), weight_bytes=MappingProxyType(nbytes),
        duplicates=MappingProxyType(duplicate), arch_changed=tuple(arch_changed),
        config_tweak=tuple(config_tweak), corrupt=tuple(corrupt), shape=shape, lfs=lfs)


def _nested_tree(git: _Git, files: Mapping[str, str]) -> str:
    """A git tree of ``{"dir/name": blob sha}`` with sub-trees for folders."""
    top: dict[str, str] = {}
    sub: dict[str, dict[str, str]] = {}
    for name, sha in files.items():
        head, _, rest = name.partition("/")
        if rest:
            sub.setdefault(head, {})[rest] = sha
        else:
            top[name] = sha
    lines = [f"100644 blob {sha}\t{name}\n" for name, sha in top.items()]
    lines += [f"040000 tree {_nested_tree(git, entries)}\t{name}\n" for name, entries in sub.items()]
    return git("mktree", data="".join(sorted(lines, key=lambda l: l.split("\t")[1])).encode())


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------
def _pairs(text: str) -> dict[str, str]:
    out = {}
    for item in filter(None, text.split(",")):
        if "=" not in item:
            raise argparse.ArgumentTypeError(f"expected BRANCH=SOURCE, got {item!r}")
        key, value = item.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command line: build a repository and print its branches and commits."""
    parser = argparse.ArgumentParser(
        description="Build a git repo of a seeded random GPT-NeoX, one branch per step (for a local Hub).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  python scripts/make_test_repo.py /tmp/mirrors/models/testorg/pythia-tiny\n"
               "  python scripts/make_test_repo.py /tmp/mirrors/models/testorg/p70m --shape pythia-70m \\\n"
               "      --steps 0,1000,2000 --duplicate step3000=step2000 --corrupt step4000\n"
               "  python scripts/olah_local.py --mirrors /tmp/mirrors --port 18090",
    )
    parser.add_argument("path", help="repository to create, e.g. <mirrors>/models/<org>/<name>")
    parser.add_argument("--steps", type=lambda s: [int(x) for x in _names(s)], default=list(DEFAULT_STEPS),
                        help="comma-separated steps (default: %(default)s)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--duplicate", type=_pairs, default={}, help="BRANCH=SOURCE[,...]: serve SOURCE's weights")
    parser.add_argument("--arch-changed", type=_names, default=[], help="branches with one more layer")
    parser.add_argument("--config-tweak", type=_names, default=[], help="branches with shape-neutral config changes")
    parser.add_argument("--corrupt", type=_names, default=[], help="branches with truncated weights")
    parser.add_argument("--no-lfs", action="store_true", help="store weights as plain git blobs")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    repo = make_test_repo(args.path, steps=args.steps, shape=args.shape, seed=args.seed, duplicate=args.duplicate,
                          arch_changed=args.arch_changed, config_tweak=args.config_tweak, corrupt=args.corrupt,
                          lfs=not args.no_lfs)
    for branch, commit in repo.commits.items():
        print(f"{branch:<16} {commit}  {repo.weight_bytes[branch]:>11} B  sha256 {repo.weight_sha256[branch][:16]}")
    print(f"built {repo.path} in {time.perf_counter() - start:.2f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
