"""What the hook needs at compile time: settings, policy, the Inductor glue, model discovery, hints, CUTLASS.

Nothing here imports ``predictor.offline``, ``collectors``, matplotlib, scikit-learn, scipy or pandas at import
time (tests/test_layout.py checks it, module by module). Modules are imported by name; this file imports none of them.
"""
