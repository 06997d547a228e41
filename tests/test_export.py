"""Exporting the hook's decisions to Inductor's lookup table (``predictor.offline.export``), on the CPU.

Inductor's ``LookupTableChoices`` serves CUDA devices only (no device key, no table on a CPU), so the real-compile
tests use ``CpuTableChoices``: torch's class with the device key and the table switched on for CPU GEMMs, its key
and lookup code untouched. With ``cpu_backend="triton"`` CPU Inductor offers the real ``triton::mm`` templates
(18 configs) beside ``aten::mm`` in one ``_finalize_template_configs`` call, so a table hit is visible: one choice
instead of 19. A Triton kernel cannot run here (no Triton CPU driver), so where the decision is a Triton config the
tests compare the choice lists handed to Inductor and then let the compile finish with the aten choice.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from predictor.testing.synthetic import METADATA

from predictor import cli
from predictor.core.device import DeviceInfo
from predictor.offline import export
from predictor.runtime.choices import installed
from predictor.runtime.compile import RECOMMENDED_OPTIONS, recommended_settings
from predictor.runtime.choices.pruner import GemmPruner
from predictor.testing import fakes

DEVICE = DeviceInfo.from_metadata(METADATA)

try:
    import triton  # noqa: F401

    HAS_TRITON = True
except ImportError:
    HAS_TRITON = False
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="CPU Inductor offers Triton templates only with triton")


def _lookup_class():
    from torch._inductor import config
    from torch._inductor.lookup_table import LookupTableChoices

    class CpuTableChoices(LookupTableChoices):
        """torch's LookupTableChoices, switched on for CPU GEMMs (key "cpu+<inputs>+<op>")."""

        def uuid(self) -> str:  # torch 2.13's FX graph cache asks the choices handler for one
            return "cpu-lookup-table"

        @staticmethod
        def _get_device_key(device):
            return "cpu" if device.type == "cpu" else LookupTableChoices._get_device_key(device)

        def _get_lookup_table(self):
            return config.lookup_table.table or {}

    return CpuTableChoices


class TableSpy:
    """A CpuTableChoices factory recording each GEMM's lookup result and the choices handed to Inductor; with
    ``aten_instead`` it then compiles the GEMM's aten choice (CPU cannot run a Triton kernel)."""

    def __init__(self, aten_instead: bool = False) -> None:
        self.hits: list[str] = []
        self.misses: list[str] = []
        self.handed: list[tuple[str, list]] = []
        spy = self

        class Spy(_lookup_class()):
            def lookup_template_configs(self, kernel_inputs, op_name, template_uids, template_hash_map=None):
                found = super().lookup_template_configs(kernel_inputs, op_name, template_uids, template_hash_map)
                (spy.hits if found else spy.misses).append(op_name)
                return found

            def _finalize_template_configs(self, template_choices, kernel_inputs, templates, op_name,
                                           kwarg_overrides=None):
                out = super()._finalize_template_configs(template_choices, kernel_inputs, templates, op_name,
                                                         kwarg_overrides)
                spy.handed.append((op_name, described(out)))
                if aten_instead:
                    return [c for uid, gen in template_choices.items() if uid.startswith("aten::") for c in gen]
                return out

        self.cls = Spy


def described(choices) -> list[tuple[str, dict]]:
    return [(c.template.uid, c.params.to_kwargs()) for c in choices]


def _compile_with_table(fn, args, table, spy: TableSpy, **options):
    """torch alone: the table and a LookupTableChoices as the choices class, predictor.compile's Inductor options."""
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    try:
        with config.patch(inductor_choices_class=spy.cls, fx_graph_cache=False):
            installed._drop_cached_choices()  # the choices handler is cached per thread
            compiled = torch.compile(fn, options={**RECOMMENDED_OPTIONS, "lookup_table.table": table, **options})
            return run_and_get_code(compiled, *args)
    finally:
        installed._drop_cached_choices()
        torch._dynamo.reset()


def gemms(x, w1, w2, a, b):
    """Three GEMMs and nothing else (a pointwise kernel would be Triton, which cannot run on this CPU)."""
    return (x @ w1) @ w2.t(), torch.bmm(a, b)


