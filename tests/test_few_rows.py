"""GEMMs of a few rows in a dynamic graph (``predictor.runtime.lowerings.few_rows``) on the CPU: which config a weight gets from
the labels, the op's dispatch on the actual row count, the decomposition that puts it in a dynamic graph, and the
table fit. (The kernel itself, on a GPU: tests/test_gpu_few_rows.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch._inductor.utils import run_and_get_code

from predictor.offline import few_rows_fit
from predictor.runtime.lowerings import few_rows as fr
from predictor.artifacts.roots import table_path

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "models" / fr.TABLE_FOLDER / "nvidia-h100.json"
FAST, SLOW = "N16_K128_w4_s6", "N64_K512_w8_s3"


def _weight(n: int, k: int, cublas: float, fast: float, slow: float = 99.0) -> dict:
    return {"n": n, "k": k, "m": [2, 4, 8, 16], "cublas_us": [cublas] * 4,
            "times": {FAST: [fast] * 4, SLOW: [slow] * 4}}


def test_config_names_round_trip_and_what_does_not_fit_is_skipped():
    assert all(fr.parse_config_name(fr.config_name(c)) == c for c in fr.GRID)
    with pytest.raises(ValueError, match="X8_R256"):
        fr.parse_config_name("X8_R256_w4")
    big = {"BLOCK_N": 64, "BLOCK_K": 512, "num_warps": 8, "num_stages": 6}  # 480 KB of pipeline
    assert not fr.fits(big, 4096, 4096, 16)
    assert not fr.fits(fr.parse_config_name(SLOW), 16, 4096, 16)  # 64 outputs a program for 16
    assert fr.fits(fr.parse_config_name(FAST), 2048, 2048, 16)


def test_a_weight_takes_the_config_its_two_nearest_labelled_weights_agree_on():
    table = [_weight(2048, 2048, 10.0, 8.0), _weight(4096, 2048, 20.0, 16.0), _weight(256, 8192, 10.0, 20.0)]
    assert fr.choose(3072, 2048, table) == fr.parse_config_name(FAST)
    assert fr.choose(256, 8192, table) is None  # cuBLAS wins there
    assert fr.choose(2048, 65536, table) is None  # nothing labelled near
    assert fr.choose(3072, 2000, table) is None  # a K of no whole 128-wide blocks: no labelled form of it
    # the nearest wins, the second nearest loses at one row count: cuBLAS
    losing = _weight(4096, 2048, 20.0, 16.0)
    losing["times"][FAST][3] = 25.0
    assert fr.choose(2048, 2048, [_weight(2048, 2048, 10.0, 8.0), losing]) is None
    # a gain under MIN_GAIN is no reason to leave cuBLAS
    assert fr.choose(2048, 2048, [_weight(2048, 2048, 10.0, 9.9), _weight(4096, 2048, 20.0, 19.8)]) is None


def test_a_table_that_is_not_one_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "nvidia-h100.json"
    path.write_text(json.dumps({"problems": [{"n": 1, "k": 1, "m": [2], "cublas_us": [1.0], "times": {"X": [1]}}]}))
    with pytest.raises(ValueError, match="nvidia-h100.json: not a few-rows block table"):
        fr.read_table(path)


def test_the_shipped_table_serves_its_gpu_and_its_architecture():
    problems = fr.read_table(TABLE)
    assert len(problems) >= 40 and all(p["m"] == [2, 4, 8, 16] for p in problems)
    assert table_path("NVIDIA H100 80GB HBM3", [ROOT / "models"], folder=fr.TABLE_FOLDER) == TABLE
    assert table_path("NVIDIA H200", [ROOT / "models"], capability="9.0", folder=fr.TABLE_FOLDER) == \
        TABLE.with_name("nvidia-h200.json")
    assert table_path("NVIDIA A100-SXM4-80GB", [ROOT / "models"], capability="8.0", folder=fr.TABLE_FOLDER) is None
    assert fr.choose(2048, 2048, problems) is not None  # a decoder's projection: labelled a win


def test_the_op_runs_cublas_above_its_rows_and_off_the_gpu():
    op = fr._op()
    x, w, b = torch.randn(5, 64), torch.randn(32, 64), torch.randn(32)
    torch.testing.assert_close(op(x, w, b, 16, 16, 128, 4, 6), torch.addmm(b, x, w.t()))
    torch.testing.assert_close(op(torch.randn(40, 64), w, None, 16, 16, 128, 4, 6).shape, torch.Size([40, 32]))


def _model(bias: bool = True) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 96, bias=bias), torch.nn.ReLU(), torch.nn.Linear(96, 32)).to(
        torch.bfloat16).eval()


def _compile(model: torch.nn.Module, x: torch.Tensor, dynamic: bool, rule=lambda n, k: fr.parse_config_name(FAST)):
    torch._dynamo.reset()
    compiled = torch.compile(model, dynamic=dynamic)
    with torch.no_grad(), fr.few_rows_gemms(rule, devices=("cpu",)), \
            torch._inductor.config.patch(force_disable_caches=True):
        _, (code, *_) = run_and_get_code(compiled, x)
    return compiled, code


def test_a_dynamic_graphs_linear_layers_become_the_op_and_serve_every_size_in_one_graph():
    model, count = _model(), fr.few_rows_count()
    compiled, code = _compile(model, torch.randn(7, 64, dtype=torch.bfloat16), dynamic=True)
    assert fr.few_rows_count() == count + 2 and code.count("few_rows_linear") >= 2
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    with torch.no_grad():
        for m in (2, 16, 17, 300):  # the kernel's rows, its edge, and beyond (cuBLAS on a GPU)
            x = torch.randn(m, 64, dtype=torch.bfloat16)
            torch.testing.assert_close(compiled(x), model(x), rtol=2e-2, atol=2e-2)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs  # no recompile across the sizes


def test_static_sizes_fp32_and_weights_without_a_config_keep_their_gemms():
    count = fr.few_rows_count()
    _, code = _compile(_model(), torch.randn(7, 64, dtype=torch.bfloat16), dynamic=False)
    _compile(_model().float(), torch.randn(7, 64), dynamic=True)
    _, none = _compile(_model(), torch.randn(7, 64, dtype=torch.bfloat16), dynamic=True, rule=lambda n, k: None)
    assert fr.few_rows_count() == count and "few_rows_linear" not in code + none


def test_an_input_shared_by_several_projections_is_written_once_and_read_through_views():
    """A decoder's norm feeds its q, k and v projections. Through the few-rows ops the generated kernels are plain's
    (the norm stores its output once) and the three ops read that one buffer through views; under
    ``needs_exact_strides`` torch 2.11 copied it once per op (three stores). Inductor's Triton codegen for CPU
    tensors (``cpu_triton_codegen``): the code as written for a GPU, not run."""
    pytest.importorskip("triton")
    transformers = pytest.importorskip("transformers")
    from cpu_triton_codegen import written

    torch.manual_seed(0)
    config = transformers.OPTConfig(vocab_size=128, hidden_size=64, num_hidden_layers=1, ffn_dim=128,
                                    num_attention_heads=4, max_position_embeddings=64, word_embed_proj_dim=64)
    model = transformers.OPTForCausalLM(config).to(torch.bfloat16).eval()
    ids = torch.randint(0, 128, (1, 37))
    block = fr.parse_config_name(FAST)

    def logits(x):
        return model(input_ids=x, use_cache=False).logits

    plain = written(logits, ids, dynamic_dim=1)
    ours = written(logits, ids.clone(), dynamic_dim=1,
                   during=fr.few_rows_gemms(lambda n, k: block, devices=("cpu",)))
    assert plain.kernels and sorted(ours.stores()) == sorted(plain.stores())
    calls = [line.strip() for code in ours.wrappers for line in code.splitlines()
             if "few_rows_linear.default(" in line and not line.lstrip().startswith("#")]
    assert len(calls) == 7, calls  # q, k, v, out, fc1, fc2, the head
    first_args = {call.split("default(", 1)[1].split(", arg", 1)[0] for call in calls[:3]}
    assert len(first_args) == 1 and first_args.pop().startswith("reinterpret_tensor(buf"), calls[:3]


def test_the_decompositions_are_restored_on_exit_and_on_an_error():
    from torch._inductor import decomposition

    before = decomposition.decompositions[torch.ops.aten.mm.default]
    with pytest.raises(RuntimeError, match="boom"):
        with fr.few_rows_gemms(lambda n, k: None, devices=("cpu",)):
            assert decomposition.decompositions[torch.ops.aten.mm.default] is not before
            raise RuntimeError("boom")
    assert decomposition.decompositions[torch.ops.aten.mm.default] is before


def _labels(rows: list[tuple[int, int, int, str, float]]) -> pd.DataFrame:
    return pd.DataFrame([{"n": n, "k": k, "m": m, "candidate": c, "time_us": t, "status": "ok"}
                         for n, k, m, c, t in rows])


def test_the_fit_keeps_the_configs_measured_at_every_row_count_and_holds_each_weight_out():
    rows = []
    for n, fast in ((2048, 8.0), (4096, 16.0), (8192, 50.0)):
        for m in (2, 4, 8, 16, 32):
            rows += [(n, 2048, m, "aten/mm", n / 200), (n, 2048, m, f"few_rows/{FAST}", fast)]
        rows.append((n, 2048, 2, f"few_rows/{SLOW}", 1.0))  # measured at one row count only: dropped
    probs = few_rows_fit.problems(_labels(rows))
    assert [p["n"] for p in probs] == [2048, 4096, 8192] and all(list(p["times"]) == [FAST] for p in probs)
    assert probs[0]["m"] == [2, 4, 8, 16]  # 32 rows: beyond the kernel's
    result = few_rows_fit.held_out(probs).set_index("n")
    # the kernel wins at 2048 and 4096 (10.24 and 20.48 us for cuBLAS) and loses at 8192 (40.96); held out, each
    # weight's choice comes from the other two: 8192 takes the kernel and its own labels show the loss, 2048 keeps
    # cuBLAS for its second neighbour's loss
    assert result.loc[8192, "choice"] == FAST and result.loc[8192, "vs_cublas"] == pytest.approx(40.96 / 50.0)
    assert result.loc[2048, "choice"] == "cuBLAS" and result.loc[2048, "vs_cublas"] == 1.0
    assert result.loc[2048, "vs_oracle"] == pytest.approx(8.0 / 10.24)


def test_a_32_row_tier_reads_the_labels_above_16_rows_and_only_configs_whose_pipeline_fits_32_rows():
    deep = "N16_K512_w4_s6"  # six stages of (rows + 16) x 512: fits shared memory at 16 rows, not at 32
    config = fr.parse_config_name(deep)
    assert fr.fits(config, 2048, 2048, 16) and not fr.fits(config, 2048, 2048, 32)
    rows = []
    for n in (2048, 4096, 8192):
        for m in (2, 4, 8, 16, 32):
            rows += [(n, 2048, m, "aten/mm", 20.0), (n, 2048, m, f"few_rows/{deep}", 10.0),
                     (n, 2048, m, f"few_rows/{FAST}", 16.0)]
    probs = few_rows_fit.problems(_labels(rows), 32, 16)
    assert [p["m"] for p in probs] == [[32]] * 3
    assert set(few_rows_fit.held_out(probs, rows_served=32)["choice"]) == {FAST}
    assert set(few_rows_fit.held_out(probs, rows_served=16)["choice"]) == {deep}


def test_a_32_row_tier_is_a_report_only_and_other_row_counts_are_refused_naming_them():
    labels = str(ROOT / "datasets/nvidia-h100/few_rows.parquet")
    report = few_rows_fit.run(labels, None, rows=32)
    assert report.startswith("Few rows: 51 weights at 32 rows (the kernel's rows padded to 32)")
    with pytest.raises(ValueError, match="rows 24: the labels time the kernel for 16 or 32 rows"):
        few_rows_fit.run(labels, None, rows=24)
    with pytest.raises(ValueError, match="rows 32: the runtime serves 16 rows; a 32-row tier is a report only"):
        few_rows_fit.run(labels, "table.json", rows=32)


def test_a_repeat_times_each_collections_choices_with_the_others_labels():
    first = [_weight(2048, 2048, 10.0, 8.0), _weight(4096, 2048, 20.0, 16.0), _weight(8192, 2048, 40.0, 32.0)]
    # the repeat: the kernel's win at 4096 was noise there, it ties cuBLAS
    repeat = [_weight(2048, 2048, 10.0, 8.0), _weight(4096, 2048, 20.0, 20.0), _weight(8192, 2048, 40.0, 32.0)]
    choices = few_rows_fit.held_out(first)
    assert list(choices["choice"]) == [FAST] * 3
    timed = few_rows_fit.timed_with(choices, repeat)
    assert timed[(4096, 2048)] == pytest.approx(1.0) and timed[(2048, 2048)] == pytest.approx(1.25)
    report = "\n".join(few_rows_fit.repeat_report(first, repeat))
    assert "| the dataset | the repeat | 1.160 | 1.000 |" in report  # (1.25 * 1.0 * 1.25) ** (1/3)
    assert "the same choice from both: " in report


def test_a_repeat_from_another_gpu_is_refused_naming_it(tmp_path):
    import pyarrow.parquet as pq

    from predictor.artifacts.schema import write_parquet

    labels = ROOT / "datasets/nvidia-h100/few_rows.parquet"
    table = pq.read_table(labels)
    other = write_parquet(table.replace_schema_metadata({**table.schema.metadata, b"gpu": b'"NVIDIA H200"'}),
                          tmp_path / "other.parquet")
    with pytest.raises(ValueError, match="other.parquet: collected on NVIDIA H200, .* on NVIDIA H100"):
        few_rows_fit.run(str(labels), None, str(other))


def test_the_shortlist_keeps_the_configs_closest_to_every_weights_own_best():
    a, b, c = "N16_K128_w4_s6", "N32_K128_w4_s4", "N64_K128_w2_s3"
    probs = [{"n": n, "k": 2048, "m": [2], "cublas_us": [20.0], "times": times} for n, times in (
        (1024, {a: [10.0], b: [11.0], c: [30.0]}), (2048, {a: [10.0], b: [12.0], c: [30.0]}),
        (4096, {a: [12.0], b: [10.0], c: [15.0]}))]
    assert few_rows_fit.shortlist(probs, 1) == [a]
    assert few_rows_fit.shortlist(probs, 2) == [a, b]
    assert all(list(p["times"]) == [b] for p in few_rows_fit.restricted(probs, [b]))


@pytest.mark.parametrize("gpu", ["nvidia-h100", "nvidia-h200"])
def test_the_shipped_table_is_the_fit_of_the_shipped_labels(tmp_path, gpu):
    from predictor.offline.gemv_eval import read_labels

    labels = f"datasets/{gpu}/few_rows.parquet"
    frame = read_labels(ROOT / labels, few_rows_fit.KIND)
    probs = few_rows_fit.problems(frame)
    out = tmp_path / f"{gpu}.json"
    few_rows_fit.write_table(few_rows_fit.restricted(probs, few_rows_fit.shortlist(probs)), out,
                             frame.attrs["metadata"], labels)
    shipped = ROOT / "models" / fr.TABLE_FOLDER / f"{gpu}.json"
    assert json.loads(out.read_text()) == json.loads(shipped.read_text())


def test_a_training_step_through_the_op_gets_the_gradients_of_eager():
    """The op comes in beneath autograd (Inductor decomposes the traced forward and backward); a backward GEMM
    (the weight untransposed, or M in its reduction) keeps its own decomposition."""
    torch._dynamo.reset()
    model, count = _model(), fr.few_rows_count()
    reference = _model()
    compiled = torch.compile(model, dynamic=True)
    for m in (3, 9):
        x = torch.randn(m, 64, dtype=torch.bfloat16)
        with fr.few_rows_gemms(lambda n, k: fr.parse_config_name(FAST), devices=("cpu",)), \
                torch._inductor.config.patch(force_disable_caches=True):
            compiled(x).float().sum().backward()
        reference(x).float().sum().backward()
    assert fr.few_rows_count() == count + 2  # the two forward GEMMs, once: one graph for both sizes
    for ours, eager in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours.grad, eager.grad, rtol=3e-2, atol=3e-2)


INTERPRETED = [  # rows masked below the 16-row tile; a partial last block of outputs; a K tail; bias or none
    {"m": 5, "n": 70, "k": 300, "bias": True, "block_n": 16, "block_k": 128},
    {"m": 16, "n": 64, "k": 256, "bias": False, "block_n": 32, "block_k": 128},
    {"m": 2, "n": 33, "k": 128, "bias": True, "block_n": 64, "block_k": 128},
]


def test_the_kernel_matches_the_fp32_product_under_tritons_interpreter():
    from interpreter import run_interpreted

    errors = run_interpreted("interpret_few_rows_check.py", INTERPRETED)
    assert len(errors) == len(INTERPRETED) and max(errors) < 2e-3, errors
