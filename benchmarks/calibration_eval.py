"""How good is a calibrated model for a new GPU, per minute of its calibration budget? (CPU)

Scores, on the new GPU's labels of the problem groups the base model held out (never collected by calibrate):
the base model as it is, the calibrated model ("union" of the base GPU's training rows and the new GPU's rows
labelled within 2, 5, 10 and 15 minutes), the new GPU's rows alone at the same budgets, and a model trained
on all of the new GPU's labels of the training groups.

    python -m benchmarks.calibration_eval --dataset datasets/nvidia-h100/default.parquet \\
        --ledger datasets/nvidia-h100/calibration/ledger.json --base-model models/h200-default-lgbm \\
        --out docs/calibration/nvidia-h100
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from predictor.artifacts.model_folder import load_model
from predictor.core.device import DeviceInfo
from predictor.offline.calibrate_fit import base_training_rows, fit_calibrated
from predictor.offline.calibration import Ledger
from predictor.offline.split import in_groups
from predictor.offline.train import evaluate_ranker
from predictor.artifacts.schema import read_dataset

MINUTES = (2, 5, 10, 15)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", required=True, help="the new GPU's labelled dataset (held-out groups included)")
    ap.add_argument("--ledger", required=True, help="calibration/ledger.json of the calibration run")
    ap.add_argument("--base-model", default="models/h200-default-lgbm")
    ap.add_argument("--out", required=True, help="folder for table.md and table.json")
    args = ap.parse_args(argv)

    rows = read_dataset(args.dataset)
    device = DeviceInfo.from_metadata(rows.attrs["metadata"])
    base_rows, base_device, held_out = base_training_rows(args.base_model)
    test = rows[in_groups(rows, held_out)]
    train = rows[~in_groups(rows, held_out)]
    labelled = Ledger(Path(args.ledger).parent.parent).labelled  # problem_id -> calibration seconds

    def score(name: str, model, minutes, problems) -> dict:
        m = evaluate_ranker(model, test, device)
        print(f"{name:28s} {str(minutes):>6s} {problems:6d}  oracle@1 {m['oracle@1']:.4f}  oracle@5 {m['oracle@5']:.4f}", flush=True)
        return {"model": name, "minutes": minutes, "new_gpu_problems": problems, "oracle@1": m["oracle@1"],
                "oracle@5": m["oracle@5"], "hit@1": m["hit@1"], "p5@5": m["p5@5"]}

    table = [score(f"{Path(args.base_model).name} as it is", load_model(args.base_model)[0], "0", 0)]
    for minutes in MINUTES:
        pids = {p for p, t in labelled.items() if t <= 60 * minutes}
        new = train[train["problem_id"].isin(pids)]
        n = new["problem_id"].nunique()
        table.append(score("calibrated (union)", fit_calibrated(new, device, base_rows, base_device, "union"), str(minutes), n))
        table.append(score("new GPU rows only", fit_calibrated(new, device, method="new-only"), str(minutes), n))
    table.append(score("all new-GPU training labels", fit_calibrated(train, device, method="new-only"), "all",
                       train["problem_id"].nunique()))

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    header = {"gpu": device.gpu, "base_model": args.base_model, "test_problems": int(test["problem_id"].nunique()),
              "test_groups": held_out, "dataset": args.dataset,
              "torch": rows.attrs["metadata"].get("torch"), "triton": rows.attrs["metadata"].get("triton")}
    (out / "table.json").write_text(json.dumps({**header, "rows": table}, indent=1) + "\n")
    frame = pd.DataFrame(table)
    lines = [f"# Calibration on {device.gpu}", "",
             f"Held-out: {header['test_problems']} problems of the {len(held_out)} groups `{args.base_model}` held out "
             f"(labels measured on the {device.gpu}; torch {header['torch']}, triton {header['triton']}).", "",
             "| model | calibration minutes | new-GPU problems | oracle@1 | oracle@5 | hit@1 | p5@5 |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r.model} | {r.minutes} | {r.new_gpu_problems} | {r._4:.4f} | {r._5:.4f} | {r._6:.3f} | {r._7:.3f} |"
              for r in frame.rename(columns={"oracle@1": "_4", "oracle@5": "_5", "hit@1": "_6", "p5@5": "_7"}).itertuples()]
    lines += ["", "```", "python -m benchmarks.calibration_eval " + " ".join(sys.argv[1:] if argv is None else argv), "```", ""]
    (out / "table.md").write_text("\n".join(lines))
    print(f"wrote {out / 'table.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