def gemm_args():
    torch.manual_seed(0)
    return (torch.randn(40, 48), torch.randn(48, 32), torch.randn(16, 32), torch.randn(3, 40, 48),
            torch.randn(3, 48, 32))


# ---------------------------------------------------------------------------------------------
# Round trip through a real compile
# ---------------------------------------------------------------------------------------------

@needs_triton
def test_export_then_table_alone_reproduces_every_choice(tmp_path):
    """export_table (predictor.compile: on a CPU every GEMM keeps the aten choice alone) -> table.json ->
    a compile with torch's LookupTableChoices and the table: every GEMM hits and gets exactly the exported choice."""
    out = tmp_path / "table.json"
    args = gemm_args()
    doc = export.export_table(gemms, args, out, key_choices=_lookup_class(), options={"cpu_backend": "triton"})
    assert not installed._STACK  # the hook export_table installed is gone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.json"]  # written atomically, no temp left
    on_disk = json.loads(out.read_text())
    assert on_disk == doc and doc["schema_version"] == 1 and doc["torch"] == torch.__version__
    assert doc["gpu"] is None and doc["model"] == "gemms" and doc["created_utc"].endswith("Z")
    assert doc["inductor_options"]["max_autotune_gemm"] is True and doc["inductor_options"]["cpu_backend"] == "triton"
    # key: torch's make_lookup_key (device + (dtype, sizes, strides) per input + op); the transposed operand's strides
    aten_mm = [{"template_id": "aten::mm"}]
    assert doc["table"] == {
        "cpu+((torch.float32, [40, 48], [48, 1]), (torch.float32, [48, 32], [32, 1]))+mm": aten_mm,
        "cpu+((torch.float32, [40, 32], [32, 1]), (torch.float32, [32, 16], [1, 32]))+mm": aten_mm,
        "cpu+((torch.float32, [3, 40, 48], [1920, 48, 1]), (torch.float32, [3, 48, 32], [1536, 32, 1]))+bmm":
            [{"template_id": "aten::bmm"}],
    }
    assert doc["gemms"] == {"recorded": 3, "keys": 3, "conflicts": 0, "skipped": {}, "single_choice": 3,
                            "by_template": {"aten::mm": 2, "aten::bmm": 1}}
    import predictor

    stats = predictor.stats()  # the hook saw Inductor's whole lists (aten + 18 Triton configs) and kept one each
    assert stats["gemms_seen"] == 3 and stats["considered_total"] > 3 * 10 and stats["kept_total"] == 3

    spy = TableSpy()
    table = export.load_table(out)
    result, code = _compile_with_table(gemms, args, table, spy, cpu_backend="triton")
    assert spy.hits == ["mm", "mm", "bmm"] and spy.misses == []
    assert spy.handed == [("mm", [("aten::mm", {})]), ("mm", [("aten::mm", {})]), ("bmm", [("aten::bmm", {})])]
    assert "extern_kernels.mm(" in code[0] and "extern_kernels.bmm(" in code[0] and "triton" not in code[0].split(
        "def call", 1)[1].lower()
    for got, want in zip(result, gemms(*args), strict=True):
        torch.testing.assert_close(got, want)


class LastTritonRanker:
    """Scores candidates by position with aten far behind: the decide policy takes the last Triton config."""

    name = "last-triton"

    def score(self, rows, device):
        return np.where(rows["family"] == "aten", -100.0, np.arange(len(rows), dtype=float))


