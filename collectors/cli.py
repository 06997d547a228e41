"""GPU collection subcommands of ``gemm-predictor``: collect, collect-inductor, merge, calibrate.

Installed, they join ``gemm-predictor`` through the ``gemm_predictor.commands`` entry point (pyproject.toml), so the
predictor package never imports this one. ``python -m collectors.cli`` runs the whole CLI without installing.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from predictor.cli import add_command
from predictor.cli import main as predictor_main

log = logging.getLogger(__name__)

CORPUS = "datasets/corpus/corpus_v1.parquet"


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "collect", "time every candidate of a space for corpus problems on the local GPU(s)")
    p.add_argument("--corpus", default=CORPUS, help="shape corpus (parquet): the problems to label")
    p.add_argument("--out", required=True, help="folder of resumable parquet parts")
    p.add_argument("--space", default="default", choices=("default", "exhaustive"), help="candidate list to time")
    p.add_argument("--shard", default="0/1", help="i/n: take the i-th of n shards (by problem id)")
    p.add_argument("--gpus", default="0", help="'all', or comma-separated GPU indices (one worker each)")
    p.add_argument("--reps", type=int, default=10, help="timed runs per candidate (the label is their median)")
    p.add_argument("--limit", type=int, default=None, help="at most this many new problems per GPU")
    p.add_argument("--no-tma", action="store_true", help="leave persistent-TMA candidates out")
    p.add_argument("--filter", default=None, help="pandas query on corpus columns, e.g. \"dtype in ['float16']\"")
    p.add_argument("--workers", type=int, default=None, help="precompile processes (default: cores - 2)")
    p.add_argument("--resume-from", default=None,
                   help="a committed dataset file of this GPU to continue (its problems are skipped, metadata kept)")
    p.add_argument("--screen", type=float, default=None,
                   help="give the full --reps only to candidates within this factor of the fastest single launch "
                        "(the rest keep that one sample, reps=1); default 3 for --space exhaustive, off (0) otherwise")

    def run(args: argparse.Namespace) -> int:
        from .bulk import collect

        screen = args.screen if args.screen is not None else (3.0 if args.space == "exhaustive" else 0.0)
        if screen < 0:
            raise ValueError(f"--screen {screen}: must be 0 (off) or >= 1.5 (else near-best candidates lose reps)")

        stats = collect(args.corpus, args.out, space=args.space, shard=args.shard, gpus=args.gpus, reps=args.reps,
                        limit=args.limit, tma=not args.no_tma, precompile_workers=args.workers, query=args.filter,
                        resume_from=args.resume_from, screen=screen or None)
        print(json.dumps(stats))
        return 0

    p.set_defaults(func=run)

    q = add_command(sub, "collect-inductor", "record Inductor's own max-autotune timings for corpus problems")
    q.add_argument("--corpus", default=CORPUS, help="shape corpus (parquet): the problems to label")
    q.add_argument("--out", required=True, help="folder of resumable parquet parts")
    q.add_argument("--filter", default=None, help="pandas query on corpus columns, e.g. \"op == 'mm'\"")
    q.add_argument("--limit", type=int, default=None, help="at most this many problems")
    q.add_argument("--sample", type=int, default=None, help="a seeded random sample of this many problems")
    q.add_argument("--ids", default=None, help="file with one problem_id per line: collect exactly these, in order")
    q.add_argument("--shard", default="0/1", help="i/n: this process's share of the problems (one process per GPU)")
    q.add_argument("--skip-dataset", default=None, help="a dataset file whose problems are already done (skipped)")
    q.add_argument("--backends", default="ATEN,TRITON", help="Inductor's max_autotune_gemm_backends, e.g. ATEN,TRITON,CUTLASS")
    q.add_argument("--cutlass-wheel", default=None, help="nvidia_cutlass-*.whl to build the CUTLASS root from")
    q.add_argument("--cutlass-max-configs", type=int, default=None,
                   help="Inductor's cutlass_max_profiling_configs (default: all CUTLASS configs)")

    def run_inductor(args: argparse.Namespace) -> int:
        from .inductor import run_inductor_collection

        ids = None
        if args.ids:
            with open(args.ids) as handle:
                ids = [line.strip() for line in handle if line.strip()]
        n = run_inductor_collection(args.corpus, args.out, query=args.filter, limit=args.limit, sample=args.sample,
                                    ids=ids, shard=args.shard, backends=args.backends,
                                    cutlass_wheel=args.cutlass_wheel, cutlass_max_configs=args.cutlass_max_configs,
                                    skip_dataset=args.skip_dataset)
        print(json.dumps({"problems": n}))
        return 0

    q.set_defaults(func=run_inductor)

    m = add_command(sub, "merge", "merge a folder of parts into one dataset file (refuses duplicates and parts of "
                                  "different GPUs)")
    m.add_argument("parts", help="folder of parquet parts written by collect or collect-inductor")
    m.add_argument("dest", help="dataset file (parquet) to write; a dataset file of ours there is replaced")

    def run_merge(args: argparse.Namespace) -> int:
        from .store import merge_parts

        df = merge_parts(args.parts, args.dest)
        print(json.dumps({"rows": len(df), "problems": int(df.problem_id.nunique()), "dest": args.dest}))
        return 0

    m.set_defaults(func=run_merge)

    c = add_command(sub, "calibrate", "label the corpus problems that teach this GPU the most within a time budget, "
                                      "then fit its model (resumable; docs/CALIBRATE.md)")
    c.add_argument("--minutes", type=float, required=True, help="calibration budget over all runs of --parts, minutes")
    c.add_argument("--parts", required=True, help="folder of resumable parts (+ calibration/plan.parquet, ledger.json)")
    c.add_argument("--corpus", default=CORPUS, help="shape corpus (parquet): the problems to choose from")
    c.add_argument("--base-model", default="models/h200-default-lgbm", help="ranks candidates: its uncertainty plans")
    c.add_argument("--compare-model", default="models/h200-default-tree",
                   help="second ranker whose disagreement with the base model plans ('none' to leave out)")
    c.add_argument("--hold-out-groups-of", action="append", default=None, metavar="MODEL",
                   help="never collect the problem groups this model held out (repeatable; default: --base-model)")
    c.add_argument("--workers", type=int, default=None, help="precompile processes (default: cores - 2)")
    c.add_argument("--label-processes", type=int, default=1, metavar="N",
                   help="processes labelling the GEMV-block and few-rows tables at once on the GPU: their compiles "
                        "overlap, their timings take turns (default 1)")
    out = c.add_mutually_exclusive_group(required=True)
    out.add_argument("--out-root", help="folder to write every table into, as the runtime reads them "
                                        "(<root>/<gpu>-default-lgbm, <root>/gemv-blocks/<gpu>.json, ...): "
                                        "export GEMM_PREDICTOR_MODELS=<root>")
    out.add_argument("--out", help="the ranker's model folder alone, e.g. models/h100-default-lgbm")
    out.add_argument("--collect-only", action="store_true", help="collect within the budget, fit nothing")
    c.add_argument("--only", default=None, metavar="KIND[,KIND]",
                   help="calibrate these kinds alone: ranker, gemv-blocks, few-rows, grouped-mm (default: all with "
                        "--out-root or --collect-only, the ranker with --out)")
    c.add_argument("--fit-only", action="store_true", help="fit from the labels already in --parts, collect nothing")
    c.add_argument("--force", action="store_true", help="replace --out even when it is a shipped model")
    c.add_argument("--until-minutes", type=float, default=None,
                   help="fit on the problems labelled within this many calibration minutes (default: all)")
    c.add_argument("--method", default="union", choices=("union", "new-only"),
                   help="union: base GPU's training rows + this GPU's (default); new-only: this GPU's alone")

    def run_calibrate(args: argparse.Namespace) -> int:
        import functools
        import os
        from pathlib import Path

        from .calibrate import run_calibration_collection
        from .calibrate_tables import RANKER, TableLedger, collect_tables, fit_tables, parse_only

        if args.collect_only and args.fit_only:
            raise ValueError("calibrate: --collect-only and --fit-only exclude each other")
        kinds = parse_only(args.only or (RANKER if args.out else None))
        if args.out and kinds != [RANKER]:
            raise ValueError("calibrate: --out names the ranker's folder alone; give --out-root for the tables")
        if args.minutes <= 0:
            raise ValueError(f"--minutes {args.minutes}: must be positive")
        ranker_out = args.out
        if args.out or (args.out_root and RANKER in kinds):  # refuse a bad output folder before any GPU work
            from predictor.artifacts.atomic import MODEL, check_output_folder
            from predictor.offline.shipped import check_not_shipped

            target = args.out or os.path.join(args.out_root, "calibrated-default-lgbm")
            check_output_folder(target, MODEL)
            check_not_shipped(target, args.force)
        if args.out_root and not args.force:  # its tables would replace the shipped ones of this GPU
            from predictor.artifacts.atomic import OutputError
            from predictor.artifacts.roots import shipped_roots

            if Path(args.out_root).resolve() in {Path(r).resolve() for r in shipped_roots()}:
                raise OutputError(f"{Path(args.out_root).resolve()}: holds the shipped models and tables; pass "
                                  "--force to replace this GPU's (nothing was written)")
        if args.workers is not None and args.workers < 1:
            raise ValueError(f"--workers {args.workers}: must be at least 1")
        if args.label_processes < 1:
            raise ValueError(f"--label-processes {args.label_processes}: must be at least 1")
        workers = args.workers if args.workers is not None else max(1, (os.cpu_count() or 2) - 2)
        compare = None if args.compare_model in (None, "", "none") else args.compare_model
        parts = Path(args.parts)
        if not args.fit_only:
            import torch

            if not torch.cuda.is_available():  # before any file is written
                raise ValueError("calibrate needs a CUDA GPU and none is visible (torch.cuda.is_available() is "
                                 "False); --fit-only fits labels collected before")
            tables = [k for k in kinds if k != RANKER]
            if tables:
                print(json.dumps({"tables": collect_tables(tables, parts, args.minutes,
                                                                 processes=args.label_processes)}))
            if RANKER in kinds:  # the ranker takes what the tables left of the budget, over all runs
                ranker_minutes = args.minutes - sum(TableLedger(parts).spent.values()) / 60
                stats = run_calibration_collection(
                    args.corpus, args.parts, ranker_minutes, args.base_model,
                    args.hold_out_groups_of or [args.base_model], compare, workers,
                    prepare=functools.partial(_prepare_gpu, args.corpus, args.parts),
                    collect_fn=functools.partial(_collect_gpu, args.corpus, args.parts, workers))
                print(json.dumps(stats))
        if args.out_root:
            print(json.dumps({"tables": fit_tables(kinds, parts, Path(args.out_root))}))
            ranker_out = os.path.join(args.out_root, "calibrated-default-lgbm") if RANKER in kinds else None
        if ranker_out:
            from predictor.offline.calibrate_fit import calibrate_fit

            meta = calibrate_fit(args.parts, ranker_out, args.base_model, args.until_minutes, args.method,
                                 force=args.force)
            print(json.dumps({"model": ranker_out, **meta["calibration"]}))
        return 0

    c.set_defaults(func=run_calibrate)


def _prepare_gpu(corpus: str, parts: str):
    import torch

    from predictor.core.device import DeviceInfo

    from .bulk import prepare_run

    if not torch.cuda.is_available():
        raise RuntimeError("calibrate needs a CUDA GPU and none is visible (torch.cuda.is_available() is False)")
    return DeviceInfo.from_metadata(prepare_run(corpus, parts, "default", True, 10))


def _collect_gpu(corpus: str, parts: str, workers: int, order, should_stop, on_problem):
    from .bulk import collect

    return collect(corpus, parts, space="default", gpus="0", reps=10, tma=True, precompile_workers=workers,
                   order=order, should_stop=should_stop, on_problem=on_problem, part_every=10)


def main(argv: list[str] | None = None) -> int:
    """The whole ``gemm-predictor`` CLI with these subcommands, installed or not."""
    from collectors import cli  # by its own name: run as __main__, the installed entry point is this module too

    return predictor_main(argv, plugins=[cli.register])


if __name__ == "__main__":
    sys.exit(main())
