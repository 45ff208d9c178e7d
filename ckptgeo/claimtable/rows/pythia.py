"""Claim rows: the paper's Pythia-2.8B logical-deduction gap (not measured by the grid)."""

from __future__ import annotations

from ckptgeo.claimtable.registry import Claim, ClaimContext, register_claim


def _pythia(ctx: ClaimContext) -> Claim:
    return Claim("pythia_deduction", ctx.claim,
                 "gap of about 49K steps", "not measured by this study", "inconclusive",
                 "needs the Pythia checkpoints: ckptgeo scan EleutherAI/pythia-2.8b --suite logical_deduction",
                 "-", ctx.source)


@register_claim(id="pythia_deduction", order=160,
                claim="Pythia-2.8B: logical deduction has a precursor gap, easy benchmarks none",
                source="v4 abstract: Pythia-2.8B logical deduction, gap about 49K steps",
                anchor="claim-pythia-deduction", nulls=())
def pythia_deduction(ctx: ClaimContext) -> Claim:
    return _pythia(ctx)