@needs_triton
def test_a_decided_triton_config_comes_back_from_the_table_with_every_parameter():
    """The hook (decide policy, a stand-in ranker, the synthetic GPU) picks the last of 18 Triton configs; the
    table alone hands Inductor that very config (same template, same parameters), not its first or all 19."""
    from torch._inductor import config

    settings = dataclasses.replace(recommended_settings(), device=DEVICE)
    pruner = GemmPruner(settings, ranker=LastTritonRanker(), metadata={"device": DEVICE.to_dict()})
    recorder = export.DecisionRecorder(_lookup_class())
    pruner.recorder = recorder
    seen, decided = [], []
    real = pruner.filter

    def filter_then_aten(choices, kernel_inputs, op_name):
        kept = real(choices, kernel_inputs, op_name)
        seen.append(described(choices))
        decided.append((op_name, described(kept)))
        return [c for c in choices if c.template.uid.startswith("aten::")]  # CPU: compile the aten choice

    pruner.filter = filter_then_aten
    a, b = torch.randn(64, 48), torch.randn(48, 32)
    options = {**RECOMMENDED_OPTIONS, "cpu_backend": "triton"}
    torch._dynamo.reset()
    try:
        with config.patch(inductor_choices_class=pruner, fx_graph_cache=False):
            installed._drop_cached_choices()
            torch.compile(torch.mm, options=options)(a, b)
    finally:
        installed._drop_cached_choices()
        torch._dynamo.reset()
    assert len(seen) == 1 and len(seen[0]) > 10 and [uid for uid, _ in seen[0]].count("aten::mm") == 1
    (op, kept), = decided
    assert op == "mm" and kept == [seen[0][-1]] and kept[0][0] == "triton::mm"

    table, conflicts = recorder.table()
    (key, entries), = table.items()
    assert conflicts == 0 and key == "cpu+((torch.float32, [64, 48], [48, 1]), (torch.float32, [48, 32], [32, 1]))+mm"
    (entry,), = [entries]
    from torch._inductor.kernel.mm import mm_template

    assert entry["template_id"] == "triton::mm" and entry.get("template_hash") == mm_template.src_hash
    # torch 2.11 builds the choice's parameters from the entry alone: it must hold every one of them
    assert {k: v for k, v in entry.items() if k not in ("template_id", "template_hash")} == kept[0][1]

    spy = TableSpy(aten_instead=True)
    _compile_with_table(torch.mm, (a, b), json.loads(json.dumps(table)), spy, cpu_backend="triton")
    assert spy.hits == ["mm"] and spy.handed == decided


def test_torchs_own_key_is_cuda_only_so_a_cpu_export_says_so(tmp_path):
    with pytest.raises(ValueError, match="keys CUDA GEMMs only"):
        export.export_table(gemms, gemm_args(), tmp_path / "t.json", options={"max_autotune_gemm_backends": "ATEN"})
    assert not (tmp_path / "t.json").exists() and not installed._STACK


def test_export_refuses_tune_naming_it(tmp_path):
    """A table holds one decision per GEMM; tune= leaves the pick to Inductor's benchmark after the hook records."""
    with pytest.raises(ValueError, match="tune="):
        export.export_table(gemms, gemm_args(), tmp_path / "t.json", tune=3)
    assert not (tmp_path / "t.json").exists() and not installed._STACK


# ---------------------------------------------------------------------------------------------
# The recorder on stand-in objects
# ---------------------------------------------------------------------------------------------

def ktc(uid: str, src_hash: str | None = None, **kwargs):
    return SimpleNamespace(template=SimpleNamespace(uid=uid, src_hash=src_hash),
                           params=SimpleNamespace(to_serializeable_dict=lambda: dict(kwargs)))


class FakeKeyer:
    """Stands in for LookupTableChoices.make_lookup_key on stand-in kernel inputs."""

    def make_lookup_key(self, kernel_inputs, op_name, include_device=False):
        if kernel_inputs.device_type != "cuda":
            return None
        return ("GPU+" if include_device else "") + f"{kernel_inputs.shape}+{op_name}"


def fake_inputs(shape, device_type="cuda"):
    return SimpleNamespace(shape=shape, device_type=device_type)


def test_recorder_builds_entries_keys_and_counts():
    r = export.DecisionRecorder(FakeKeyer())
    r([ktc("triton::mm", "h1", BLOCK_M=64, num_warps=4, ACC_TYPE="tl.float32", hint_override=None)],
      fake_inputs((8, 16)), "mm")
    r([ktc("aten::mm")], fake_inputs((4, 4)), "mm")
    r([ktc("aten::mm")], fake_inputs((8, 16)), "mm")  # same key, another decision: the first one stays
    r([ktc("aten::mm")], fake_inputs((2, 2), "cpu"), "mm")  # no key: Inductor's table does not serve it
    r([ktc("triton::mm", BLOCK=(16, 16))], fake_inputs((1, 1)), "mm")  # a tuple would come back a list
    table, conflicts = r.table()
    assert table == {
        "GPU+(8, 16)+mm": [{"template_id": "triton::mm", "BLOCK_M": 64, "num_warps": 4, "ACC_TYPE": "tl.float32",
                            "hint_override": None, "template_hash": "h1"}],
        "GPU+(4, 4)+mm": [{"template_id": "aten::mm"}],
    }
    assert conflicts == 1 and dict(r.skipped) == {"no_key": 1, "unserializable": 1}
    agnostic = export.DecisionRecorder(FakeKeyer(), device_key=False, template_hash=False)
    agnostic([ktc("triton::mm", "h1", BLOCK_M=64)], fake_inputs((8, 16)), "mm")
    assert agnostic.table()[0] == {"(8, 16)+mm": [{"template_id": "triton::mm", "BLOCK_M": 64}]}


