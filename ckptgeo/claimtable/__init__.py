"""The paper's claims, one row each, judged by a test against chance on a training grid's analysis.

* :mod:`~ckptgeo.claimtable.registry`: what a row is, sees and returns, and the registry of rows
  (:data:`CLAIMS`, :func:`register_claim`);
* :mod:`~ckptgeo.claimtable.verdicts`: the thresholds fixed in advance, the verdict rules, the definitions and
  :func:`rules`;
* :mod:`~ckptgeo.claimtable.table`: :func:`claim_table` (every row, Holm over the family) and the grid's runs;
* :mod:`~ckptgeo.claimtable.rows`: the built-in rows, one module per thing tested;
* the machinery rows share: :mod:`~ckptgeo.claimtable.leads` (like-for-like leads), :mod:`~ckptgeo.claimtable.inference`
  (intervals over settings, the contrast, Holm), :mod:`~ckptgeo.claimtable.power` (power before verdicts),
  :mod:`~ckptgeo.claimtable.chance` (the rules re-run on the study's own curves);
* :mod:`~ckptgeo.claimtable.calibrate`: the table on any dataset and on null copies of it.
"""
