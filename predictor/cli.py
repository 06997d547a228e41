"""gemm-predictor: train, evaluate and export learned GEMM-kernel rankers for PyTorch Inductor.

Each subcommand calls an importable function. Other packages add subcommands (the GPU collectors add collect,
collect-inductor, merge and calibrate) through the ``gemm_predictor.commands`` entry-point group, so this package
never imports them and installs without them.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Iterable
import sys
from pathlib import Path

DEFAULT_DATASET = "datasets/nvidia-h200/default.parquet"
DEFAULT_MODEL = "models/h200-default-lgbm"
DEFAULT_COMPARE = ("models/h200-default-tree",)  # the other shipped ranker, shown beside the default
PLUGIN_GROUP = "gemm_predictor.commands"  # entry points: callables taking the subparsers object
# what the offline subcommands import beyond the runtime's torch and numpy: the `train` extra brings them
TRAIN_EXTRA_MODULES = frozenset({"pandas", "pyarrow", "sklearn", "scipy", "lightgbm", "matplotlib", "tqdm", "joblib"})


class FORMATTER(argparse.ArgumentDefaultsHelpFormatter):
    """Shows every option's default, except where there is none to show: a required option, an on/off flag, or a
    help text that already says its default."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.required or isinstance(action, argparse._StoreTrueAction) or "default" in text:
            return text
        if action.default is None and action.option_strings:
            return text + " (default: not set)"
        return super()._get_help_string(action)


def add_command(sub: argparse._SubParsersAction, name: str, summary: str) -> argparse.ArgumentParser:
    """A subcommand whose one-line ``summary`` shows in the command list and atop its own --help, defaults shown.
    It takes ``-v`` too (SUPPRESS: given only before the subcommand, the top-level value stands)."""
    p = sub.add_parser(name, help=summary, description=summary, formatter_class=FORMATTER)
    p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="debug logging")
    return p


def model_folder(text: str) -> str:
    """A model folder argument: as given where it exists; else ``models/<name>`` names a shipped model, found in the
    package's own models (an installed wheel's, or this checkout's), whatever the working directory."""
    path = Path(text)
    if path.exists() or path.is_absolute() or len(path.parts) != 2 or path.parts[0] != "models":
        return text
    from .artifacts.roots import shipped_roots

    for root in shipped_roots():
        if (root / path.parts[1]).is_dir():
            return str(root / path.parts[1])
    return text


def dataset_path(text: str) -> str:
    """A dataset argument: as given where it exists; else ``datasets/...`` is read from the checkout this package
    runs from (datasets never enter the wheel), whatever the working directory."""
    path = Path(text)
    checkout = Path(__file__).resolve().parents[1]
    if (path.exists() or path.is_absolute() or path.parts[:1] != ("datasets",)
            or not (checkout / "pyproject.toml").is_file() or not (checkout / path).exists()):
        return text
    return str(checkout / path)


def _ranker_names() -> tuple[str, ...] | None:
    try:
        from .rankers import RANKERS
    except ImportError:  # no train extra: train itself then says which extra to install
        return None
    return tuple(RANKERS)