class PositionRanker:
    name = "position"

    def score(self, rows, device):
        return np.arange(len(rows), dtype=float)


hook_ktc = fakes.ktc


def FakeInputs(m, n, k):  # noqa: N802 -- row-major fp16 GEMM operands, as the hook reads them
    inputs = fakes.mm_inputs(m, n, k, torch.float16)
    inputs.shape = (m, n, k)  # what FakeKeyer keys on
    return inputs


def mm_choices():
    tiles = [(64, 64, 32, 3, 4), (128, 64, 32, 4, 8), (128, 128, 64, 3, 8)]
    return [hook_ktc("aten::mm")] + [
        hook_ktc("triton::mm", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_stages=s, num_warps=w, GROUP_M=8,
                 EVEN_K=True, ALLOW_TF32=False, USE_FAST_ACCUM=False, ACC_TYPE="tl.float32")
        for bm, bn, bk, s, w in tiles]


def test_the_hook_hands_each_gemms_final_choice_to_its_recorder(caplog):
    """The decide policy keeps one choice; the recorder gets exactly that list, keyed per GEMM; a failing recorder
    never breaks the filter (one warning)."""
    settings = dataclasses.replace(recommended_settings(), device=DEVICE)
    p = GemmPruner(settings, ranker=PositionRanker(), metadata={"device": DEVICE.to_dict()})
    r = export.DecisionRecorder(FakeKeyer())
    p.recorder = r
    choices = mm_choices()
    kept = p.filter(choices, FakeInputs(512, 768, 3072), "mm")
    assert kept == [choices[-1]]
    assert r.decisions == [{"op_name": "mm", "key": "GPU+(512, 768, 3072)+mm",
                            "entries": [{"template_id": "triton::mm", **choices[-1].params.to_kwargs()}]}]
    assert p.filter([], FakeInputs(1, 1, 1), "mm") == [] and len(r.decisions) == 1  # nothing kept: nothing recorded

    def broken(*_):
        raise RuntimeError("disk full")

    p.recorder = broken
    with caplog.at_level(logging.WARNING, logger="predictor.runtime.choices.pruner"):
        assert p.filter(choices, FakeInputs(512, 768, 3072), "mm") == [choices[-1]]
        assert p.filter(choices, FakeInputs(256, 768, 3072), "mm") == [choices[-1]]
    assert [m for m in caplog.messages if "disk full" in m] == [
        "gemm-predictor: recording the decision for mm failed (RuntimeError: disk full)"]


# ---------------------------------------------------------------------------------------------
# load_table, the program loader, the CLI
# ---------------------------------------------------------------------------------------------

def _write(path, **overrides):
    doc = {"table": {"k+mm": [{"template_id": "aten::mm"}]}, "gpu": None, "torch": torch.__version__, "model": "m",
           "created_utc": "2026-01-01T00:00:00Z", "schema_version": 1, **overrides}
    path.write_text(json.dumps(doc))
    return path


