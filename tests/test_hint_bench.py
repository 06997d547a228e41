"""The hint benchmark's bookkeeping (ratios, table, plot) on recorded numbers, without a GPU."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import hint_bench  # noqa: E402


def test_table_compares_each_mode_with_the_best_mode_per_size(tmp_path):
    r = lambda hints, times: {"hints": hints, "kernels": len(hints) + 1, "compile_s": 1.0, "benchmarked": 3,
                              "warm_us": {str(m): t for m, t in times.items()}, "max_rel_err": 0.0}
    results = {"N8 K8 float16 B:row": {
        "plain": r([], {1: 10.0, 1024: 40.0}),
        "fixed": r([64, 256, 4096], {1: 20.0, 1024: 20.0}),
        "predicted": r([1, 1024], {1: 10.0, 1024: 20.0}),
    }}
    text = hint_bench.write_outputs(results, tmp_path, "Test GPU")
    rows = {line.split(" | ")[1]: line for line in text.splitlines() if line.startswith("| N8")}
    # best per size: 10 at M=1, 20 at M=1024. fixed: 0.5 and 1 -> geomean sqrt(0.5) = 0.707, worst 0.5
    assert "| 0.707 | 0.500 |" in rows["fixed"]
    assert "| 1.000 | 1.000 |" in rows["predicted"] and "| 3 | 1.0 |" in rows["predicted"]
    # vs plain: predicted 1 and 2 -> sqrt(2)
    assert rows["predicted"].endswith("| 1.414 |")
    assert (tmp_path / "results.md").exists() and (tmp_path / "hints_bench.png").exists()
    assert hint_bench.hints_for("fixed", hint_bench.FAMILIES[0]) == [64, 256, 4096]
    assert hint_bench.hints_for("single", hint_bench.FAMILIES[0]) == []
