"""GEMMs of a few rows in a dynamic graph: the few-rows kernel (``few_rows_kernel``) where this GPU's labels say it
beats cuBLAS, dispatched on the actual row count at each call.

Why: under ``torch.compile(dynamic=True)`` a decode batch of 2-16 rows runs plain's cuBLAS, which read decoder weights
at 0.8-2.7 TB/s of an H100's 3.35, the bandwidth a GEMM of so few rows is bound by (``few_rows_kernel``).

How: while ``few_rows_gemms()`` is active (a compile of ``predictor.compile``), Inductor's ``mm``/``addmm``
decomposition turns a GEMM whose M is symbolic and whose weight is static in ``F.linear``'s layout (fp16/bf16) into
one custom op, ``gemm_predictor::few_rows_linear``, when the block table has a config for its (n, k): at each call
the op runs the few-rows kernel with that config if M is at most its ``rows``, else cuBLAS as plain does. The
decision is made at compile time from labels (``models/few-rows/<gpu>.json``, written by ``gemm-predictor
few-rows-fit`` from ``collectors.few_rows``); nothing is benchmarked. A CUDA graph captures the branch its size
takes.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import logging
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Callable

from ...artifacts.reading import InputError, check_positive, parse_json, read_table_bytes
from ...artifacts.roots import for_this_gpu, note_table, table_path
from ..compile_state import pow2_ceil, static_int
from .tables import added_entries, decomposition_tables

log = logging.getLogger(__name__)

Config = dict[str, int]  # BLOCK_N, BLOCK_K, num_warps, num_stages
GRID: tuple[Config, ...] = tuple(
    {"BLOCK_N": n, "BLOCK_K": k, "num_warps": w, "num_stages": s}
    for n, k, w, s in itertools.product((16, 32, 64), (128, 256, 512), (2, 4, 8), (3, 4, 6)))
SHARED_MEMORY_BYTES = 220 << 10  # an H100's 227 KB per block, less Triton's own
_ITEMSIZE = 2  # fp16 / bf16


def config_name(config: Config) -> str:
    """``N32_K256_w4_s4``: the candidate's name in the labels."""
    return f"N{config['BLOCK_N']}_K{config['BLOCK_K']}_w{config['num_warps']}_s{config['num_stages']}"


def parse_config_name(name: str) -> Config:
    """The inverse of ``config_name``; ValueError naming ``name`` otherwise."""
    try:
        n, k, w, s = name.split("_")
        if not (n[0], k[0], w[0], s[0]) == ("N", "K", "w", "s"):
            raise ValueError
        return {"BLOCK_N": int(n[1:]), "BLOCK_K": int(k[1:]), "num_warps": int(w[1:]), "num_stages": int(s[1:])}
    except ValueError:
        raise ValueError(f"not a few-rows block config name: {name!r}") from None


def fits(config: Config, n: int, k: int, block_m: int) -> bool:
    """A config whose blocks exceed the weight only idles lanes, and one whose pipeline exceeds shared memory does
    not compile: both skipped."""
    stage = (block_m + config["BLOCK_N"]) * config["BLOCK_K"] * _ITEMSIZE
    return (config["BLOCK_N"] <= pow2_ceil(n) and config["BLOCK_K"] <= pow2_ceil(k)
            and stage * config["num_stages"] <= SHARED_MEMORY_BYTES)


# --- the table: which config, if any, for a weight ---------------------------------------------------------------

TABLE_FOLDER = "few-rows"  # under a model root (artifacts.roots.model_roots)
ROWS = 16  # the op's kernel serves 2-16 rows (one tile of the tensor cores); more rows stay cuBLAS
MIN_GAIN = 1.03  # the nearest labelled weight's best config must beat cuBLAS by this, in geomean over its rows...
MIN_WORST = 0.97  # ...and lose by no more than this at any row count
MAX_DISTANCE = 2.0  # log2 units of n plus k: a weight farther from every labelled one stays cuBLAS
NEIGHBOURS = 2  # labelled weights a choice reads (``choose``)
DTYPES = ("float16", "bfloat16")  # the kernel multiplies on tensor cores; fp32 would be TF32 there, not cuBLAS's