def _ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--k must be comma-separated integers, got {text!r}") from None
    if any(k < 1 for k in ks):
        raise argparse.ArgumentTypeError(f"--k values must be >= 1, got {text!r}")
    return ks


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "train", "train a ranker on a dataset and save a model folder")
    p.add_argument("--dataset", default=[DEFAULT_DATASET], nargs="+", type=dataset_path,
                   help="one dataset, or several of one GPU (with --space exhaustive: exhaustive rows where a problem "
                        "has them, else its default rows)")
    p.add_argument("--ranker", default="lgbm", choices=_ranker_names(), help="which ranker to fit")
    p.add_argument("--out", required=True, help="model folder, e.g. my-models/<name> (outside the package's models/)")
    p.add_argument("--force", action="store_true",
                   help="write --out inside the package's shipped models/ folder, replacing a shipped model there")
    p.add_argument("--space", default="default", choices=("default", "exhaustive"),
                   help="which candidate list the dataset rows and the model cover")
    p.add_argument("--seed", type=int, default=0, help="seed of the train/test split by problem group")
    p.add_argument("--test-fraction", type=float, default=0.25, help="share of problem groups held out for testing")
    p.add_argument("--refit-all", action="store_true", help="after measuring on the split, refit on all rows")
    p.add_argument("--holdout-from", metavar="MODEL", type=model_folder,
                   help="hold out exactly the problem groups this model folder held out (instead of --seed/"
                        "--test-fraction), so a model retrained on a grown dataset is scored on the same unseen groups")
    p.add_argument("--learn-failures", action="store_true",
                   help="lgbm: also learn from failed rows (as the slowest); the exhaustive space offers many configs "
                        "that fail to launch (shared memory / registers), which an ok-only model may rank first")
    from .core.regions import REGIONS

    p.add_argument("--region", choices=REGIONS, default=None,
                   help="fit on one region's problems alone (predictor/regions.py); the hook scores that region's "
                        "GEMMs with it beside the GPU's main model")

    def run(args: argparse.Namespace) -> int:
        from .offline.train import train

        _refuse_shipped_folder(args.out, args.force)
        holdout = None
        if args.holdout_from:
            from .artifacts.model_folder import read_metadata
            from .offline.split import recorded_test_groups

            holdout = recorded_test_groups(read_metadata(args.holdout_from))
            if not holdout:
                raise ValueError(f"--holdout-from {args.holdout_from}: its metadata records no split.test_groups")
        result = train([dataset_path(d) for d in args.dataset], args.ranker, args.out, seed=args.seed, space=args.space,
                       test_fraction=args.test_fraction, refit_all=args.refit_all,
                       params={"learn_failures": True} if args.learn_failures else None, holdout_groups=holdout,
                       force=args.force, region=args.region)
        _print_metrics(result.get("metrics", result))
        return 0

    p.set_defaults(func=run)


def _refuse_shipped_folder(out: str, force: bool) -> None:
    """A new model folder inside the package's ``models/`` would ship in the next wheel, could be found by the hook
    for its GPU in place of the shipped model (``discovery.find_model``), and fails the tests that hold every model
    there to its card: refused unless ``--force`` (how the shipped models themselves are retrained)."""
    from .artifacts.roots import shipped_roots

    parent = Path(out).expanduser().resolve().parent
    root = next((r for r in shipped_roots() if Path(r).resolve() == parent), None)
    if root is not None and not force:
        raise ValueError(f"--out {out}: inside the package's shipped models folder {root}; write elsewhere (e.g. "
                         f"my-models/{Path(out).name}; the hook finds it with GEMM_PREDICTOR_MODELS=my-models) or "
                         "pass --force (nothing was written)")


def _print_metrics(metrics: object) -> None:
    import json

    print(json.dumps(metrics, indent=1, default=str))  # whole: a pipe reads it as JSON


def _add_evaluate(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "evaluate", "offline accuracy of a model and every baseline on held-out problems; writes a report")
    p.add_argument("--model", default=DEFAULT_MODEL, type=model_folder,
                   help="model folder to evaluate (models/<name>: a shipped model, from any working directory)")
    p.add_argument("--dataset", default=DEFAULT_DATASET, type=dataset_path,
                   help="labelled dataset (parquet) of the model's GPU")
    p.add_argument("--space", default="default", choices=("default", "exhaustive"), help="candidate list to rank")
    p.add_argument("--k", type=_ks, default="1,2,3,5,8,10",
                   help="comma-separated k values: how many top-ranked candidates are benchmarked")
    p.add_argument("--split", default="test", choices=("test", "all"), help="held-out groups only, or every row")
    p.add_argument("--compare-model", action="append", default=None, type=model_folder,
                   help=f"another model folder to show beside it (default: {', '.join(DEFAULT_COMPARE)})")
    p.add_argument("--out", default="reports/default", help="folder for report.md, metrics.json and the plots")

    def run(args: argparse.Namespace) -> int:
        from .offline.evaluate import run_evaluation

        compare = args.compare_model
        if compare is None:  # the shipped default: show the other shipped ranker when it is there
            from .artifacts.model_folder import read_metadata

            compare = [m for m in map(model_folder, DEFAULT_COMPARE) if Path(m).is_dir()
                       and Path(m).resolve() != Path(args.model).resolve()
                       and read_metadata(m).get("space", "default") == args.space]
        run_evaluation(args.model, args.dataset, args.out, space=args.space, ks=args.k, split=args.split,
                       compare_models=compare, command=" ".join(["gemm-predictor", *sys.argv[1:]]))
        report = (Path(args.out) / "report.md").read_text()
        headline = report.split("## Headline", 1)[1].split("\n## ", 1)[0]
        print("Headline" + headline.rstrip())
        print(f"\nfull report: {Path(args.out) / 'report.md'} (plots beside it)")
        return 0

    p.set_defaults(func=run)


