"""Context blocks (collectors/in_program/context_blocks.py) and the context dataset
(collectors/in_program/context_dataset.py) on CPU: block names and the seeded sample, the blocks' modules against a hand computation, the in-program runner on a
block, agreement.json turned into rows and the policies scored on them, and the committed H100 data."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from torch import nn

from collectors.programs import models
from collectors.in_program import collect as in_program
from collectors.in_program import context_blocks as cb
from collectors.in_program import context_dataset as cd

REPO = Path(__file__).resolve().parents[1]
INPROG = REPO / "docs/benchmarks/zoo/nvidia-h100/in_program"
GEMM_LABELS = REPO / "datasets/nvidia-h100/default.parquet"
CODES = {v: k for k, v in cb.DTYPE_CODES.items()}


# --- context blocks ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, fields", [
    ("ctx-swiglu-m512-d2048-h5632-v32000-bf16",
     {"act": "swiglu", "m": 512, "d": 2048, "h": 5632, "v": 32000, "dtype": "bfloat16"}),
    ("ctx-gelu-m17-d64-h256-fp32", {"act": "gelu", "m": 17, "d": 64, "h": 256, "v": 0, "dtype": "float32"}),
    ("ctx-relu-m9-d32-h64-fp16", {"act": "relu", "m": 9, "d": 32, "h": 64, "v": 0, "dtype": "float16"}),
])
def test_names_round_trip(name, fields):
    assert cb.parse(name) == fields
    f = cb.parse(name)
    assert cb.name_of(f["act"], f["m"], f["d"], f["h"], f["v"], CODES[f["dtype"]]) == name


@pytest.mark.parametrize("name", ["mlp", "ctx-tanh-m8-d64-h64-bf16", "ctx-gelu-m8-d64-h64-int8",
                                  "ctx-gelu-m8-d64-bf16", "ctx-gelu-m8-d64-h64-bf16-extra",
                                  "xctx-gelu-m8-d64-h64-bf16", "ctx-gelu-m8-d64-h64-v-bf16"])
def test_other_names_are_not_blocks(name):
    assert cb.parse(name) is None
    with pytest.raises(ValueError, match=r"ctx-<gelu\|relu\|swiglu>-m<M>-d<D>-h<H>\[-v<V>\]"):
        models.get(name)
    with pytest.raises(ValueError, match="not a context block name"):
        cb.build_from_name(name)


def test_models_get_gives_a_context_entry():
    entry = models.get("ctx-swiglu-m24-d64-h128-v100-bf16")
    assert (entry.name, entry.family, entry.kind, entry.dtype) == (
        "ctx-swiglu-m24-d64-h128-v100-bf16", "context", "infer", "bfloat16")
    assert "swiglu" in entry.description and "24 tokens" in entry.description


def test_the_sample_is_seeded_stable_and_capped():
    names = cb.sampled_names(200)
    assert names == cb.sampled_names(200) and cb.sampled_names(10) == names[:10]
    assert len(set(names)) == 200 and cb.sampled_names(10, seed=16) != names[:10]
    specs = [cb.parse(n) for n in names]
    assert all(specs)
    for s in specs:
        scale = 0.25 if s["dtype"] == "float32" else 1
        assert 2 * s["m"] * s["d"] * s["h"] <= cb.MAX_MLP_FLOP * scale
        assert s["m"] * s["v"] <= cb.MAX_HEAD_ELEMENTS and s["v"] in (0, *cb.HEADS)
        assert s["h"] % (256 if s["act"] == "swiglu" else 64) == 0 and s["d"] in cb.WIDTHS and s["m"] >= 1
    # the sample spans every act and dtype, with and without a head, aligned and odd token counts
    assert {s["act"] for s in specs} == set(cb.ACTS) and {s["dtype"] for s in specs} == set(cb.DTYPE_CODES.values())
    assert {bool(s["v"]) for s in specs} == {True, False} and {s["m"] % 8 == 0 for s in specs} == {True, False}


def test_the_committed_context_dataset_is_the_first_80_sampled_names():
    # a changed sampler would silently rebuild other programs than the ones measured
    measured = {r["model"] for r in json.loads((INPROG / "context_blocks/results.json").read_text())}
    assert measured == set(cb.sampled_names(80))


def _layernorm(x, norm):
    mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def _linear(x, lin):
    return x @ lin.weight.T + (lin.bias if lin.bias is not None else 0)


def _by_hand(block: cb.ContextBlock, act: str, x: torch.Tensor) -> torch.Tensor:
    for layer in block.layers:
        if act == "swiglu":
            y = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + torch.finfo(x.dtype).eps) * layer.norm.weight
            g = _linear(y, layer.gate)
            hidden = g * torch.sigmoid(g) * _linear(y, layer.up)
        else:
            u = _linear(_layernorm(x, layer.norm), layer.up)
            hidden = (0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3))) if act == "gelu"
                      else u.clamp_min(0))
        x = x + _linear(hidden, layer.down)
    return _linear(_layernorm(x, block.head_norm), block.head) if block.head is not None else x


@pytest.mark.parametrize("name, out_shape, linears", [
    ("ctx-swiglu-m24-d64-h128-v100-fp32", (24, 100), 2 * 3 + 1),
    ("ctx-gelu-m17-d64-h256-fp32", (17, 64), 2 * 2),
    ("ctx-relu-m9-d32-h64-fp32", (9, 32), 2 * 2),
])
def test_blocks_build_and_compute_what_they_say(name, out_shape, linears):
    spec = cb.parse(name)
    module, (x,), step = models.get(name).build(torch.device("cpu"))
    assert step == "forward" and isinstance(module, cb.ContextBlock) and len(module.layers) == cb.LAYERS
    assert x.shape == (spec["m"], spec["d"]) and x.dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in module.parameters())
    lins = [m for m in module.modules() if isinstance(m, nn.Linear)]
    assert len(lins) == linears
    gated = spec["act"] == "swiglu"
    for layer in module.layers:
        assert isinstance(layer.norm, nn.RMSNorm if gated else nn.LayerNorm)
        assert (layer.gate is not None) == gated
        assert (layer.up.bias is None) == gated and (layer.down.bias is None) == gated
        assert (layer.up.in_features, layer.up.out_features, layer.down.out_features) == (
            spec["d"], spec["h"], spec["d"])
    assert (module.head is None) == (spec["v"] == 0)
    if module.head is not None:
        assert module.head.bias is None and isinstance(module.head_norm, nn.LayerNorm)
    with torch.no_grad():
        out = module(x)
        assert out.shape == out_shape and torch.isfinite(out).all()
        torch.testing.assert_close(out, _by_hand(module, spec["act"], x), rtol=1e-5, atol=1e-5)
        if module.head is None:
            assert not torch.allclose(out, x)  # the layers change their input
    # fresh processes rebuild from the name alone: the same weights and input every time, in any dtype asked
    again, (x2,), _ = cb.build_from_name(name)(torch.device("cpu"))
    assert torch.equal(x, x2) and all(torch.equal(a, b) for a, b in zip(module.parameters(), again.parameters()))
    wide, (xw,), _ = cb.build_from_name(name)(torch.device("cpu"), torch.float64)
    assert xw.dtype == torch.float64 and all(p.dtype == torch.float64 for p in wide.parameters())


def test_context_sample_adds_the_sampled_names(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(in_program, "run_all", lambda names, out, args: ran.append(names))
    monkeypatch.setattr(in_program, "report",
                        lambda out: {"agreement": None, "n": 0, "tolerance": 0.01, "noise": {}})
    assert in_program.main(["--models", "tiny-mlp", "--context-sample", "2", "--out", str(tmp_path)]) == 0
    assert ran == [["tiny-mlp", *cb.sampled_names(2)]]
    with pytest.raises(ValueError, match="unknown model 'ctx-nope'"):  # before any run
        in_program.main(["--models", "ctx-nope", "--out", str(tmp_path)])
    assert len(ran) == 1


def test_in_program_runner_on_a_context_block(tmp_path):
    name = "ctx-gelu-m17-d64-h256-fp32"
    env = {**os.environ, "PYTHONPATH": str(REPO), "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    cmd = [sys.executable, "-m", "collectors.in_program.collect", "--models", name, "--out", str(tmp_path),
           "--repeats", "3", "--noise-repeats", "1"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = json.loads((tmp_path / "results.json").read_text())
    record = next(r for r in records if r["run"] == "record")
    assert record["model"] == name and record["status"] == "ok" and record["correct"] is True
    assert record["hook_stats"]["gemms_seen"] >= 4  # up and down of both layers reach the hook
    assert sorted(r["run"] for r in records) == ["base:0", "record"]
    doc = json.loads((tmp_path / "tables" / f"{name}.json").read_text())
    assert doc["rows"] == []  # CPU GEMMs have no lookup key: nothing decided, nothing to flip


# --- the context dataset ----------------------------------------------------------------------------------------

def _problem(m, n, k, dtype="bfloat16"):
    return (f"Problem(op='mm', m={m}, n={n}, k={k}, dtype='{dtype}', b=1, out_dtype='{dtype}', layout_a='row', "
            "layout_b='col', align=16)")


def _gemm(model, problem, gap, hook, alternative, hook_ms, alternative_ms, resolved=True, count=1):
    return {"model": model, "problem": problem, "op": "mm", "count": count, "ideal_us": 12.5, "gap": gap,
            "hook": hook, "alternative": alternative, "hook_ms": hook_ms, "alternative_ms": alternative_ms,
            "resolved": resolved, "ratio_iqr": 0.002, "feeds_pointwise": hook == "cublas",
            "consumers": ["gelu", "add"] if hook == "cublas" else ["output"]}


@pytest.fixture
def folder(tmp_path):
    """Three GEMMs: (A) decode down projection, Triton 10% faster but the hook kept cuBLAS; (B) the hook took
    Triton and cuBLAS is 0.6% slower, inside the 1% tolerance; (C) fp32, cuBLAS 10% faster, unresolved."""
    gemms = [_gemm("ctx-swiglu-m8-d2048-h5632-bf16", _problem(8, 2048, 5632), 0.5, "cublas", "triton::mm",
                   1.0, 0.9, count=2),
             _gemm("ctx-gelu-m512-d768-h3072-bf16", _problem(512, 3072, 768), -2.0, "triton::mm", "cublas",
                   0.5, 0.503),
             _gemm("ctx-gelu-m512-d768-h3072-bf16", _problem(4096, 4096, 4096, "float32"), -3.0, "cublas",
                   "triton::mm", 2.0, 2.2, resolved=False)]
    doc = {"tolerance": 0.01, "gemms": gemms, "agreement": 0.5, "n": 2, "unresolved": 1,
           "gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "triton": "3.6.0"}
    (tmp_path / "agreement.json").write_text(json.dumps(doc))
    return tmp_path


def test_rows_put_each_step_on_its_side(folder):
    df = cd.rows_of(folder)
    assert len(df) == 3 and list(df.hook_side) == ["cublas", "triton::mm", "cublas"]
    assert list(df.triton_step_ms) == [0.9, 0.5, 2.2] and list(df.cublas_step_ms) == [1.0, 0.503, 2.0]
    np.testing.assert_allclose(df.triton_gain, [1.0 / 0.9 - 1, 0.503 / 0.5 - 1, 2.0 / 2.2 - 1])
    assert list(df.triton_template.fillna("-")) == ["triton::mm", "-", "triton::mm"]  # named when it is the flip
    assert list(df[["m", "n", "k"]].itertuples(index=False, name=None)) == [
        (8, 2048, 5632), (512, 3072, 768), (4096, 4096, 4096)]
    assert list(df.dtype) == ["bfloat16", "bfloat16", "float32"] and list(df.block_act) == ["swiglu", "gelu", "gelu"]
    assert list(df.resolved) == [True, True, False] and list(df["count"]) == [2, 1, 1]
    assert list(df.consumers) == ["gelu,add", "output", "gelu,add"] and list(df.feeds_pointwise) == [True, False, True]
    assert set(df.gpu) == {"NVIDIA H100 80GB HBM3"} and set(df.tolerance) == {0.01}


def test_agreement_counts_the_chosen_side_within_tolerance(folder):
    df = cd.rows_of(folder)
    # B is within 1% either way; A is only right on Triton, C only on cuBLAS
    assert cd.agreement(df, np.array([True, False, False])) == 1.0
    assert cd.agreement(df, np.array([False, True, True])) == pytest.approx(1 / 3)
    assert cd.agreement(df, np.array([True, True, True])) == pytest.approx(2 / 3)
    assert cd.agreement(df.assign(tolerance=0.0), np.array([True, False, False])) == pytest.approx(2 / 3)


def test_shipped_policy_applies_the_per_problem_gap(folder):
    df = cd.rows_of(folder)
    # A (m 8, k 5632) needs SMALL_M_LONG_K_GAP (2.0): 0.5 keeps cuBLAS, though the gap alone would take Triton
    assert list(cd.shipped_policy(df)) == [False, True, False]
    assert list(df.gap >= cd.DECIDE_MIN_GAP) == [True, True, False]
    assert list(cd.shipped_policy(df, gap=-1.5)) == [False, False, False]
    # C is float32: floored at FLOAT32_GAP (0.0), so even a -3.0 gap keeps cuBLAS there
    assert list(cd.shipped_policy(df, gap=-3.0)) == [False, True, False]


def test_main_writes_the_parquet_and_names_a_missing_folder(folder, tmp_path, capsys):
    out = tmp_path / "sub" / "context.parquet"
    assert cd.main(["--inprog", str(folder), "--out", str(out)]) == 0
    assert f"{out}: 3 GEMMs of 2 programs (2 resolved)" in capsys.readouterr().out
    assert pq.ParquetFile(out).metadata.row_group(0).column(0).compression == "ZSTD"
    back = cd.read_context(out)
    pd.testing.assert_frame_equal(back, cd.rows_of(folder))
    assert back.attrs["metadata"]["kind"] == cd.KIND and back.attrs["metadata"]["sources"] == [str(folder)]
    empty = tmp_path / "no_run"
    empty.mkdir()
    with pytest.raises(SystemExit):
        cd.main(["--inprog", str(empty), "--out", str(tmp_path / "x.parquet")])
    assert f"{empty}: no agreement.json" in capsys.readouterr().err
    assert not (tmp_path / "x.parquet").exists()
    for argv in ([], ["--inprog", str(folder)], ["--fit", str(out)]):
        with pytest.raises(SystemExit):
            cd.main(argv)


def test_the_committed_context_rows_and_their_fit():
    train = cd.rows_of(INPROG / "context_blocks")
    assert len(train) == 189 and int(train.resolved.sum()) == 157
    assert set(train.model) < set(cb.sampled_names(80)) and train.model.nunique() == 79  # one recorded, never paired
    assert set(train.block_act) == set(cb.ACTS)
    test = pd.concat([cd.rows_of(INPROG), cd.rows_of(INPROG / "held_out_set2")], ignore_index=True)
    text = cd.fit(train, test, 2)
    assert "gap" in text.split("\n\n")[0]  # the tree splits on the recorded gap
    assert f"| rule | train (context, 157 GEMMs) | test ({int(test.resolved.sum())} GEMMs) |" in text
    table = {line.split(" | ")[0].lstrip("| "): [float(c.strip(" |%")) for c in line.split(" | ")[1:]]
             for line in text.splitlines() if line.startswith("| ") and line.endswith("% |")}
    gap_alone = table["the gap alone at -1.5 (the gap -1.5 runs)"]
    shipped = table[f"shipped policy (decide_gap_for at {cd.DECIDE_MIN_GAP})"]
    assert len(table) == 3 and "depth-2 tree fitted on the context rows" in table
    assert shipped[1] >= gap_alone[1] and shipped[0] >= gap_alone[0]
    resolved = test[test.resolved]
    assert shipped[1] == pytest.approx(100 * cd.agreement(resolved, cd.shipped_policy(resolved)), abs=0.05)


def test_read_context_refuses_other_files_in_one_line(folder, tmp_path):
    from predictor.artifacts.schema import DatasetError

    with pytest.raises(DatasetError, match="not a context dataset"):
        cd.read_context(GEMM_LABELS)  # GEMM-candidate labels, not in-program decisions
    lacking = tmp_path / "lacking.parquet"
    cd.write_context(cd.rows_of(folder).drop(columns=["gap"]), lacking, [str(folder)])
    with pytest.raises(DatasetError, match=f"{lacking}: context dataset lacks column\\(s\\) gap"):
        cd.read_context(lacking)