def test_load_table_checks_versions_and_gpu(tmp_path):
    assert export.load_table(_write(tmp_path / "ok.json")) == {"k+mm": [{"template_id": "aten::mm"}]}
    old = _write(tmp_path / "old.json", torch="1.99.0+cu130")
    with pytest.raises(ValueError, match=r"made with torch 1\.99\.0\+cu130, this is torch") as info:
        export.load_table(old)
    assert "\n" not in str(info.value)
    assert export.load_table(old, allow_mismatch=True) == {"k+mm": [{"template_id": "aten::mm"}]}
    same_minor = ".".join(torch.__version__.split(".")[:2]) + ".9+cu999"
    assert export.load_table(_write(tmp_path / "patch.json", torch=same_minor))  # only major.minor must match
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="made on NVIDIA H200, this machine has no CUDA GPU"):
            export.load_table(_write(tmp_path / "gpu.json", gpu="NVIDIA H200"))
    for name, text, message in [
        ("missing.json", None, "no such file"),
        ("bad.json", "{", "not JSON"),
        ("list.json", "[]", "not a gemm-predictor lookup table"),
        ("v2.json", json.dumps({"table": {}, "schema_version": 2}), "schema_version 2"),
        ("entry.json", json.dumps({"table": {"k": [{"BLOCK_M": 64}]}, "schema_version": 1}), "template_id"),
    ]:
        if text is not None:
            (tmp_path / name).write_text(text)
        with pytest.raises(ValueError, match=message):
            export.load_table(tmp_path / name)


def test_load_program_from_a_file_or_a_module(tmp_path, monkeypatch):
    prog = tmp_path / "prog.py"
    prog.write_text("import torch\n\ndef make():\n    return torch.nn.Linear(4, 2), torch.randn(3, 4)\n")
    model, inputs = export.load_program(str(prog))
    assert isinstance(model, torch.nn.Linear) and len(inputs) == 1 and inputs[0].shape == (3, 4)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "progmod.py").write_text("import torch\n\ndef make():\n    return torch.mm, [torch.ones(2, 2)] * 2\n")
    model, inputs = export.load_program("progmod")
    assert model is torch.mm and len(inputs) == 2
    for body, message in [
        ("x = 1\n", "defines no make"),
        ("def make():\n    return 1\n", r"must return \(model, example_inputs\)"),
        ("def make():\n    return len, 3\n", "example_inputs must be a tuple"),
        ("import no_such_module_here\n", "loading it failed"),
    ]:
        bad = tmp_path / "bad.py"
        bad.write_text(body)
        with pytest.raises(ValueError, match=message):
            export.load_program(str(bad))
    with pytest.raises(ValueError, match="no such file"):
        export.load_program(str(tmp_path / "nope.py"))
    with pytest.raises(ValueError, match="not a file, and no module of that name"):
        export.load_program("no_such_pkg.prog")