def _add_report(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "report", "compare two evaluation results (metrics.json) side by side")
    p.add_argument("--compare", nargs=2, required=True, metavar=("A", "B"), help="two metrics.json files or report dirs")
    p.add_argument("--labels", nargs=2, default=None, help="column names (default: the report folders' names)")

    def run(args: argparse.Namespace) -> int:
        from .offline.evaluate import compare

        _, markdown = compare(args.compare[0], args.compare[1], labels=args.labels or _report_labels(args.compare))
        print(markdown)
        return 0

    p.set_defaults(func=run)


def _add_export(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "export", "compile a program with the hook and write its GEMM decisions as Inductor's "
                                   "lookup table (docs/DEPLOY.md)")
    p.add_argument("--program", required=True, metavar="SCRIPT_OR_MODULE",
                   help="a .py file or importable module defining make() -> (model, example_inputs); run once under "
                        "torch.no_grad(), on the GPU and with the shapes production uses")
    p.add_argument("--out", required=True, help="the table's JSON file")
    p.add_argument("--predictor-model", default=None, type=model_folder,
                   help="model folder (default: the shipped one for this GPU)")

    def run(args: argparse.Namespace) -> int:
        from .offline.export import export_program

        try:
            doc = export_program(args.program, args.out, predictor_model=args.predictor_model)
        except (AssertionError, RuntimeError) as exc:  # e.g. "Torch not compiled with CUDA enabled" from make()
            import torch

            if isinstance(exc, RuntimeError) and torch.cuda.is_available():
                raise
            where = "" if torch.cuda.is_available() else (f"; export runs on the target GPU, and torch "
                                                          f"{torch.__version__} here has no CUDA device")
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ValueError(f"--program {args.program}: {first}{where}") from None
        g = doc["gemms"]
        print(f"wrote {args.out}: {g['keys']} GEMM keys ({g['by_template']}) for {doc['gpu']}, torch {doc['torch']}")
        return 0

    p.set_defaults(func=run)


def _report_labels(paths: list[str]) -> tuple[str, str]:
    """Each report's folder name (a metrics.json file's folder), or the paths as given when the names clash."""
    names = tuple((p.parent if p.suffix == ".json" else p).resolve().name or str(p) for p in map(Path, paths))
    if names[0] != names[1]:
        return names
    return (paths[0], paths[1]) if paths[0] != paths[1] else (f"{paths[0]} (A)", f"{paths[1]} (B)")


