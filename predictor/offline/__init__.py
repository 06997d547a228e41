"""Training, calibration, evaluation, reports and the decision export: run by the CLI, never by the hook.

May import ``predictor.runtime`` and the core modules; nothing outside this folder imports it at import time.
Modules are imported by name; this file imports none of them.
"""
