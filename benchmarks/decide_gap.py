"""Calibrate ``predictor.runtime.choices.policy.DECIDE_MIN_GAP``: how far must the model's favourite Triton kernel lead cuBLAS?

    python -m benchmarks.decide_gap --model models/h200-default-lgbm --dataset datasets/nvidia-h200/default.parquet
    python -m benchmarks.decide_gap --model models/h100-default-lgbm --dataset datasets/nvidia-h100/default.parquet --m-range 2-16
    python -m benchmarks.decide_gap ... --m-range 2-16 --in-program datasets/nvidia-h100/context.parquet

On the model's held-out problem groups (shapes it never trained on), for every problem with an aten candidate:
the score gap between the model's favourite and the best aten candidate, and the true time ratio (aten / favourite).
Prints, per gap threshold, how often a non-aten pick runs > 3% slower than cuBLAS and the "decide" policy's
oracle (geomean over problems of best time / time of the one kept candidate). With ``--in-program``, the same
question asked of whole-step timings: per band of the recorded gap, how often the Triton side of a decision made
the program faster, and by how much of the step (an in-program dataset such as
datasets/nvidia-h100/context.parquet; resolved fp16/bf16 rows: float32 mm keeps its own floor). CPU only.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from predictor.artifacts.model_folder import load_model
from predictor.core.device import DeviceInfo
from predictor.offline.metrics import decided_fraction, decision_sides
from predictor.offline.split import in_groups, recorded_test_groups
from predictor.runtime.choices.policy import DECIDE_MIN_GAP
from predictor.artifacts.schema import read_dataset

THRESHOLDS = (-4.0, -3.0, -2.5, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 6.0, float("inf"))


def table(p: pd.DataFrame) -> pd.DataFrame:
    """Per threshold: the policy takes the favourite non-aten candidate when ``gap >= threshold``, else cuBLAS."""
    lines = []
    for th in THRESHOLDS:
        picked = p[p.gap >= th]
        frac = decided_fraction(p, th)
        lines.append({"gap >=": th, "triton picks": len(picked),
                      "picks > 3% slower than cuBLAS": round(float((picked.aten_over_fav < 0.97).mean()), 3)
                      if len(picked) else float("nan"),
                      "picks' geomean gain": round(float(np.exp(np.log(picked.aten_over_fav).mean())), 3)
                      if len(picked) else float("nan"),
                      "policy oracle": round(float(np.exp(np.log(frac).mean())), 4),
                      "policy p5": round(float(np.quantile(frac, 0.05)), 3)})
    return pd.DataFrame(lines)


# cuBLAS under the shipped gap | Triton taken only because of the negative gap | Triton favoured outright
GAP_BANDS = (-float("inf"), DECIDE_MIN_GAP, 0.0, float("inf"))


def in_program_table(rows: pd.DataFrame, m_range: tuple[int, int] | None = None) -> pd.DataFrame:
    """Per band of the recorded score gap (``GAP_BANDS``): decisions, how many ran the step faster on the Triton
    side, and the mean and median ``triton_gain`` (cuBLAS step / Triton step - 1), over resolved fp16/bf16 rows of
    an in-program dataset with M in ``m_range``."""
    rows = rows[rows.resolved & rows.dtype.isin(["float16", "bfloat16"])]
    if m_range is not None:
        rows = rows[rows.m.between(*m_range)]
    bands = pd.cut(rows.gap, GAP_BANDS, right=False)
    out = rows.groupby(bands, observed=False).triton_gain.agg(
        decisions="size", triton_faster=lambda g: int((g > 0).sum()), mean_gain="mean", median_gain="median")
    out.index = [f"[{b.left:g}, {b.right:g})" for b in out.index]
    return out.rename_axis("gap").reset_index().round(3)


def _m_range(parser: argparse.ArgumentParser, text: str | None) -> tuple[int, int] | None:
    """``LO-HI`` -> (LO, HI); a one-line parser error naming the value otherwise."""
    if text is None:
        return None
    lo, sep, hi = text.partition("-")
    if not (sep and lo.isdigit() and hi.isdigit() and int(lo) <= int(hi)):
        parser.error(f"--m-range {text!r}: expected LO-HI with LO <= HI, e.g. 2-16")
    return int(lo), int(hi)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="models/h200-default-lgbm", help="a model trained with a held-out split")
    parser.add_argument("--dataset", default="datasets/nvidia-h200/default.parquet")
    parser.add_argument("--m-range", default=None, metavar="LO-HI",
                        help="only problems with LO <= M <= HI (e.g. 2-16: a decoder's small batches)")
    parser.add_argument("--in-program", default=None, metavar="PARQUET",
                        help="also: whole-step timings of each decision's two sides per gap band (an in-program "
                             "dataset, e.g. datasets/nvidia-h100/context.parquet)")
    args = parser.parse_args(argv)
    m_range = _m_range(parser, args.m_range)
    ranker, meta = load_model(args.model)
    groups = recorded_test_groups(meta)
    if not groups:
        parser.error(f"{args.model} records no held-out groups (a --refit-all model?); pass a split model")
    rows = read_dataset(args.dataset)
    rows = rows[in_groups(rows, groups) & (rows.status == "ok")].reset_index(drop=True)
    rows["score"] = ranker.score(rows, DeviceInfo.from_metadata(meta))
    p = decision_sides(rows)
    if m_range is not None:
        p = p[p.m.between(*m_range)]
        if p.empty:
            parser.error(f"--m-range {args.m_range}: no held-out problem has M in that range")
    print(f"{args.model} on {len(p)} held-out problems of {args.dataset} ({(p.gap >= 0).sum()} favour non-aten)")
    print(table(p).to_string(index=False))
    for dtype, g in p.groupby("dtype"):
        print(f"  {dtype}: {len(g)} problems, {(g.gap >= 0).sum()} favour non-aten")
    if args.in_program:
        try:
            context = pd.read_parquet(args.in_program)
        except (OSError, ValueError) as exc:
            parser.error(f"--in-program {args.in_program}: cannot read it ({exc})")
        print(f"\nIn the program ({args.in_program}; resolved fp16/bf16 decisions; "
              "gain = cuBLAS step / Triton step - 1):")
        print(in_program_table(context, m_range).to_string(index=False))


if __name__ == "__main__":
    main()
