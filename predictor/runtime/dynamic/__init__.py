"""Symbolic sizes: one kernel per range of M, multi-kernel hints, a dynamic graph's kernels sized for large sizes."""