def test_cli_export_of_cpu_gemms_fails_in_one_line(tmp_path, capsys):
    prog = tmp_path / "prog.py"
    prog.write_text("import torch\n\ndef make():\n"
                    "    return (lambda a, b: a @ b), (torch.randn(8, 4), torch.randn(4, 2))\n")
    code = cli.main(["export", "--program", str(prog), "--out", str(tmp_path / "t.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "keys CUDA GEMMs only" in err[0]
    assert cli.main(["export", "--program", str(tmp_path / "missing.py"), "--out", str(tmp_path / "t.json")]) == 2
    assert "no such file" in capsys.readouterr().err


@needs_triton
def test_deploy_snippet_keeps_the_aten_choice_alone_on_a_table_miss():
    """docs/DEPLOY.md's ``_fallback`` override: a GEMM missing from the table gets the aten choice alone, as plain
    torch.compile runs it, instead of stock max-autotune (here 18 Triton configs, which cannot even run on a CPU).
    torch 2.13 asks for addmm's aten and Triton choices in separate calls: the Triton-only one must come out empty.
    torch 2.11 asks in one call, its aten choices led by aten::bias_addmm (offered for a broadcast bias: the
    1-D-bias cuBLAS call plain torch.compile makes), which the override keeps."""
    spy = TableSpy()

    class AtenOnMiss(spy.cls):  # the override exactly as docs/DEPLOY.md shows it
        def _fallback(self, template_choices, kernel_inputs, templates, op_name, kwarg_overrides=None):
            choices = super()._fallback(template_choices, kernel_inputs, templates, op_name, kwarg_overrides)
            if op_name not in ("mm", "addmm", "bmm"):
                return choices
            return [c for c in choices if c.template.uid.startswith("aten::")][:1]

    spy.cls = AtenOnMiss
    torch.manual_seed(0)
    x, w, bias = torch.randn(40, 48), torch.randn(16, 48), torch.randn(16)
    a, b = torch.randn(40, 48), torch.randn(48, 32)

    def model(x, w, bias, a, b):
        return torch.nn.functional.linear(x, w, bias), a @ b

    result, code = _compile_with_table(model, (x, w, bias, a, b), {}, spy, cpu_backend="triton")
    assert spy.hits == [] and {op for op, _ in spy.handed} == {"mm", "addmm"}
    kept: dict[str, list[str]] = {"mm": [], "addmm": []}
    for op, cs in spy.handed:
        kept[op] += [uid for uid, _ in cs]
    assert kept["mm"] == ["aten::mm"] and kept["addmm"] in (["aten::addmm"], ["aten::bias_addmm"])
    addmm = kept["addmm"][0].removeprefix("aten::")
    assert f"extern_kernels.{addmm}(" in code[0] and "extern_kernels.mm(" in code[0]
    for got, want in zip(result, model(x, w, bias, a, b), strict=True):
        torch.testing.assert_close(got, want)


# ---------------------------------------------------------------------------------------------
# benchmarks/export_check.py: the parts that need no GPU
# ---------------------------------------------------------------------------------------------

WRAPPER = """
triton_tem_fused_mm_0 = async_compile.triton('triton_tem_fused_mm_0', '''
@triton_heuristics.template(
    num_stages=3,
    num_warps=8,
    triton_meta={'signature': {'arg_A': '*bf16'}},
)
@triton.jit
def triton_tem_fused_mm_0(arg_A, arg_B, out_ptr0):
    EVEN_K : tl.constexpr = True
    ACC_TYPE : tl.constexpr = tl.float32
    BLOCK_M : tl.constexpr = 128
    BLOCK_N : tl.constexpr = 64
    BLOCK_K : tl.constexpr = 32
    GROUP_M : tl.constexpr = 8
''', device_str='cuda')
triton_poi_fused_silu_1 = async_compile.triton('triton_poi_fused_silu_1', '''
@triton.jit
def triton_poi_fused_silu_1(in_ptr0, xnumel, XBLOCK : tl.constexpr):
    pass
''', device_str='cuda')

def call(args):
    extern_kernels.mm(arg0_1, reinterpret_tensor(arg1_1, (4096, 11008), (1, 4096), 0), out=buf0)
    triton_tem_fused_mm_0.run(buf0, arg2_1, buf1)
"""


def test_export_check_reads_gemm_kernels_and_judges():
    from benchmarks import export_check as ec

    kernels = ec.gemm_kernels(WRAPPER)
    assert kernels == ["extern:mm", "triton_tem_fused_mm_0:BLOCK_M=128,BLOCK_N=64,BLOCK_K=32,GROUP_M=8,s=3,w=8"]
    hook_run = {"kernels": kernels, "kernels_recompile": kernels, "table_keys": 2, "compile_s": 30.0}
    table_run = {"kernels": kernels, "hits": 3, "misses": 0, "predictor_imported": False, "compile_s": 12.0}
    plain_run = {"kernels": ["extern:mm", "extern:mm"], "compile_s": 9.0}
    good = ec.verdict(hook_run, table_run, plain_run)
    assert good["ok"] and good["kernels_match"] and good["table_vs_plain_compile"] == "1.33x, +3.0 s"
    assert not ec.verdict(hook_run, {**table_run, "kernels": ["extern:mm"]}, plain_run)["ok"]
    assert not ec.verdict(hook_run, {**table_run, "misses": 1}, plain_run)["ok"]
    assert not ec.verdict(hook_run, {**table_run, "predictor_imported": True}, plain_run)["ok"]
    assert not ec.verdict(hook_run, {**table_run, "compile_s": 60.0}, plain_run)["ok"]
    assert ec.verdict({"error": "exit 1"}, table_run, plain_run) == {"ok": False, "why": "a phase failed"}
    runs = {"hook": {**hook_run, "step_us": 10.0, "max_rel_err": 0.0}, "plain": {**plain_run, "step_us": 11.0,
            "max_rel_err": 0.0}, "table": {**table_run, "step_us": 10.0, "max_rel_err": 0.0}}
    assert ec.report({"gpu": "G", "torch": "t", "triton": "3", "wall_s": 1.0,
                      "models": {"mlp": {**runs, "verdict": good}}})
