"""What runs inside ``torch.compile``: the entry points (``compile``, ``backend``, ``install``), the lowerings' list
(``registry``), the choice filter (``choices/``), the rewrites of what Inductor sees (``lowerings/``, ``dynamic/``).

Nothing here imports ``predictor.offline``, ``collectors``, matplotlib, scikit-learn, scipy or pandas at import
time (tests/test_layout.py checks it, module by module). Modules are imported by name; this file imports none of them.
"""
