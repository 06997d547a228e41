"""Each compiled object keeps its own settings (issue 63, item 5), and predictor.compile compiles what plain
torch.compile compiles (item 4: an addmm of a 0-d bias). CPU; a GPU is simulated where the model must load."""

from __future__ import annotations

import gc
import resource
from pathlib import Path

import pytest
import torch

import predictor
from predictor.artifacts.metadata import read_metadata
from predictor.core.device import DeviceInfo
from predictor.runtime import compile, registry
from predictor.runtime.choices import installed, loading

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "models" / "h200-default-lgbm-all"


@pytest.fixture()
def simulated_gpu(monkeypatch, no_compile_caches):
    """The pruners' model loads as on the GPU it was made for (an H200), while Inductor compiles for the CPU; no
    compile cache, so that every compile lowers its GEMMs (and asks the pruner)."""
    monkeypatch.setattr(loading, "_this_gpu", lambda: DeviceInfo.from_metadata(read_metadata(SHIPPED)))
    monkeypatch.setattr(compile, "_PRUNERS", {})
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    while installed._STACK:
        predictor.uninstall()


def _gemm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x @ w).relu()


def test_a_compiled_object_filters_its_gemms_with_its_own_pruner(simulated_gpu):
    x, w = torch.randn(64, 32), torch.randn(32, 48)
    a = predictor.compile(_gemm, cudagraphs=False, predictor_model=SHIPPED, decide_gap=1.0)
    b = predictor.compile(lambda x, w: (x @ w).sigmoid(), cudagraphs=False, predictor_model=SHIPPED, decide_gap=-1.0)
    pruner_a = compile.pruner_for(compile.recommended_settings(SHIPPED, decide_gap=1.0))
    pruner_b = compile.pruner_for(compile.recommended_settings(SHIPPED, decide_gap=-1.0))
    assert pruner_a is not pruner_b and pruner_a.ranker is not None and pruner_b.ranker is not None
    assert installed._STACK[-1].pruner is pruner_b  # the latest compile's hook is the process-wide one
    torch.testing.assert_close(a(x, w), _gemm(x, w))  # compiled now, after B's compile: with A's settings
    assert (pruner_a.stats()["gemms_seen"], pruner_b.stats()["gemms_seen"]) == (1, 0)
    torch.testing.assert_close(b(x, w), (x @ w).sigmoid())
    assert (pruner_a.stats()["gemms_seen"], pruner_b.stats()["gemms_seen"]) == (1, 1)
    # a recompile of A (a new size, after B compiled) again uses A's pruner
    a(torch.randn(16, 32), torch.randn(32, 8))
    assert (pruner_a.stats()["gemms_seen"], pruner_b.stats()["gemms_seen"]) == (2, 1)
    assert installed._STACK[-1].pruner is pruner_b  # compiling A left the process-wide hook as it was


def test_alternating_settings_keep_one_pruner_each_and_memory_flat(simulated_gpu):
    def compile_pair() -> None:
        for gap in (1.0, -1.0):
            predictor.compile(_gemm, cudagraphs=False, predictor_model=SHIPPED, decide_gap=gap)

    compile_pair()
    gc.collect()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux: the peak, which only grows
    for _ in range(100):  # 200 compiles, two settings alternating
        compile_pair()
    gc.collect()
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert len(compile._PRUNERS) == 2
    assert len({id(e.pruner) for e in installed._STACK}) == len(installed._STACK) == 1
    assert grown_mib < 50, f"peak RSS grew {grown_mib:.0f} MiB over 200 compiles"  # one model is ~4 MB parsed


def test_an_addmm_of_a_0d_bias_compiles_and_runs_as_plain(no_compile_caches):
    torch._dynamo.reset()
    bias, a, b = torch.randn(()), torch.randn(8, 16), torch.randn(16, 4)
    try:
        out = predictor.compile(lambda c, x, y: torch.addmm(c, x, y), cudagraphs=False)(bias, a, b)
        torch.testing.assert_close(out, torch.addmm(bias, a, b))
        plain = torch.compile(lambda c, x, y: torch.addmm(c, x, y))(bias, a, b)
        torch.testing.assert_close(out, plain)
    finally:
        torch._dynamo.reset()
        while installed._STACK:
            predictor.uninstall()


def test_without_the_addmm_bias_lowering_the_0d_bias_breaks_the_compile(monkeypatch, no_compile_caches):
    """What the lowering is for: under the forced max_autotune_gemm, Inductor's tuned addmm fails on a 0-d bias."""
    monkeypatch.setattr(registry, "LOWERINGS", [lw for lw in registry.LOWERINGS if lw.name != "addmm_bias"])
    torch._dynamo.reset()
    try:
        try:
            predictor.compile(lambda c, x, y: torch.addmm(c, x, y), cudagraphs=False)(
                torch.randn(()), torch.randn(8, 16), torch.randn(16, 4))
        except Exception as exc:  # noqa: BLE001 -- Inductor wraps the IndexError in its own error types
            assert "IndexError" in f"{type(exc).__name__} {exc}" or "index" in str(exc), exc
        else:  # torch 2.11's tuned addmm takes a 0-d bias; 2.13's reaches inp.get_stride()[0]
            pytest.skip(f"torch {torch.__version__}'s tuned addmm compiles a 0-d bias without the lowering")
    finally:
        torch._dynamo.reset()
        while installed._STACK:
            predictor.uninstall()


def test_an_addmm_of_a_1d_bias_keeps_the_tuned_lowering():
    from predictor.runtime.lowerings.addmm_bias import takes_plain

    class Node:
        def __init__(self, *size: int) -> None:
            self.size = size

        def get_size(self) -> tuple[int, ...]:
            return self.size

    assert takes_plain(Node()) and not takes_plain(Node(4)) and not takes_plain(Node(8, 4)) and takes_plain(Node(1, 8, 4))
