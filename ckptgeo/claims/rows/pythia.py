"""Claim rows: the paper's Pythia-2.8B logical-deduction gap (not measured by the grid)."""

from __future__ import annotations

from ckptgeo.claims.registry import Claim, ClaimContext, register_claim
from ckptgeo.claims.verdicts import SOURCES


def _pythia() -> Claim:
    return Claim("pythia_deduction", "Pythia-2.8B: logical deduction has a precursor gap, easy benchmarks none",
                 "gap of about 49K steps", "not measured by this study", "inconclusive",
                 "needs the Pythia checkpoints: ckptgeo scan EleutherAI/pythia-2.8b --suite logical_deduction",
                 "-", SOURCES["pythia_deduction"])


@register_claim(id="pythia_deduction", nulls=())
def pythia_deduction(ctx: ClaimContext) -> Claim:
    return _pythia()