def _add_refit(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "refit", "fold label stores (the tuned mode's benchmarks) into a local model for this GPU, "
                                  "validated against the base model's held-out problems (docs/LEARN.md)")
    p.add_argument("--store", action="append", default=[], metavar="DIR",
                   help="a label store folder (repeat for several machines'); default: this GPU's store")
    p.add_argument("--folded", action="append", default=[], metavar="FILE",
                   help="a file an earlier --fold-out wrote (a fleet's shard); repeatable")
    p.add_argument("--shard", default=None, metavar="I/N", help="only the parts of shard I of N (with --fold-out)")
    p.add_argument("--fold-out", default=None, metavar="FILE",
                   help="write the folded rows as one dataset file and stop (merges stores; a fleet's shard task)")
    p.add_argument("--base-model", default=None, help="model folder to continue (default: the shipped one)")
    p.add_argument("--dataset", default=None, help="the base model's dataset (default: the one its metadata names)")
    p.add_argument("--out", default=None, help="model folder (default: <local models root>/<base>-local)")
    p.add_argument("--weight", type=float, default=4.0, help="weight of a store row against a base row")
    p.add_argument("--rounds", type=int, default=60, help="trees added to the base model")

    def run(args: argparse.Namespace) -> int:
        import json

        from .offline import refit as refit_mod

        shard = None
        if args.shard is not None:
            i, _, n = args.shard.partition("/")
            if not (i.isdigit() and n.isdigit() and 0 <= int(i) < int(n)):
                raise ValueError(f"--shard {args.shard!r}: expected I/N with 0 <= I < N")
            shard = (int(i), int(n))
        stores = args.store or ([] if args.folded else [str(refit_mod.this_store())])
        if args.fold_out is not None:
            try:
                rows, summary = refit_mod.fold_stores(stores, args.folded, shard=shard)
            except refit_mod.EmptyFold:
                if shard is None:
                    raise
                print(json.dumps({"rows": 0, "parts": 0, "dest": None}))  # an empty shard: nothing to merge
                return 0
            refit_mod.write_folded(rows, summary, args.fold_out)
            print(json.dumps({"rows": len(rows), "problems": int(rows["problem_id"].nunique()),
                              "parts": len(summary["parts"]), "skipped": len(summary["skipped"]), "dest": args.fold_out}))
            return 0
        if shard is not None:
            raise ValueError("--shard folds one shard: give --fold-out too")
        meta = refit_mod.refit(stores, args.folded, args.base_model, args.out, args.dataset, args.weight, args.rounds)
        v = meta["refit"]["validation"]
        print(f"wrote {meta['name']} ({meta['refit']['store_problems']} store problems, {meta['refit']['seconds']} s): "
              f"held-out oracle@1 {v['refit_oracle@1']:.4f} (base {v['base_oracle@1']:.4f})")
        return 0

    p.set_defaults(func=run)


def build_parser(plugins: Iterable[Callable[[argparse._SubParsersAction], None]] = ()) -> argparse.ArgumentParser:
    """The parser with this package's subcommands, then those of ``plugins`` and of installed entry points."""
    parser = argparse.ArgumentParser(prog="gemm-predictor", description=__doc__.splitlines()[0],
                                     formatter_class=FORMATTER)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_train(sub)
    _add_evaluate(sub)
    _add_report(sub)
    from .offline.table_commands import add_table_commands  # imported where the parser is built, as offline code is

    add_table_commands(sub, add_command, model_folder)
    _add_export(sub)
    _add_refit(sub)
    registered = set()
    for register in [*plugins, *_entry_point_plugins()]:
        key = (getattr(register, "__module__", None), getattr(register, "__qualname__", None))
        if key not in registered:  # an installed plugin also passed explicitly: add its subcommands once
            registered.add(key)
            register(sub)
    return parser


def _entry_point_plugins() -> list[Callable[[argparse._SubParsersAction], None]]:
    from importlib.metadata import entry_points

    found = []
    for ep in entry_points(group=PLUGIN_GROUP):
        try:
            found.append(ep.load())
        except ImportError as exc:  # a plugin whose dependencies are missing: the rest of the CLI still works
            logging.getLogger(__name__).debug("gemm-predictor: plugin %s not loaded: %s", ep.name, exc)
    return found


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gemm-predictor")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "(not installed)"


def _fail(message: str) -> int:
    print(f"gemm-predictor: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None,
         plugins: Iterable[Callable[[argparse._SubParsersAction], None]] = ()) -> int:
    parser = build_parser(plugins)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        result = args.func(args)
        if isinstance(result, str):  # a report (offline.table_commands): printed here, exit 0
            print(result)
            return 0
        return int(result or 0)
    except KeyboardInterrupt:
        print(f"gemm-predictor: {args.command} interrupted", file=sys.stderr)
        return 130  # 128 + SIGINT, as a shell reports it
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in TRAIN_EXTRA_MODULES:
            raise
        return _fail(f"{args.command} needs {exc.name}, which the train extra brings: "
                     "pip install 'gemm-predictor[train]'")
    except (ValueError, OSError, RuntimeError, KeyError) as exc:
        # every user-facing error is one line naming the file or value (OSError: a disk full, a permission denied)
        return _fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


if __name__ == "__main__":
    sys.exit(main())