def read_table(path: Path) -> list[dict[str, Any]]:
    """The labelled weights of one table: ``n``, ``k``, ``m`` (row counts), ``cublas_us`` and ``times`` (config
    name -> us per row count). Raises ValueError naming the file when it is not such a table."""
    return _read_table(path)[0]


def _read_table(path: Path) -> tuple[list[dict[str, Any]], bytes]:
    """``(problems, the file's bytes)``: one read, so the digest is of the very bytes the problems came from."""
    data = read_table_bytes(path, "few-rows block table")
    return parse_table(data, path), data


def parse_table(data: bytes, path: Path) -> list[dict[str, Any]]:
    """``read_table`` of a file's bytes (``path`` only names it in errors)."""
    try:
        problems = parse_json(data, path, "few-rows block table")["problems"]
        for p in problems:
            for key in ("n", "k"):
                check_positive(p[key], key, integer=True)
            for m in p["m"]:
                check_positive(m, "m", integer=True)
            if len(p["cublas_us"]) != len(p["m"]):
                raise ValueError("cublas_us and m differ in length")
            for us in p["cublas_us"]:
                check_positive(us, "cublas_us")
            for name, times in p["times"].items():
                parse_config_name(name)
                if len(times) != len(p["m"]):
                    raise ValueError(f"{name}: times and m differ in length")
                for us in times:
                    check_positive(us, f"times[{name!r}]")
    except InputError as exc:
        raise ValueError(str(exc)) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        text = (str(exc).splitlines() or [""])[0][:160]
        raise ValueError(f"{path}: not a few-rows block table ({type(exc).__name__}: {text})") from None
    return problems


def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _distance(p: dict[str, Any], n: int, k: int) -> float:
    return abs(math.log2(p["n"] / n)) + abs(math.log2(p["k"] / k))


def choose(n: int, k: int, problems: Sequence[dict[str, Any]], rows: int = ROWS) -> Config | None:
    """The block config for an (n, k) weight served up to ``rows`` rows, read from its ``NEIGHBOURS`` nearest
    labelled weights (within ``MAX_DISTANCE``): the config, among those that fit this weight at ``rows`` and step
    through its K in whole blocks, fastest in geomean over their row counts;
    None where cuBLAS keeps it: no weight near enough, or that config gains less than ``MIN_GAIN`` over cuBLAS
    there in geomean, or loses more than ``MIN_WORST`` at any of their row counts. Two neighbours, not one: where
    the kernel's edge ends (a narrow weight with a long K, few programs to stream it) the nearest weight alone
    may sit on the winning side (held out, 256 x 6144 took 256 x 3072's config and ran 0.81x cuBLAS). Whole
    blocks: a K that is not a multiple of the block masks every step, a form the labels of its neighbours do not
    time (Falcon's K of 4544, 64 past a multiple of 128: batch 2-16 decode steps ran 0.986-0.994x cuBLAS's)."""
    near = sorted((p for p in problems if _distance(p, n, k) <= MAX_DISTANCE), key=lambda p: _distance(p, n, k))
    near = near[:NEIGHBOURS]
    if not near:
        return None
    configs = {name: parse_config_name(name) for name in set.intersection(*(set(p["times"]) for p in near))}
    scored = [(geomean([t for p in near for t in p["times"][name]]), name) for name, c in configs.items()
              if fits(c, n, k, rows) and k % c["BLOCK_K"] == 0]
    if not scored:
        return None
    best_time, best = min(scored)
    cublas = [c for p in near for c in p["cublas_us"]]
    ratios = [c / t for p in near for c, t in zip(p["cublas_us"], p["times"][best])]
    if geomean(cublas) / best_time < MIN_GAIN or min(ratios) < MIN_WORST:
        return None
    return configs[best]


