"""Export the hook's decisions to Inductor's own lookup table, so production compiles with torch alone.

``export_table(model, example_inputs, "table.json")`` compiles once with :func:`predictor.compile` (one choice
per GEMM, no benchmark), records each GEMM's final choice while Inductor lowers it, and writes it in the format
``torch._inductor.config.lookup_table.table`` takes; ``load_table("table.json")`` reads it back for production
(docs/DEPLOY.md has the config lines). Nothing of this package is needed where the table is used.

The format, read off torch's ``torch/_inductor/lookup_table/choices.py`` (``LookupTableChoices``):

- key: ``LookupTableChoices.make_lookup_key(kernel_inputs, op_name, include_device)``, i.e.
  ``"<device>+<inputs>+<op>"`` with ``<device>`` = ``torch.cuda.get_device_properties(i).gcnArchName`` (the
  device name, e.g. ``NVIDIA H200``, on CUDA builds), ``<inputs>`` = ``str(((dtype, [sizes], [strides]), ...))``
  over the kernel inputs (size hints), then ``+alpha=1&beta=1`` when the op has scalars (addmm); device-agnostic
  keys drop ``<device>+``. Identical in torch 2.11 and 2.13; we call torch's function, never re-implement it.
  Only CUDA devices get a key (the table is off on a CPU).
- value: a list of entries ``{"template_id": ktc.template.uid, **ktc.params.to_serializeable_dict(),
  "template_hash": template.src_hash}``; one entry means Inductor uses that choice without benchmarking.
  torch 2.11 builds the choice's parameters from the entry alone (``DictKernelTemplateParams(entry)``), torch
  2.13 merges the entry over the template's first default config; we write every parameter, so an entry means
  the same kernel in both. ``template_hash`` makes Inductor drop an entry whose template source changed
  (``lookup_table.check_src_hash``).

Runtime side: no sklearn/matplotlib here.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import re
import sys
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..artifacts.atomic import OutputError, check_output_file, claim_output, write_text

from ..artifacts.reading import DOCUMENT_BYTES, read_regular

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1


# ---------------------------------------------------------------------------------------------
# Recording (called by the hook while Inductor lowers each GEMM)
# ---------------------------------------------------------------------------------------------

def lookup_entry(ktc: Any, template_hash: bool = True) -> dict[str, Any]:
    """One ``KernelTemplateChoice`` as a lookup-table entry (JSON-safe); ValueError when its parameters are not."""
    params = ktc.params
    values = params.to_serializeable_dict() if hasattr(params, "to_serializeable_dict") else params.to_kwargs()
    uid = str(ktc.template.uid)
    entry = {"template_id": uid, **values}
    src_hash = getattr(ktc.template, "src_hash", None) if template_hash else None
    if src_hash is not None:
        entry["template_hash"] = src_hash
    try:
        survives = json.loads(json.dumps(entry)) == entry  # a tuple would come back a list: not the same kwargs
    except (TypeError, ValueError):
        survives = False
    if not survives:
        raise ValueError(f"{uid}: parameters {values!r} do not survive JSON")
    return entry


def lookup_keyer(key_choices: Any = None) -> Any:
    """The ``LookupTableChoices`` instance whose ``make_lookup_key`` keys table entries: torch's own by default, or
    the (sub)class or instance given (a stand-in in CPU tests)."""
    if key_choices is None:
        from torch._inductor.lookup_table import LookupTableChoices

        key_choices = LookupTableChoices
    return key_choices() if isinstance(key_choices, type) else key_choices


class DecisionRecorder:
    """``GemmPruner.recorder``: keys every GEMM's final choices with torch's own ``make_lookup_key`` and keeps them
    as lookup-table entries. ``key_choices``: the ``LookupTableChoices`` (sub)class or instance whose key is used
    (default torch's own); ``device_key``: key with the device name (the table then applies on this GPU model only)."""

    def __init__(self, key_choices: Any = None, device_key: bool = True, template_hash: bool = True) -> None:
        self.key_choices = key_choices
        self.device_key = device_key
        self.template_hash = template_hash
        self.decisions: list[dict[str, Any]] = []  # {"op_name", "key", "entries"} in lowering order
        self.skipped: Counter = Counter()  # no_key (not a CUDA GEMM), unserializable

    def _keyer(self) -> Any:
        self.key_choices = lookup_keyer(self.key_choices)
        return self.key_choices

    def __call__(self, kept: list[Any], kernel_inputs: Any, op_name: str) -> None:
        key = self._keyer().make_lookup_key(kernel_inputs, op_name, include_device=self.device_key)
        if key is None:
            self.skipped["no_key"] += 1
            return
        try:
            entries = [lookup_entry(c, self.template_hash) for c in kept]
        except ValueError as exc:
            self.skipped["unserializable"] += 1
            log.warning("gemm-predictor: %s %s left out of the table (Inductor's default there): %s", op_name, key, exc)
            return
        self.decisions.append({"op_name": op_name, "key": key, "entries": entries})

    def table(self) -> tuple[dict[str, list[dict[str, Any]]], int]:
        """The table (first decision per key) and how many later decisions for a key disagreed with it."""
        table: dict[str, list[dict[str, Any]]] = {}
        conflicts = 0
        for d in self.decisions:
            if table.setdefault(d["key"], d["entries"]) != d["entries"]:
                conflicts += 1
        return table, conflicts


# ---------------------------------------------------------------------------------------------
# Export and load
# ---------------------------------------------------------------------------------------------

def current_gpu() -> str | None:
    """What the lookup key calls this machine's GPU (``gcnArchName``: the device name on CUDA), None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    return str(torch.cuda.get_device_properties(torch.cuda.current_device()).gcnArchName)


def _major_minor(version: Any) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", str(version or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def _model_name(model: Any) -> str:
    return str(getattr(model, "__qualname__", None) or type(model).__name__)


def _json_safe(options: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, value in options.items():
        try:
            json.dumps(value)
            out[name] = value
        except (TypeError, ValueError):
            out[name] = repr(value)
    return out


def check_table_out(out_path: str | os.PathLike) -> Path:
    """The table's output path, checked before any work (a compile takes minutes): a folder, a filesystem root, a
    folder we may not write in (``predictor.artifacts.atomic.check_output_file``), or an existing file that is not a table
    exported here (a dataset, a model file, anything of the user's) is refused with one line; an earlier export
    (or an empty file) is replaced."""
    path = check_output_file(out_path)
    if os.path.lexists(path) and path.stat().st_size:
        try:
            read_table_file(path)
        except ValueError as exc:
            raise OutputError(f"{path}: exists and is not a lookup table written by gemm-predictor export "
                              f"({str(exc).removeprefix(f'{path}: ')[:120]}); choose a new path (nothing was "
                              "written)") from None
    return path


def export_table(fn_or_module: Any, example_inputs: Any, out_path: str | os.PathLike, *, model_name: str | None = None,
                 device_key: bool = True, key_choices: Any = None, **compile_kwargs: Any) -> dict[str, Any]:
    """Compile ``fn_or_module`` once with :func:`predictor.compile` (``compile_kwargs`` go to it), call it on
    ``example_inputs`` (a tuple of arguments, or one tensor) and write every GEMM's decision as Inductor's lookup
    table to ``out_path`` (JSON, written atomically). Returns the written document:
    ``{"table", "gpu", "torch", "model", "created_utc", "schema_version", ...}`` plus the triton version, the
    Inductor options to compile with in production (``inductor_options``) and counts (``gemms``).

    Run it the way production runs the model (grad mode, shapes, dtypes): the key is the GEMM's exact input
    sizes, strides and dtypes. Resets dynamo before and after and compiles without the FX graph cache (a cache hit lowers
    nothing, so nothing would be recorded); the hook it installs is removed afterwards. ``device_key=False``
    writes device-agnostic keys (the table then also applies on other GPUs). ValueError when no GEMM could be keyed
    (Inductor keys CUDA GEMMs only), or when ``tune`` is given (a table holds one decision per GEMM; under ``tune``
    Inductor's benchmark picks among several at compile time, after the hook has recorded them). The output is
    checked (``check_table_out``) and claimed before the compile."""
    if compile_kwargs.get("tune") is not None:
        raise ValueError("export_table records one decision per GEMM; tune= leaves the pick to Inductor's benchmark")
    out = check_table_out(out_path)
    # the claim (as train's, evaluate's and calibrate's): a second export to this path fails at once, before its
    # compile, instead of both printing "wrote" and the last one winning
    with claim_output(out):
        check_table_out(out)  # again, now that it is ours alone
        return _export_table(fn_or_module, example_inputs, out, model_name=model_name, device_key=device_key,
                             key_choices=key_choices, **compile_kwargs)


def _export_table(fn_or_module: Any, example_inputs: Any, out_path: Path, *, model_name: str | None,
                  device_key: bool, key_choices: Any, **compile_kwargs: Any) -> dict[str, Any]:
    import torch

    from ..runtime import compile, install

    from ..runtime.choices import installed

    inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    options = {**(compile_kwargs.pop("options", None) or {}), "fx_graph_cache": False}
    recorder = DecisionRecorder(key_choices, device_key=device_key)
    depth = len(installed._STACK)
    torch._dynamo.reset()
    try:
        compiled = compile.compile(fn_or_module, options=options, **compile_kwargs)
        pruner = installed._STACK[-1].pruner
        previous, pruner.recorder = pruner.recorder, recorder
        try:
            from torch._functorch import config as functorch_config

            with functorch_config.patch(enable_autograd_cache=False):
                compiled(*inputs)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
        finally:
            pruner.recorder = previous
    finally:
        while len(installed._STACK) > depth:
            install.uninstall()
        torch._dynamo.reset()
    table, conflicts = recorder.table()
    if not table:
        skipped = recorder.skipped
        if not skipped:
            raise ValueError("no GEMM reached the hook: the program has none, or dynamo did not compile it")
        why = ("Inductor's lookup table keys CUDA GEMMs only" if skipped["no_key"]
               else "their parameters do not survive JSON")
        raise ValueError(f"none of the {sum(skipped.values())} GEMMs could be exported ({dict(skipped)}): {why}")
    if conflicts:
        log.warning("gemm-predictor: %d GEMMs disagreed with an earlier decision of the same key; the first is kept",
                    conflicts)
    try:
        import triton

        triton_version = triton.__version__
    except Exception:  # noqa: BLE001 -- no triton: nothing to record
        triton_version = None
    # what production should compile with beside the table: predictor.compile's CUDA graph setting (trees on every
    # graph by default)
    cudagraphs = compile_kwargs.get("cudagraphs", True) is True
    doc = {
        "table": table,
        "gpu": current_gpu(),
        "torch": torch.__version__,
        "model": model_name or _model_name(fn_or_module),
        "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "schema_version": SCHEMA_VERSION,
        "triton": triton_version,
        "device_key": device_key,
        "predictor_model": None if pruner.model_path is None else str(pruner.model_path),
        "predictor_disabled": pruner.disabled,
        "inductor_options": _json_safe({**compile.RECOMMENDED_OPTIONS, "triton.cudagraphs": cudagraphs,
                                        **{k: v for k, v in options.items() if k != "fx_graph_cache"}}),
        "gemms": {"recorded": len(recorder.decisions), "keys": len(table), "conflicts": conflicts,
                  "skipped": dict(recorder.skipped),
                  "single_choice": sum(len(v) == 1 for v in table.values()),
                  "by_template": dict(Counter(e["template_id"] for v in table.values() for e in v))},
    }
    write_text(out_path, json.dumps(doc, indent=1, sort_keys=False) + "\n")
    return doc


def read_table_file(path: str | os.PathLike) -> dict[str, Any]:
    """The whole exported document, checked for shape; ValueError (one line) otherwise."""
    path = Path(path)
    data = read_regular(path, DOCUMENT_BYTES, "lookup table")  # InputError (a ValueError): missing, a FIFO, too big
    try:
        doc = json.loads(data)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except (ValueError, RecursionError) as exc:  # bad UTF-8, an integer of thousands of digits, deep nesting
        raise ValueError(f"{path}: not JSON ({type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:120]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("table"), dict):
        raise ValueError(f"{path}: not a gemm-predictor lookup table (no 'table' object)")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{path}: schema_version {doc.get('schema_version')!r}, this version reads {SCHEMA_VERSION}")
    for key, entries in doc["table"].items():
        if not (isinstance(entries, list) and all(isinstance(e, dict) and "template_id" in e for e in entries)):
            raise ValueError(f"{path}: entry {key[:80]!r} is not a list of objects with a template_id")
    return doc


def load_table(path: str | os.PathLike, *, allow_mismatch: bool = False) -> dict[str, list[dict[str, Any]]]:
    """The dict for ``torch._inductor.config.lookup_table.table``. Refuses (ValueError, one line) a file made with
    another torch major.minor (template parameters and keys are version-specific) or on another GPU, unless
    ``allow_mismatch``."""
    import torch

    doc = read_table_file(path)
    if not allow_mismatch:
        made, here = _major_minor(doc.get("torch")), _major_minor(torch.__version__)
        if made != here:
            raise ValueError(f"{path}: made with torch {doc.get('torch')}, this is torch {torch.__version__} "
                             "(allow_mismatch=True loads it anyway)")
        gpu = current_gpu()
        if doc.get("gpu") != gpu:
            raise ValueError(f"{path}: made on {doc.get('gpu') or 'no GPU'}, this machine has {gpu or 'no CUDA GPU'} "
                             "(allow_mismatch=True loads it anyway)")
    return doc["table"]


# ---------------------------------------------------------------------------------------------
# The CLI's program: a file or module with make() -> (model, example_inputs)
# ---------------------------------------------------------------------------------------------

def load_program(spec: str) -> tuple[Any, tuple]:
    """``make()`` of a Python file (``path/to/prog.py``) or an importable module (``pkg.prog``): returns
    ``(model, example_inputs)``, the inputs as a tuple of arguments (one tensor is taken as the only one)."""
    import torch

    path = Path(spec)
    is_file = spec.endswith(".py") or path.is_file()
    if is_file and not path.is_file():
        raise ValueError(f"--program {spec}: no such file")
    if is_file and path.suffix != ".py":  # importlib finds no loader for another suffix
        raise ValueError(f"--program {spec}: not a .py file; give a Python file or an importable module name")
    try:
        if is_file:
            name = "_gemm_predictor_program_" + re.sub(r"\W", "_", path.stem)
            module_spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(spec)
    except ModuleNotFoundError as exc:
        if not is_file and exc.name is not None and (spec == exc.name or spec.startswith(exc.name + ".")):
            raise ValueError(f"--program {spec}: not a file, and no module of that name ({exc})") from None
        raise ValueError(f"--program {spec}: loading it failed ({type(exc).__name__}: {exc})") from None
    except Exception as exc:  # noqa: BLE001 -- the program's own error, in one line
        raise ValueError(f"--program {spec}: loading it failed ({type(exc).__name__}: {exc})") from None
    make = getattr(module, "make", None)
    if not callable(make):
        raise ValueError(f"--program {spec}: defines no make() returning (model, example_inputs)")
    result = make()
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        raise ValueError(f"--program {spec}: make() must return (model, example_inputs), got {type(result).__name__}")
    model, inputs = result
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, (tuple, list)):
        raise ValueError(f"--program {spec}: example_inputs must be a tuple of arguments, got {type(inputs).__name__}")
    if not callable(model):
        raise ValueError(f"--program {spec}: the model {type(model).__name__} is not callable")
    return model, tuple(inputs)


def export_program(spec: str, out_path: str | os.PathLike, **kwargs: Any) -> dict[str, Any]:
    """``gemm-predictor export``: ``load_program(spec)``, then ``export_table`` under ``torch.no_grad()`` (an
    inference deployment; production must run it the same way for the keys to match)."""
    import torch

    out = check_table_out(out_path)  # before the program is even imported
    with claim_output(out):
        model, inputs = load_program(spec)
        with torch.no_grad():
            return export_table(model, inputs, out, model_name=kwargs.pop("model_name", spec), **kwargs)
