"""The claim table's settings are declared once (ClaimSettings, and the analysis's alpha), reach every row, are
recorded with the table, and `ckptgeo claims` reads a study's recorded ones back (issue 45 item 6: the study ran its
claims at 199 relabellings, `ckptgeo claims` at 999, and the p-values differed)."""

import argparse
import json

import pandas as pd

from ckptgeo._settings import declared
from ckptgeo.analysis.config import AnalysisConfig
from ckptgeo.claimtable.registry import CLAIMS, ClaimSettings, register_claim
from ckptgeo.claimtable.table import claim_table
from ckptgeo.cli import build_parser
from ckptgeo.cli.claims import _settings
from ckptgeo.forecasting.evaluate import ForecastConfig


def test_claims_reads_the_recorded_settings_and_a_flag_overrides_them(tmp_path):
    (tmp_path / "summary").mkdir()
    record = {"claim_settings": {"n_permutations": 199, "n_power": 10, "seed": 3},
              "rules": {"analysis": {**AnalysisConfig(alpha=0.01).__dict__, "collapse_metrics": ["rankme"],
                                     "a_setting_of_an_older_version": 1}}}
    (tmp_path / "summary" / "claims_rules.json").write_text(json.dumps(record))
    args = build_parser().parse_args(["claims", str(tmp_path)])
    settings, config = _settings(tmp_path, args)
    assert settings == ClaimSettings(n_permutations=199, n_power=10, seed=3)
    assert config.alpha == 0.01 and config.collapse_metrics == ("rankme",)
    args = build_parser().parse_args(["claims", str(tmp_path), "--n-permutations", "999"])
    assert _settings(tmp_path, args)[0].n_permutations == 999
    assert _settings(tmp_path / "none", build_parser().parse_args(["claims", "x"])) == (ClaimSettings(), None)


def test_the_flags_of_claims_and_forecast_come_from_the_declarations():
    def flags(command):
        sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
        return {s for a in sub._actions for s in a.option_strings}

    assert {s.flag for _, s in declared(ClaimSettings)} <= flags("claims")
    assert {s.flag for _, s in declared(ForecastConfig) if s.flag} <= flags("forecast")
    assert {"--horizon", "--min-drop", "--seed"} <= flags("forecast")


def test_one_alpha_reaches_every_row_and_the_forecast(monkeypatch):
    monkeypatch.setattr(CLAIMS, "_items", dict(CLAIMS._items))
    seen = []

    @register_claim(id="alpha_seen", claim="a row sees the analysis's alpha", source="a test")
    def alpha_seen(ctx):
        seen.append(ctx.alpha)
        return {"id": "alpha_seen", "claim": ctx.claim, "paper": "-", "measured": f"{ctx.alpha}",
                "verdict": "inconclusive", "reason": "-", "evidence": "-"}

    empty = pd.DataFrame(columns=["model", "metric", "layer", "status"])
    t = claim_table(empty, config=AnalysisConfig(alpha=0.01), n_permutations=9).set_index("id")
    assert seen == [0.01] and t.loc["alpha_seen", "measured"] == "0.01"
    assert t.loc["alpha_seen", "claim"] == "a row sees the analysis's alpha"
    from ckptgeo.forecasting.tables import config_from_analysis

    assert config_from_analysis(AnalysisConfig(alpha=0.01, min_drop=0.4)).alpha == 0.01
    assert ForecastConfig().alpha == AnalysisConfig().alpha and ForecastConfig().min_drop == AnalysisConfig().min_drop