@functools.lru_cache(maxsize=None)
def _table(gpu_name: str, capability: str, roots: tuple[str, ...]) -> tuple[tuple[dict[str, Any], ...], str | None]:
    """(problems, digest) of this GPU's table (or one of its architecture: the H200 takes the H100's, the kernel
    being bandwidth-bound on the same SM), read once per process; none (cuBLAS everywhere) without one."""
    path = table_path(gpu_name, [Path(r) for r in roots], capability, folder=TABLE_FOLDER)
    note_table(TABLE_FOLDER, capability, path, gpu_name, "few-rows", f"GEMMs of 2-{ROWS} rows", "cuBLAS")
    if path is None:
        return (), None
    try:
        problems, data = _read_table(path)
    except ValueError as exc:
        log.warning("gemm-predictor: %s; GEMMs of a few rows keep cuBLAS", exc)
        return (), None
    rule = (f"whole K blocks;rows={ROWS};gain={MIN_GAIN};worst={MIN_WORST};distance={MAX_DISTANCE};"
            f"neighbours={NEIGHBOURS}").encode()
    return tuple(problems), hashlib.sha256(data + rule).hexdigest()[:16]


def _this_gpus_table(allow_similar: bool = True) -> tuple[tuple[dict[str, Any], ...], str | None]:
    return for_this_gpu(_table, ((), None), allow_similar)


def table_for_this_gpu(allow_similar: bool = True) -> tuple[dict[str, Any], ...]:
    """The table's labelled weights for the current CUDA GPU (empty without one, or without a GPU);
    ``allow_similar``: another GPU's table of this architecture where this one has none."""
    return _this_gpus_table(allow_similar)[0]


def table_digest(allow_similar_gpu: bool = True) -> str | None:
    """A hash of this GPU's table and of the rule reading it (part of the hook's cache key)."""
    return _this_gpus_table(allow_similar_gpu)[1]


# --- the op ------------------------------------------------------------------------------------------------------

LIBRARY = "gemm_predictor"
OP = "few_rows_linear"
_LIBRARIES: list[Any] = []


def _run(x: Any, weight: Any, bias: Any, rows: int, block_n: int, block_k: int, warps: int, stages: int) -> Any:
    """``x @ weight.T (+ bias)``: the few-rows kernel for at most ``rows`` rows of a CUDA ``x``, else cuBLAS as
    plain runs it (``mm``/``addmm``, what Inductor's generated code calls)."""
    if x.is_cuda and x.shape[0] <= rows and x.stride(1) == 1 and weight.stride(1) == 1:
        return _kernel()(x, weight, bias, rows, block_n, block_k, warps, stages)
    return x.mm(weight.t()) if bias is None else bias.addmm(x, weight.t())


@functools.cache
def _kernel() -> Callable[..., Any]:
    """``few_rows_kernel.few_rows_linear``, imported at the first call (it imports Triton; a CPU needs neither)."""
    from .few_rows_kernel import few_rows_linear

    return few_rows_linear


@functools.cache
def _op() -> Any:
    """``gemm_predictor::few_rows_linear``, defined once per process. Inductor calls it as an extern kernel with its
    inputs as it lays them out (``flexible_layout``): the weight is the parameter itself, and an input several
    projections share (a norm's output feeding q, k and v) is realized once and read through views. Under
    ``needs_exact_strides`` torch 2.11 copied it once per op, three stores of the norm's output where plain's ``mm``
    has one. The kernel takes any row stride; a column stride other than 1 runs cuBLAS (``_run``)."""
    import torch

    library = torch.library.Library(LIBRARY, "FRAGMENT")
    _LIBRARIES.append(library)  # a Library deregisters its ops when collected
    tags = [t for t in (getattr(torch.Tag, "flexible_layout", None),) if t is not None]
    library.define(f"{OP}(Tensor x, Tensor weight, Tensor? bias, int rows, int block_n, int block_k, int warps, "
                   "int stages) -> Tensor", tags=tags)
    library.impl(OP, _run, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{LIBRARY}::{OP}", lambda x, weight, bias, *config: x.new_empty(
        x.shape[0], weight.shape[0]), lib=library)
    return getattr(getattr(torch.ops, LIBRARY), OP).default


# --- the decomposition -------------------------------------------------------------------------------------------

_COUNTS = {"few_rows_gemms": 0}


def few_rows_count() -> int:
    """GEMMs traced into the few-rows op in this process."""
    return _COUNTS["few_rows_gemms"]


