"""Events on one curve, below the DataFrame pipeline (the kernel the analysis, the monitor and the forecast share).

* :mod:`~ckptgeo.events.records`: what a detector returns (:class:`Acquisition`, :class:`Collapse`,
  :class:`Onset`, :class:`Gap`, :class:`CurveEvents`) and the rules' default values;
* :mod:`~ckptgeo.events.detect`: one curve -> its events (acquisition, collapse, precursor gap,
  :func:`curve_events`); :mod:`~ckptgeo.events.onsets`: where a curve starts to move;
* :mod:`~ckptgeo.events.rules`: :class:`EventRules`, each rule declared once, whose methods are the detector;
* :mod:`~ckptgeo.events.acquisition_null`: the rule's outcome with acquisition moved, permuted within checkpoint
  schedules (the null of every rate judged against acquisition);
* :mod:`~ckptgeo.events.curves`: how a curve is read from the tables (its summary layer, preferred variant,
  counted runs, a run's identity);
* :mod:`~ckptgeo.events.runs`: the runs table (one row per run) and its CSV / LaTeX files.

The statistics it uses are :mod:`ckptgeo.stats` (below it).
"""
