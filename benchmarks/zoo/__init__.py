"""Model-zoo benchmark: compile time and step time of real architectures under several compile modes.

Each (model, mode) runs in a fresh process with empty Inductor/Triton caches (``run.py`` launches
``worker.py``); ``report.py`` turns the records into tables and a plot. See benchmarks/README.md.
"""
