"""Tiny GPT-NeoX checkpoint folders for tests (real weights, real tokenizer, no network), and where the
public reference data lives.

The public files (BIG-bench ``logical_deduction``, six BLiMP phenomena) are not in the repository. They are
read from ``$CKPTGEO_PUBLIC_DATA`` when set, else from ``../shared/data`` beside the checkout. A test that
needs them is marked ``@pytest.mark.public_data("bigbench")`` (or ``"blimp"``) and is skipped, with one line
saying what is missing and how to get it, when they are absent; ``CKPTGEO_REQUIRE_PUBLIC_DATA=1`` (set by
``.ci/run``) turns that skip into a failure. Everything else uses the bundled suites only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PUBLIC_DATA = Path(os.environ.get("CKPTGEO_PUBLIC_DATA") or REPO_ROOT.parent / "shared" / "data")
#: what each ``public_data`` marker needs: folder under PUBLIC_DATA, its files, and how to get them
PUBLIC_FILES = {
    "bigbench": ("bigbench_logical_deduction", ("three_objects.json", "five_objects.json"),
                 "copy bigbench/benchmark_tasks/logical_deduction/{three,five}_objects/task.json from the PyPI "
                 "package bigbench==1.0.0 as three_objects.json, five_objects.json"),
    "blimp": ("blimp", ("anaphor_gender_agreement.jsonl", "determiner_noun_agreement_1.jsonl",
                        "existential_there_quantifiers_1.jsonl", "irregular_past_participle_verbs.jsonl",
                        "npi_present_1.jsonl", "regular_plural_subject_verb_agreement_1.jsonl"),
              "copy these files from data/ of github.com/alexwarstadt/blimp"),
}
BIGBENCH = PUBLIC_DATA / PUBLIC_FILES["bigbench"][0]
BLIMP = PUBLIC_DATA / PUBLIC_FILES["blimp"][0]
#: the suite the scan and fault tests measure: bundled, so they run on a fresh clone
SUITE = "logical_deduction"


def missing_public_data(name: str, root: Path = PUBLIC_DATA) -> str | None:
    """``None`` when the files of ``PUBLIC_FILES[name]`` are all under ``root``, else one line saying what is
    missing and how to get it."""
    sub, files, how = PUBLIC_FILES[name]
    folder = root / sub
    absent = [f for f in files if not (folder / f).is_file()]
    if not absent:
        return None
    return (f"needs public data {name!r}: {len(absent)} of {len(files)} files missing from {folder} "
            f"(e.g. {absent[0]}); {how}, or set CKPTGEO_PUBLIC_DATA to a folder holding {sub}/")


def train_tokenizer(vocab_size: int = 512):
    """A byte-level BPE tokenizer trained on the text of the bundled diagnostic suites (deterministic)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = []
    for f in sorted((REPO_ROOT / "diagnostics").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            row = json.loads(line)
            texts.extend(row[k] for k in ("prompt", "good", "bad", "target") if isinstance(row.get(k), str))
            texts.extend(row.get("choices") or ())
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|padding|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>")


def tiny_config(**overrides):
    from transformers import GPTNeoXConfig

    kw = dict(vocab_size=512, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
              max_position_embeddings=512, rotary_pct=0.25, bos_token_id=0, eos_token_id=0,
              tie_word_embeddings=False)
    kw.update(overrides)
    return GPTNeoXConfig(**kw)


def make_checkpoints(root: Path, steps=(0, 1, 2, 4, 100, 200), *, duplicate: dict | None = None) -> Path:
    """``root/step{N}`` folders of seeded random tiny GPT-NeoX weights plus the tokenizer at ``root``.
    ``duplicate={"step200": "step100"}`` makes step200 a byte copy of step100."""
    import shutil

    import torch
    from transformers import GPTNeoXForCausalLM

    root.mkdir(parents=True, exist_ok=True)
    train_tokenizer().save_pretrained(root)
    cfg = tiny_config()
    for step in steps:
        torch.manual_seed(step + 1)
        GPTNeoXForCausalLM(cfg).save_pretrained(root / f"step{step}")
    for copy, orig in (duplicate or {}).items():
        shutil.rmtree(root / copy, ignore_errors=True)
        shutil.copytree(root / orig, root / copy)
    return root


def cache_bytes() -> int:
    """Bytes of the files (not the symlinks) in the Hub cache the tests point huggingface_hub at."""
    import huggingface_hub.constants as hc

    return sum(p.stat().st_size for p in Path(hc.HF_HUB_CACHE).rglob("*") if p.is_file() and not p.is_symlink())


def record_fetch_peaks(monkeypatch) -> list[int]:
    """Wrap ``HubSource.fetch`` so that each fetch appends the cache's size right after it; returns that list."""
    from ckptgeo.sources.hub import HubSource

    peaks: list[int] = []
    orig = HubSource.fetch

    def fetch(self, revision):
        path = orig(self, revision)
        peaks.append(cache_bytes())
        return path

    monkeypatch.setattr(HubSource, "fetch", fetch)
    return peaks
