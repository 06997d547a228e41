"""The rewrites of what Inductor sees: one module per lowering, each listed once in ``registry``."""
