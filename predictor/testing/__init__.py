"""Stand-ins for Inductor's objects, shared by the tests and the CPU benchmarks (no GPU, no compile)."""
