"""The subcommands of the per-GPU tables and the side evaluations: ``gemv-eval``, ``gemv-fit``, ``few-rows-fit``,
``region-eval``, ``grouped-fit``, ``size-range-eval``. Each calls an importable function of ``predictor.offline``."""

from __future__ import annotations

import argparse
from collections.abc import Callable

# the CLI's own helpers, given by ``predictor.cli`` (this module does not import the CLI that imports it)
AddCommand = Callable[[argparse._SubParsersAction, str, str], argparse.ArgumentParser]


def add_table_commands(sub: argparse._SubParsersAction, add: AddCommand, model_argument: Callable[[str], str]) -> None:
    """Every subcommand of this module, in the order ``gemm-predictor --help`` lists them; ``add`` makes a
    subcommand (``cli.add_command``), ``model_argument`` reads a model folder argument (``cli.model_folder``). Each
    subcommand returns its report; the CLI prints it (this module writes nothing to the terminal itself)."""
    for register in (_add_gemv_eval, _add_gemv_fit, _add_few_rows_fit, _add_region_eval, _add_grouped_fit,
                     _add_size_range_eval):
        register(sub, add, model_argument)


def _add_gemv_eval(sub: argparse._SubParsersAction, add: AddCommand, model_argument: Callable[[str], str]) -> None:
    p = add(sub, "gemv-eval", "the GEMV rule on GEMV labels: its threshold and held-out oracle@1 beside "
                                      "cuBLAS-only and the reduction everywhere")
    p.add_argument("dataset", help="GEMV labels written by python -m collectors.gemv")

    def run(args: argparse.Namespace) -> str:
        from .gemv_eval import evaluate, markdown, read_labels

        return markdown(*evaluate(read_labels(args.dataset)))

    p.set_defaults(func=run)


def _add_region_eval(sub: argparse._SubParsersAction, add: AddCommand, model_argument: Callable[[str], str]) -> None:
    from ..core.regions import REGIONS, SHORT_UNALIGNED

    p = add(sub, "region-eval", "a region model beside the main model: each region group held out in turn, "
                                        "the policy oracle per decide gap")
    p.add_argument("--main", required=True, type=model_argument, help="the GPU's main model folder, e.g. models/h100-default-lgbm-all")
    p.add_argument("--dataset", required=True, nargs="+",
                   help="labels of that GPU: the main model's corpus first, then the region's own labels")
    p.add_argument("--region", choices=REGIONS, default=SHORT_UNALIGNED, help="which region (predictor/regions.py)")

    def run(args: argparse.Namespace) -> str:
        from .region_eval import evaluate, markdown

        return markdown(evaluate(args.main, args.dataset, args.region))

    p.set_defaults(func=run)


def _add_gemv_fit(sub: argparse._SubParsersAction, add: AddCommand, model_argument: Callable[[str], str]) -> None:
    p = add(sub, "gemv-fit", "GEMV block labels -> the runtime's block table and its held-out oracle@1")
    p.add_argument("dataset", help="GEMV block labels written by python -m collectors.gemv_blocks")
    p.add_argument("--out", help="write the table here (models/gemv-blocks/<gpu>.json)")
    p.add_argument("--against", metavar="FULL_LABELS",
                   help="instead: score the table of DATASET (a calibration's cut) against the table of these labels "
                        "of the same GPU, both timed on FULL_LABELS, each model held out")

    def run(args: argparse.Namespace) -> str:
        from .gemv_blocks_fit import run as fit, run_compare

        if args.against:
            if args.out:
                raise ValueError("--against compares two tables and writes none: leave out --out")
            return run_compare(args.dataset, args.against)
        return fit(args.dataset, args.out)

    p.set_defaults(func=run)


def _add_few_rows_fit(sub: argparse._SubParsersAction, add: AddCommand, model_argument: Callable[[str], str]) -> None:
    p = add(sub, "few-rows-fit", "few-rows labels -> the runtime's block table, each weight held out")
    p.add_argument("dataset", help="few-rows labels written by python -m collectors.few_rows")
    p.add_argument("--out", help="write the table here (models/few-rows/<gpu>.json)")
    p.add_argument("--repeat", help="a second collection of the same problems (same GPU): each one's held-out "
                                    "choices timed with the other's labels")
    p.add_argument("--rows", type=int, default=16, help="the rows a kernel serves: 16 (the runtime's) or 32 (a "
                                                        "report for 17-32 rows, held out; no table)")

    def run(args: argparse.Namespace) -> str:
        from .few_rows_fit import run as fit

        return fit(args.dataset, args.out, args.repeat, args.rows)

    p.set_defaults(func=run)


def _add_grouped_fit(sub: argparse._SubParsersAction, add: AddCommand, model_argument: Callable[[str], str]) -> None:
    p = add(sub, "grouped-fit", "grouped-GEMM labels -> one config per band of rows per expert, held out")
    p.add_argument("dataset", help="grouped-GEMM labels written by python -m collectors.grouped_mm")
    p.add_argument("--out", default=None, help="write the runtime's table here (models/grouped-mm/<gpu>.json)")
    p.add_argument("--decode-config", default=None, metavar="BM,BN,BK,STAGES,WARPS",
                   help="the decode band's config where whole decode steps chose another than the fit")
    p.add_argument("--max-decode-experts", type=int, default=None,
                   help="above this many experts a decode step keeps aten's grouped GEMM (from whole steps)")

    def run(args: argparse.Namespace) -> str:
        from .grouped_mm_fit import run as fit

        return fit(args.dataset, args.out, args.decode_config, args.max_decode_experts)

    p.set_defaults(func=run)


def _add_size_range_eval(sub: argparse._SubParsersAction, add: AddCommand, model_argument: Callable[[str], str]) -> None:
    p = add(sub, "size-range-eval",
                    "one kernel per range of a symbolic M vs cuBLAS and per-size decisions, and bounds learned "
                    "with each family held out, on a dataset's M-sweeps")
    p.add_argument("dataset", help="a bulk dataset with M-sweep families (datasets/<gpu>/default.parquet)")
    p.add_argument("--model", required=True, type=model_argument, help="a model folder fit on a split (its held-out families are marked)")

    def run(args: argparse.Namespace) -> str:
        from .size_range_eval import run as evaluate

        return evaluate(args.dataset, args.model)

    p.set_defaults(func=run)
