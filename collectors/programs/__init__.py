"""Real programs to measure: the zoo's architectures (layer widths of real models, random weights, built from their
configs), how one program's step is timed (``step``), its kernel census (``census``), and what every measurement
records and shares (``harness``: environment, atomic JSON, the GPU lock).

The in-program collector (``collectors/in_program``) labels GEMM decisions inside these programs; the zoo and serving
benchmarks (``benchmarks/zoo``, ``benchmarks/serving``) time them under each compile mode. Both import them from
here, so collection code never imports the benchmarks.
"""
