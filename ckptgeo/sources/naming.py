"""How public training runs name their checkpoints, and reading step / stage / tokens from a name.

Built-in schemes (recognised without ``--step-pattern``; they never match the same name twice):

=============  ================================================  ======================================
scheme         name                                              example
=============  ================================================  ======================================
``pythia``     ``step{N}``                                       ``step143000`` (2,097,152 tokens/step)
``olmo``       ``[stageK[-ingredientJ]-]step{N}-tokens{T}B``     ``stage2-ingredient1-step500-tokens3B``
``smollm3``    ``stageK-step-{N}``                               ``stage1-step-40000`` (2,359,296 tokens/step)
``smollm2``    ``step-{N}``                                      ``step-125000``
``fineweb``    ``step-{N:06d}-{T}BT``                            ``step-001000-2BT``
``olmo-post``  ``step_{N}`` (OLMo-2 post-training)               ``step_360``
``trainer``    ``checkpoint-{N}``                                ``checkpoint-500``
``bloom``      ``global_step{N}``                                ``global_step1000``
``iter``       ``iter{N}`` / ``iter_{N:07d}`` (Megatron)          ``iter2500``, ``iter_0002500``
``ckpt``       ``ckpt_{K}`` (a checkpoint index, not a step)     ``ckpt_000``
``bare``       ``{N}``                                           ``128000``
=============  ================================================  ======================================

``tokens`` is read from the name where it says (``tokens{T}B`` and ``{T}BT`` are billions of tokens), else
it is step x the scheme's known global batch in tokens (:attr:`NamingScheme.tokens_per_step`: Pythia's
1024 sequences of 2048 tokens, SmolLM3's 2.36M tokens; see their model cards), else unknown. OLMo-2's stage-1
branches also come without the ``stage1-`` prefix (``step150-tokens1B``): where other names of the same
listing carry a stage, those are stage ``stage1`` (:func:`parse_names`).
A custom ``--step-pattern`` is a regex whose named groups ``step`` (else the first group), and
optionally ``stage`` and ``tokens`` (billions), are read the same way.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections import Counter
from dataclasses import dataclass

from ckptgeo.constants import PYTHIA_TOKENS_PER_STEP, SMOLLM3_TOKENS_PER_STEP

__all__ = ["NamingScheme", "SCHEMES", "ParsedName", "parse_name", "stage_order"]

log = logging.getLogger(__name__)

_BILLION = 10**9


@dataclass(frozen=True)
class NamingScheme:
    """One way of naming checkpoints: ``pattern`` has a ``step`` group and optionally ``stage`` and
    ``tokens`` (in billions of tokens); ``tokens_per_step`` is the run's known global batch in tokens
    (None where the scheme is shared by runs of different batches)."""

    name: str
    pattern: str
    example: str
    tokens_per_step: int | None = None

    def match(self, name: str) -> "ParsedName | None":
        return _read(re.fullmatch(self.pattern, name), self.name, self.tokens_per_step)


SCHEMES: tuple[NamingScheme, ...] = (
    NamingScheme("pythia", r"step(?P<step>\d+)", "step143000", PYTHIA_TOKENS_PER_STEP),
    NamingScheme("olmo", r"(?:(?P<stage>stage\d+(?:-ingredient\d+)?)-)?step(?P<step>\d+)"
                         r"-tokens(?P<tokens>\d+(?:\.\d+)?)B", "stage2-ingredient1-step500-tokens3B"),
    NamingScheme("smollm3", r"(?P<stage>stage\d+)-step-(?P<step>\d+)", "stage1-step-40000", SMOLLM3_TOKENS_PER_STEP),
    NamingScheme("smollm2", r"step-(?P<step>\d+)", "step-125000"),
    NamingScheme("fineweb", r"step-(?P<step>\d+)-(?P<tokens>\d+(?:\.\d+)?)BT", "step-001000-2BT"),
    NamingScheme("olmo-post", r"step_(?P<step>\d+)", "step_360"),
    NamingScheme("trainer", r"checkpoint-(?P<step>\d+)", "checkpoint-500"),
    NamingScheme("bloom", r"global_step(?P<step>\d+)", "global_step1000"),
    NamingScheme("iter", r"iter_?(?P<step>\d+)", "iter2500"),
    NamingScheme("ckpt", r"ckpt_(?P<step>\d+)", "ckpt_000"),
    NamingScheme("bare", r"(?P<step>\d+)", "128000"),
)


@dataclass(frozen=True)
class ParsedName:
    """What a checkpoint name says: ``step``, ``stage`` (None if none), ``tokens`` (None if the name does
    not say), and the ``scheme`` that read it."""

    step: int
    stage: str | None = None
    tokens: int | None = None
    scheme: str = "custom"
    tokens_per_step: int | None = None


def _read(m: re.Match | None, scheme: str, tokens_per_step: int | None = None) -> ParsedName | None:
    if m is None:
        return None
    groups = m.groupdict()
    step = groups.get("step") if "step" in groups else m.group(1)
    if step is None:
        return None
    tokens = groups.get("tokens")
    return ParsedName(step=int(step), stage=groups.get("stage") or None,
                      tokens=None if tokens is None else round(float(tokens) * _BILLION), scheme=scheme,
                      tokens_per_step=tokens_per_step)


def parse_name(name: str, pattern: str | None = None) -> ParsedName | None:
    """Step, stage and tokens encoded in a branch or folder ``name``, or None if it names no checkpoint.

    ``pattern`` None: the built-in :data:`SCHEMES`; else that regex (``re.match``), as ``--step-pattern``.

    Examples
    --------
    >>> parse_name("stage2-ingredient1-step500-tokens3B")
    ParsedName(step=500, stage='stage2-ingredient1', tokens=3000000000, scheme='olmo', tokens_per_step=None)
    >>> parse_name("step-001000-2BT").tokens, parse_name("checkpoint-40").step, parse_name("main")
    (2000000000, 40, None)
    >>> p = parse_name("stage1-step-40000"); p.stage, p.step, p.tokens_per_step
    ('stage1', 40000, 2359296)
    """
    if pattern is not None:
        return _read(re.match(pattern, name), "custom")
    for scheme in SCHEMES:
        parsed = scheme.match(name)
        if parsed is not None:
            return parsed
    return None


def parse_names(names: list[str], pattern: str | None = None, *, where: str = "") -> dict[str, ParsedName]:
    """The names that name checkpoints, parsed. With the built-in schemes, when names of several schemes
    are present the one most names follow wins and the others are left out with a warning (pass
    ``--step-pattern`` to choose).

    >>> sorted(parse_names(["main", "step1", "step2", "checkpoint-3"]))
    ['step1', 'step2']
    >>> parse_names(["step150-tokens1B", "stage2-ingredient1-step0-tokens4B"])["step150-tokens1B"].stage
    'stage1'
    """
    parsed = {n: p for n in names if (p := parse_name(n, pattern)) is not None}
    if pattern is not None or not parsed:
        return parsed
    counts = Counter(p.scheme for p in parsed.values())
    if len(counts) > 1:
        best = max(SCHEMES, key=lambda s: (counts.get(s.name, 0), -SCHEMES.index(s))).name
        left = sorted(n for n, p in parsed.items() if p.scheme != best)
        log.warning("%s names checkpoints in several ways; using the %s scheme (%d names) and leaving out %s; "
                    "pass --step-pattern to choose", where or "the source", best, counts[best],
                    ", ".join(left[:5]) + (" ..." if len(left) > 5 else ""))
        parsed = {n: p for n, p in parsed.items() if p.scheme == best}
    if any(p.stage is not None for p in parsed.values()):  # OLMo-2: stage-1 branches without the prefix
        parsed = {n: p if p.stage is not None or p.scheme != "olmo" else dataclasses.replace(p, stage="stage1")
                  for n, p in parsed.items()}
    return parsed


def stage_order(stage: str | None) -> tuple:
    """Sort key of a training stage: no stage first, then ``stage1``, ``stage2-ingredient1``,
    ``stage2-ingredient2``, ..., then any other stage name alphabetically.

    >>> sorted(["stage2-ingredient2", None, "stage10", "stage2-ingredient1", "stage1"], key=stage_order)
    [None, 'stage1', 'stage2-ingredient1', 'stage2-ingredient2', 'stage10']
    """
    if stage is None:
        return (0, 0, 0, "")
    m = re.fullmatch(r"stage(\d+)(?:-ingredient(\d+))?", stage)
    if m:
        return (1, int(m.group(1)), int(m.group(2) or 0), "")
    return (2, 0, 0, stage)