def takes_few_rows(a: Any, b: Any, bias: Any, devices: Sequence[str]) -> bool:
    """A 2-D GEMM on ``devices`` in fp16/bf16 whose M is symbolic, with a static weight in ``F.linear``'s layout
    (``b`` is ``weight.t()``: column-major) and no bias or a bias of one value per output."""

    if not (a.device.type in devices and a.dim() == 2 and b.dim() == 2 and a.dtype == b.dtype
            and str(a.dtype).removeprefix("torch.") in DTYPES and static_int(a.shape[0]) is None):
        return False
    k, n = (static_int(s) for s in b.shape)
    if k is None or n is None or static_int(a.shape[1]) != k or tuple(map(static_int, b.stride())) != (1, k):
        return False
    return bias is None or (bias.dim() == 1 and static_int(bias.shape[0]) == n and bias.dtype == a.dtype
                            and static_int(bias.stride(0)) == 1)


@contextlib.contextmanager
def few_rows_gemms(choose_config: Callable[[int, int], Config | None],
                   devices: Sequence[str] = ("cuda",)) -> Iterator[None]:
    """While active, Inductor's ``mm``/``addmm`` decompositions turn every GEMM ``takes_few_rows`` accepts and
    ``choose_config(n, k)`` gives a config into the few-rows op; the others keep the decomposition they had.
    Restored on exit, also on an error."""
    import torch

    op = _op()

    def replaced(bias: Any, a: Any, b: Any) -> Any:
        if not takes_few_rows(a, b, bias, devices):
            return NotImplemented
        config = choose_config(b.shape[1], b.shape[0])
        if config is None:
            return NotImplemented
        _COUNTS["few_rows_gemms"] += 1
        config_args = (ROWS, config["BLOCK_N"], config["BLOCK_K"], config["num_warps"], config["num_stages"])
        if a.device.type == "cuda":
            _compile_ahead(a.dtype, int(b.shape[1]), int(b.shape[0]), bias is not None, config_args, a.device)
        return op(a, b.t(), bias, *config_args)

    def addmm(bias: Any, a: Any, b: Any, *, beta: Any = 1, alpha: Any = 1) -> Any:
        return replaced(bias, a, b) if beta == 1 and alpha == 1 else NotImplemented

    aten = torch.ops.aten
    entries = {aten.mm.default: lambda a, b: replaced(None, a, b), aten.addmm.default: addmm}
    with added_entries(decomposition_tables(), entries, "predictor_few_rows"):
        yield


_AHEAD: list[Any] = []  # the thread pool compiling kernels ahead, made on first use
_AHEAD_DONE: set[tuple] = set()


def _compile_ahead(dtype: Any, n: int, k: int, has_bias: bool, config_args: tuple[int, ...], device: Any) -> None:
    """Compile the kernel this GEMM will run in a background thread while Inductor compiles the rest of the graph
    (a Triton compile at the first call would add to the compile a user waits for); once per kernel. A failure
    here only leaves the compile to the first call."""
    from concurrent.futures import ThreadPoolExecutor

    import torch

    key = (dtype, n, k, has_bias, config_args, device)
    if key in _AHEAD_DONE:
        return
    _AHEAD_DONE.add(key)
    if not _AHEAD:
        _AHEAD.append(ThreadPoolExecutor(max_workers=4, thread_name_prefix="few_rows_compile"))
    index = device.index if device.index is not None else torch.cuda.current_device()

    def compile_one() -> None:
        from .few_rows_kernel import warm

        try:
            warm(dtype, n, k, has_bias, *config_args, device=index)
        except Exception as exc:  # noqa: BLE001 - the first call compiles it instead
            log.debug("gemm-predictor: few-rows kernel not compiled ahead (%s)", exc)

    _AHEAD[0].submit(compile_one)


def rule_for_this_gpu(allow_similar: bool = True) -> Callable[[int, int], Config | None]:
    """``choose`` with this GPU's table, as one compile applies it (cuBLAS everywhere without a table)."""
    problems = table_for_this_gpu(allow_similar)
    return lambda n, k: choose(n, k, problems) if problems else None
