"""The choice filter: which of Inductor's candidates for one GEMM survive. ``pruner.GemmPruner`` is what Inductor
calls (through ``inductor``); the model behind it is found by ``discovery`` and judged by ``policy``."""
