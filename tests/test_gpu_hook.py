"""On a GPU: with the hook installed, max-autotune benchmarks at most top_k + 1 choices of a real GEMM
(a single survivor is used without benchmarking) and the compiled result still matches eager.

The shipped models are made for one GPU (H200). On another GPU the test forces that model with the
test-only ``_device`` override: it checks the plumbing and the counts, not the ranking's quality.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import predictor
from predictor.artifacts.model_folder import read_metadata
from predictor.core.device import DeviceInfo
from predictor.runtime.choices.discovery import find_model

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

SHIPPED = Path(__file__).resolve().parents[1] / "models" / "h200-default-lgbm-all"
M, N, K = 512, 768, 3072


def _model_and_device() -> tuple[Path, DeviceInfo | None]:
    here = DeviceInfo.from_torch()
    folder = find_model(here)
    if folder is not None:
        return folder, None
    if not (SHIPPED / "metadata.json").is_file():
        pytest.skip("no model for this GPU and no shipped model to force")
    return SHIPPED, DeviceInfo.from_metadata(read_metadata(SHIPPED))


@pytest.mark.parametrize(("top_k", "keep_aten"), [(1, False), (1, True), (3, True)])
def test_max_autotune_benchmarks_at_most_k_plus_one(top_k: int, keep_aten: bool):
    from torch._inductor import config, select_algorithm
    from torch._inductor.utils import fresh_cache

    model, device = _model_and_device()
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    benchmarked: list[tuple[str, int]] = []

    def saver(timings, name, input_nodes, choices, *rest) -> None:
        benchmarked.append((name, len(timings)))

    select_algorithm.add_feedback_saver(saver)
    try:
        torch._dynamo.reset()
        with fresh_cache(), config.patch(fx_graph_cache=False, autotune_local_cache=False), \
                predictor.pruning(model, top_k=top_k, keep_aten=keep_aten, margin=None, aten_alone_below_us=None,
                                  _device=device) as pruner:
            out = torch.compile(lambda x, y: x @ y, mode="max-autotune-no-cudagraphs")(a, b)
            torch.cuda.synchronize()
    finally:
        select_algorithm.clear_feedback_savers()
        torch._dynamo.reset()

    assert pruner.disabled is None
    torch.testing.assert_close(out, a @ b, rtol=2e-2, atol=2e-1)
    stats = pruner.stats()
    assert stats["gemms_seen"] == 1 and stats["pruned"] == 1 and stats["fallbacks"] == {}, stats
    assert stats["considered_total"] > top_k + 1 and stats["kept_total"] <= top_k + int(keep_aten)
    # no margin, no cuBLAS-alone rule: exactly the top k (and cuBLAS where kept) reach the benchmark
    assert stats["kept_total"] in ({top_k, top_k + 1} if keep_aten else {top_k}), stats
    if stats["kept_total"] == 1:
        assert benchmarked == []  # a single choice is used without benchmarking
    else:
        assert [count for _, count in benchmarked] == [stats["kept_total"]], benchmarked
