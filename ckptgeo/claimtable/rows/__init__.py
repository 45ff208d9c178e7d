"""The built-in claim rows, one module per thing tested: ``leads`` (geometry's onset against behaviour's:
contrast, precursors on hard and easy settings, tracking, the loss, LLC, Hessian), ``order``, ``top_down``,
``floors``, ``across_sizes``, ``probes``, ``precursor_rate`` (descriptive), ``pythia``, ``forecast``.
"""
