"""Every causal-LM architecture transformers ships, shrunk, through ``predictor.compile(dynamic=True)`` on the CPU:
one compile per family, called at several (batch, tokens) and compared with eager.

    python -m benchmarks.architecture_sweep --out sweep.json                  # every family (about 20 s each)
    python -m benchmarks.architecture_sweep --out sweep.json --families llama,qwen3_moe,gpt2

Why on the CPU: what breaks a dynamic compile of an architecture never seen (a guard on a size, a decomposition
reading a symbolic width, a GEMM form the hook does not know) breaks it on any device. The GEMV decisions run on
CPU tensors here, decided by a GPU's shipped table (``--gemv-table``), as on that GPU. Each family is built from
its transformers config class with the same tiny widths (``TINY``), so no family is chosen or tuned by hand; one
that cannot be built from them is reported as ``not built``. Results are written after every family (resumed on a
rerun) and printed as a table; each family runs in a process of its own, so one that crashes or hangs is recorded
as such and the rest go on.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, vocab_size=1000, max_position_embeddings=256, num_experts=4, num_local_experts=4,
            n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=64,
            tie_word_embeddings=False)
SHAPES = ((1, 1), (3, 1), (1, 7), (2, 5))  # (batch, tokens): batch-1 decode, served decode, prefill
TOLERANCE = 1e-3


def families() -> list[str]:
    """Every model type transformers maps to a causal-LM class."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def build(family: str) -> Any:
    """The family's causal LM at ``TINY`` widths, fp32, eval mode, wrapped to take token ids and give logits."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from collectors.programs.builders import HFOut

    torch.manual_seed(0)
    config = CONFIG_MAPPING[family](**TINY)
    lm = AutoModelForCausalLM.from_config(config).float().eval()
    return HFOut(lm, ("input_ids",), "logits", use_cache=False, logits_to_keep=1), config.vocab_size


def run_family(family: str) -> dict[str, Any]:
    """One family's record: status (ok, mismatch, compile_error, not_built), the largest error against eager, the
    graphs Dynamo compiled, the GEMVs the hook decomposed."""
    import torch

    import predictor
    from predictor.runtime.lowerings import gemv

    torch._dynamo.reset()
    started = time.perf_counter()
    record: dict[str, Any] = {"family": family}
    try:
        model, vocab = build(family)
        with torch.no_grad():
            model(torch.randint(0, vocab, (1, 3)))  # eager must run at all
    except Exception as exc:  # noqa: BLE001 - a family these widths cannot build is reported, the sweep goes on
        return {**record, "status": "not_built", "error": f"{type(exc).__name__}: {exc}"[:300]}
    compiled = predictor.compile(model, dynamic=True, cudagraphs=False)
    graphs, gemvs = torch._dynamo.utils.counters["stats"]["unique_graphs"], gemv.gemv_count()
    worst = 0.0
    try:
        with torch.no_grad():
            for batch, tokens in SHAPES:
                ids = torch.randint(0, vocab, (batch, tokens))
                worst = max(worst, float((compiled(ids) - model(ids)).abs().max()))
        status = "ok" if worst <= TOLERANCE else "mismatch"
        error = None
    except Exception as exc:  # noqa: BLE001
        status, error = "compile_error", f"{type(exc).__name__}: {exc}"[:300]
    return {**record, "status": status, "max_abs_err": worst, "error": error,
            "graphs": torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs,
            "gemv_decompositions": gemv.gemv_count() - gemvs, "seconds": round(time.perf_counter() - started, 1)}


def in_child(family: str, gemv_table: str, timeout: float) -> dict[str, Any]:
    """``run_family`` in a process of its own: a family that kills its process (out of memory, a crash in a
    kernel) or hangs is recorded as such, and the sweep goes on."""
    import json
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "record.json"
        command = [sys.executable, "-m", "benchmarks.architecture_sweep", "--one", family, "--out", str(out),
                   "--gemv-table", gemv_table]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"family": family, "status": "timeout", "error": f"no result within {timeout:.0f} s"}
        if out.exists():
            return json.loads(out.read_text())
        tail = (done.stderr or "").strip().splitlines()[-1:] or [""]
        return {"family": family, "status": "crashed", "error": f"exit status {done.returncode}: {tail[0]}"[:300]}


def decide_gemvs_as(gpu_name: str) -> None:
    """Let the GEMV decisions act on CPU tensors, decided by ``gpu_name``'s shipped table (what that GPU would do)."""
    from predictor.artifacts.roots import shipped_roots, table_path
    from predictor.runtime.lowerings import gemv, gemv_table

    path = table_path(gpu_name, shipped_roots(), folder=gemv_table.TABLE_FOLDER)
    if path is None:
        raise SystemExit(f"architecture_sweep: error: no shipped GEMV table for {gpu_name!r}")
    rows = tuple(gemv_table.read_table(path))
    gemv.DEVICES = ("cpu", "cuda")
    gemv_table.table_for_this_gpu = lambda allow_similar=True: rows


def table(records: list[dict[str, Any]]) -> str:
    lines = ["| family | status | max abs err vs eager | graphs | GEMV decompositions | s |", "|---|---|---|---|---|---|"]
    for r in records:
        err = f"{r['max_abs_err']:.1e}" if r.get("max_abs_err") is not None else "–"
        note = "" if r["status"] == "ok" else f" ({(r.get('error') or '')[:80]})"
        lines.append(f"| {r['family']} | {r['status']}{note} | {err} | {r.get('graphs', '–')} | "
                     f"{r.get('gemv_decompositions', '–')} | {r.get('seconds', '–')} |")
    counts = {s: sum(r["status"] == s for r in records)
              for s in ("ok", "mismatch", "compile_error", "crashed", "timeout", "not_built")}
    return "\n".join(lines + ["", ", ".join(f"{n} {s}" for s, n in counts.items())])


def main(argv: list[str] | None = None) -> int:
    import json

    from tqdm import tqdm

    from collectors.programs.harness import environment, write_json

    parser = argparse.ArgumentParser(prog="python -m benchmarks.architecture_sweep", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="results JSON (resumed: families in it are skipped)")
    parser.add_argument("--families", default=None, help="comma list of transformers model types (default: all)")
    parser.add_argument("--gemv-table", default="NVIDIA H100 80GB HBM3", metavar="GPU",
                        help="the GPU whose shipped GEMV table decides the GEMVs")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per family before it is stopped")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # the child process of one family
    args = parser.parse_args(argv)
    known = families()
    asked = [args.one] if args.one else args.families.split(",") if args.families else known
    unknown = [f for f in asked if f not in known]
    if unknown:
        parser.error(f"--families: not a causal-LM model type of this transformers: {', '.join(unknown)}")
    try:
        done = json.loads(args.out.read_text())["records"] if args.out.exists() and not args.one else []
    except (OSError, ValueError, KeyError, TypeError) as exc:
        parser.error(f"--out {args.out}: unreadable results ({exc}); give a new file")
    if args.one:  # a child of the sweep: this family alone, its record to --out
        decide_gemvs_as(args.gemv_table)
        write_json(str(args.out), run_family(args.one))
        return 0
    seen = {r["family"] for r in done}
    records = list(done)
    for family in tqdm([f for f in asked if f not in seen], unit="family"):
        records.append(in_child(family, args.gemv_table, args.timeout))
        write_json(str(args.out), {"environment": environment(), "gemv_table": args.gemv_table,
                                   "shapes": SHAPES, "tolerance": TOLERANCE, "records": records})
    print(table([r for r in records if r["family"] in asked]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
