"""Files a user is handed cannot run code, hang, or eat memory, and no output clobbers what it should not (issue 63).

Every probe that could hang runs in a child process under a timeout (a FIFO opened for reading waits forever for a
writer), and every probe that could eat memory under ``RLIMIT_AS``; each refusal is one line naming the file or
value."""

from __future__ import annotations

import ast
import errno
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from predictor.testing.model_text import with_tree_sizes
from predictor.testing.synthetic import METADATA, synthetic_dataset

from collectors.in_program import redecide
from predictor.artifacts import atomic, compiled_walk, lgbm_text, model_check, reading
from predictor.artifacts.model_folder import ModelError, load_model, load_runtime_model, read_metadata, save_model
from predictor.cli import main
from predictor.core.device import DeviceInfo
from predictor.offline import export, few_rows_fit, gemv_blocks_fit
from predictor.core.problem import PROBLEM_FIELDS, problem_id
from predictor.rankers import make_ranker
from predictor.runtime.choices import discovery
from predictor.runtime.lowerings import few_rows, gemv_table
from predictor.artifacts.schema import DatasetError, read_dataset, write_dataset, write_parquet

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "models" / "h200-default-lgbm-all"
DEVICE = DeviceInfo.from_metadata(METADATA)
GEMV_LABELS = ROOT / "datasets" / "nvidia-h100" / "gemv_blocks.parquet"
FEW_ROWS_LABELS = ROOT / "datasets" / "nvidia-h100" / "few_rows.parquet"
HANG_S = 60  # a probe that has not answered by then is hanging (each answers in well under 10 s)


def one_line(message: str, *names: object) -> None:
    assert "\n" not in message.strip() and len(message) < 500, message
    for name in names:
        assert str(name) in message, (name, message)


def error_line(stderr: str) -> str:
    """The CLI's one error line (progress bars share stderr)."""
    errors = re.findall(r"gemm-predictor: error: [^\r\n]*", stderr)
    assert len(errors) == 1, stderr[-2000:]
    return errors[0]


def child(code: str, env: dict[str, str] | None = None, memory_gb: float | None = None) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter under ``HANG_S`` (and an address-space limit); a hang fails the test."""
    prefix = ""
    if memory_gb is not None:
        prefix = (f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({int(memory_gb * 2**30)}, "
                  f"{int(memory_gb * 2**30)}))\n")
    try:
        return subprocess.run([sys.executable, "-c", prefix + textwrap.dedent(code)], capture_output=True, text=True,
                              cwd=ROOT, timeout=HANG_S, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung for {HANG_S} s: {code.strip()[:200]}")


@pytest.fixture(scope="module")
def lgbm_folder(tmp_path_factory) -> Path:
    """A small LightGBM model folder (15 trees) of the synthetic device."""
    root = tmp_path_factory.mktemp("lgbm")
    ranker = make_ranker("lgbm", n_estimators=15).fit(synthetic_dataset(40, seed=1), DEVICE)
    return save_model(ranker, root / "m", {"device": DEVICE.to_dict(), "space": "default", "name": "m"})


def copy_model(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest


def rewrite_model_text(folder: Path, text: str) -> None:
    """Replace the model text and record its sha256, as an attacker can (the checksum is no defence here)."""
    import hashlib

    (folder / "model.lgbm.txt").write_text(text)
    meta = json.loads((folder / "metadata.json").read_text())
    meta["model_sha256"] = hashlib.sha256(text.encode()).hexdigest()
    (folder / "metadata.json").write_text(json.dumps(meta))


# --- item 1: no code from a file --------------------------------------------------------------------------------

# (file, enclosing function): the one eval in the project, of a source text that is a literal of that module
# (``FORMS``, the GEMV forms the collector compiles): a new code object per call is what Dynamo needs there
ALLOWED_EVAL = {("collectors/gemv_blocks.py", "_function")}


def _eval_calls(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), str(path))
    found, stack = [], []

    class Visitor(ast.NodeVisitor):
        def visit_FunctionDef(self, node):
            stack.append(node.name)
            self.generic_visit(node)
            stack.pop()

        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_Call(self, node):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else (
                func.attr if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                and func.value.id in ("builtins", "__builtins__") else None)
            if name in ("eval", "exec"):
                found.append((stack[-1] if stack else "<module>", node.lineno))
            self.generic_visit(node)

    Visitor().visit(tree)
    return found


def test_no_eval_or_exec_of_anything_in_the_project():
    """No ``eval(``/``exec(`` call in predictor/, collectors/ or benchmarks/ but the one allowed above, and that one
    evaluates a literal of its own module, never file text."""
    seen = set()
    for top in ("predictor", "collectors", "benchmarks"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for function, line in _eval_calls(path):
                assert (rel, function) in ALLOWED_EVAL, f"{rel}:{line} calls eval/exec (in {function})"
                seen.add((rel, function))
    assert seen == ALLOWED_EVAL  # the allowance goes when its call does
    tree = ast.parse((ROOT / "collectors" / "gemv_blocks.py").read_text())
    forms = next(n for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                 and "FORMS" in [getattr(t, "id", None) for t in ([n.target] if isinstance(n, ast.AnnAssign)
                                                                  else n.targets)])
    assert isinstance(forms.value, ast.Dict)
    assert all(isinstance(v, ast.Tuple) and isinstance(v.elts[0], ast.Constant) for v in forms.value.values)


def test_redecide_reads_an_agreement_problem_as_data_never_as_code(tmp_path):
    """The shipped agreement.json's problems read back as they were written; a problem that would run code if
    evaluated is one line and exit 2, and nothing of it runs."""
    shipped = sorted(ROOT.glob("docs/benchmarks/zoo/*/in_program/agreement.json"))
    assert shipped
    for path in shipped:
        for gemm in json.loads(path.read_text())["gemms"]:
            assert repr(redecide.problem_of(gemm)) == gemm["problem"]
    doc = json.loads(shipped[0].read_text())
    pwned = tmp_path / "PWNED"
    good = doc["gemms"][0]["problem"]
    for bad in (f"__import__('os').system('touch {pwned}') or {good}",
                good.replace("m=", f"m=__import__('os').system('touch {pwned}') or "),
                good.replace("Problem(", "Problem(*[1], "), "Problem.__init__.__globals__", "P" * 100 + "(",
                good.replace("op=", "nope=")):
        folder = tmp_path / "inprog"
        folder.mkdir(exist_ok=True)
        doc["gemms"][0]["problem"] = bad
        (folder / "agreement.json").write_text(json.dumps(doc))
        out = child(f"""
            import sys
            from collectors.in_program.redecide import main
            sys.exit(main(['--inprog', {str(folder)!r}, '--gap', '-1.5']))
        """)
        assert out.returncode == 2, (bad, out.stdout, out.stderr[-1000:])
        one_line(out.stderr, "agreement.json problem")
        assert not pwned.exists(), bad


# --- items 2 and 3: FIFOs, devices and huge files never block or fill memory -----------------------------------

LOADERS = """
    import sys
    from predictor.artifacts.model_folder import ModelError, load_model, load_runtime_model
    for load in (load_runtime_model, load_model):
        try:
            load(sys.argv[1] if len(sys.argv) > 1 else {folder!r})
            print("LOADED")
        except ModelError as exc:
            print("REFUSED", exc)
"""


@pytest.mark.parametrize("name", ["model.lgbm.txt", "metadata.json"])
def test_a_fifo_in_a_model_folder_is_refused_at_once(lgbm_folder, tmp_path, name):
    folder = copy_model(lgbm_folder, tmp_path / "m")
    (folder / name).unlink()
    os.mkfifo(folder / name)
    out = child(LOADERS.format(folder=str(folder)))
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("REFUSED") for line in lines), out.stdout + out.stderr[-2000:]
    for line in lines:
        one_line(line, folder / name, "not a regular file (a FIFO)")
        assert "missing" not in line


def test_evaluate_with_a_fifo_model_file_exits_2_at_once(lgbm_folder, tmp_path):
    folder = copy_model(lgbm_folder, tmp_path / "m")
    (folder / "model.lgbm.txt").unlink()
    os.mkfifo(folder / "model.lgbm.txt")
    dataset = write_dataset(synthetic_dataset(8, seed=2), tmp_path / "d.parquet", METADATA)
    out = child(f"""
        import sys
        from predictor.cli import main
        sys.exit(main(['evaluate', '--model', {str(folder)!r}, '--dataset', {str(dataset)!r}, '--out',
                       {str(tmp_path / 'report')!r}]))
    """)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "not a regular file (a FIFO)" in out.stderr and str(folder / "model.lgbm.txt") in out.stderr


@pytest.mark.parametrize("folder, module", [("gemv-blocks", "gemv_table"), ("few-rows", "few_rows")])
def test_a_fifo_per_gpu_table_leaves_the_compile_to_its_default(tmp_path, folder, module):
    """A FIFO named ``<root>/<table>/nvidia-h200.json`` (the GPU's own), and one that only the capability scan
    would read: the table reader warns once and the compile keeps its default, within seconds."""
    tables = tmp_path / "root" / folder
    tables.mkdir(parents=True)
    os.mkfifo(tables / "nvidia-h200.json")
    os.mkfifo(tables / "other-gpu.json")
    out = child(f"""
        import logging
        logging.basicConfig(level=logging.WARNING)
        from predictor.runtime.lowerings import {module} as m
        from predictor.artifacts.roots import table_path
        from pathlib import Path
        print(m._table("NVIDIA H200", "9.0", ({str(tmp_path / 'root')!r},)))
        print(table_path("Unknown GPU", [Path({str(tmp_path / 'root')!r})], "9.0", folder={folder!r}))
    """)
    assert out.stdout.strip().splitlines() == ["((), None)", "None"], out.stdout + out.stderr[-2000:]
    warnings = [line for line in out.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 1 and "nvidia-h200.json: not a regular file (a FIFO)" in warnings[0], out.stderr


def test_a_fifo_or_a_device_as_a_dataset_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / "d.parquet")
    (tmp_path / "zero.parquet").symlink_to("/dev/zero")
    out = child(f"""
        from predictor.artifacts.schema import DatasetError, file_metadata, file_sha256, read_dataset
        for path in ({str(tmp_path / 'd.parquet')!r}, {str(tmp_path / 'zero.parquet')!r}):
            for read in (read_dataset, file_metadata, file_sha256):
                try:
                    read(path)
                    print("READ")
                except DatasetError as exc:
                    print(exc)
    """, memory_gb=4)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 6, out.stdout + out.stderr[-2000:]
    for line in lines[:3]:
        one_line(line, tmp_path / "d.parquet", "not a regular file (a FIFO)")
    for line in lines[3:]:
        one_line(line, tmp_path / "zero.parquet", "not a regular file (a character device)")


def test_dev_zero_and_a_sparse_2gb_model_file_are_refused_fast_in_bounded_memory(lgbm_folder, tmp_path):
    """Under a 3 GB address-space limit (the loaders once took 7 GB, then MemoryError, for /dev/zero, and 14 s and
    4.5 GB for a 2 GB sparse file), each is refused in under 20 s (start-up included) naming the file."""
    zero = copy_model(lgbm_folder, tmp_path / "zero")
    (zero / "model.lgbm.txt").unlink()
    (zero / "model.lgbm.txt").symlink_to("/dev/zero")
    sparse = copy_model(lgbm_folder, tmp_path / "sparse")
    with open(sparse / "model.lgbm.txt", "r+b") as handle:
        handle.truncate(2 << 30)
    huge_meta = copy_model(lgbm_folder, tmp_path / "meta")
    with open(huge_meta / "metadata.json", "r+b") as handle:
        handle.truncate(2 << 30)
    for folder, needle in ((zero, "not a regular file (a character device)"), (sparse, "2048 MiB, more than a model"),
                           (huge_meta, "2048 MiB, more than a metadata.json")):
        started = time.perf_counter()
        out = child(LOADERS.format(folder=str(folder)), memory_gb=3)
        assert time.perf_counter() - started < 20
        lines = out.stdout.strip().splitlines()
        assert len(lines) == 2 and all(line.startswith("REFUSED") for line in lines), out.stdout + out.stderr[-2000:]
        for line in lines:
            one_line(line, folder, needle)


def test_a_per_gpu_table_over_its_cap_is_refused_before_it_is_read(tmp_path, caplog):
    tables = tmp_path / "root" / gemv_table.TABLE_FOLDER
    tables.mkdir(parents=True)
    with open(tables / "nvidia-h200.json", "wb") as handle:
        handle.truncate(reading.TABLE_BYTES + 1)
    gemv_table._table.cache_clear()
    assert gemv_table._table("NVIDIA H200", "9.0", (str(tmp_path / "root"),)) == ((), None)
    assert any("more than a GEMV block table may hold" in r.getMessage() for r in caplog.records)


def _one_leaf_forest(text: str, trees: int) -> str:
    """The model ``text`` with its trees replaced by ``trees`` one-leaf trees (tree_sizes recomputed)."""
    head, rest = text.split("\nTree=", 1)
    tail = rest[rest.index("end of trees"):]
    body = "".join(f"Tree={i}\nnum_leaves=1\nnum_cat=0\nleaf_value=0.001\nshrinkage=1\n\n\n" for i in range(trees))
    head = "\n".join(line for line in head.splitlines() if not line.startswith("tree_sizes="))
    head = head.replace("\nversion=v4", f"\nversion=v4\ntree_sizes={' '.join(['1'] * trees)}")
    return with_tree_sizes(head + "\n\n" + body + tail)


def test_a_forest_past_the_tree_and_slot_caps_is_refused_by_every_loader(lgbm_folder, tmp_path):
    """10^6 one-leaf trees once loaded in 20 s and then cost up to 1.8 s per GEMM; one wide tree beside thousands
    of small ones pads to gigabytes. Both are refused with one line, the checksum recomputed or not."""
    text = (lgbm_folder / "model.lgbm.txt").read_text()
    many = copy_model(lgbm_folder, tmp_path / "many")
    rewrite_model_text(many, _one_leaf_forest(text, lgbm_text.MAX_TREES + 1))
    for load in (load_model, load_runtime_model):
        with pytest.raises(ModelError, match=f"more than this reader takes \\({lgbm_text.MAX_TREES}\\)") as info:
            load(many)
        one_line(str(info.value), many / "model.lgbm.txt")
    fine = _one_leaf_forest(text, 300)
    assert len(model_check.parse_text_forest(fine).roots) == 300
    wide_tree = lgbm_text.MAX_SLOTS // (2 * 300) + 1  # leaves: 300 trees padded to this width pass the cap
    assert wide_tree < lgbm_text._MAX_LEAVES
    nodes = wide_tree - 1  # a chain: split i sends left to leaf i, right to split i+1
    lists = {
        "split_feature": ["0"] * nodes, "split_gain": ["1"] * nodes, "threshold": [f"{i}.5" for i in range(nodes)],
        "decision_type": ["2"] * nodes, "left_child": [str(~i) for i in range(nodes)],
        "right_child": [str(i + 1) for i in range(nodes - 1)] + [str(~nodes)],
        "leaf_value": ["0.001"] * wide_tree,
    }
    wide = f"Tree=0\nnum_leaves={wide_tree}\nnum_cat=0\n" + "".join(f"{k}={' '.join(v)}\n" for k, v in lists.items()) \
        + "shrinkage=1\n\n\n"
    head, rest = fine.split("\nTree=0\n", 1)
    body = rest[rest.index("Tree=1\n"):]
    renumbered = wide + body
    slotted = copy_model(lgbm_folder, tmp_path / "slots")
    rewrite_model_text(slotted, with_tree_sizes(head + "\n" + renumbered))
    for load in (load_model, load_runtime_model):
        with pytest.raises(ModelError, match=f"{lgbm_text.MAX_SLOTS} slots") as info:
            load(slotted)
        one_line(str(info.value), slotted / "model.lgbm.txt")


# --- item 6: implausible device numbers never train, and never replace a good model ------------------------------

def _with_device(tmp_path: Path, key: str, value) -> Path:
    meta = json.loads(json.dumps(METADATA))
    if key.startswith("peak_tflops."):
        meta["device"]["peak_tflops"][key.split(".", 1)[1]] = value
    else:
        meta["device"][key] = value
    return write_dataset(synthetic_dataset(10, seed=2), tmp_path / f"bad-{key}.parquet", meta)


@pytest.mark.parametrize("key, value", [("sm_count", -132), ("mem_bandwidth_gbs", 0), ("peak_tflops.float16", float("nan")),
                                        ("l2_bytes", 0)])
def test_training_refuses_implausible_device_numbers_before_fitting(lgbm_folder, tmp_path, monkeypatch, capsys,
                                                                    key, value):
    target = copy_model(lgbm_folder, tmp_path / "good")
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    dataset = _with_device(tmp_path, key, value)
    from predictor.rankers.tree import TreeRanker

    def never(*args, **kwargs):
        raise AssertionError("fit ran on implausible device numbers")

    monkeypatch.setattr(TreeRanker, "fit", never)
    code = main(["train", "--ranker", "tree", "--dataset", str(dataset), "--out", str(target)])
    err = capsys.readouterr().err
    assert code == 2
    one_line(error_line(err), dataset, f"device.{key}")
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before


def test_a_new_model_the_loaders_would_refuse_never_replaces_a_good_one(lgbm_folder, tmp_path, monkeypatch, capsys):
    """A forest over the loaders' caps (here: the tree cap lowered under the 60 trees fitted) is refused by the save,
    which loads the new folder before it swaps it in; the good model stays, byte for byte."""
    target = copy_model(lgbm_folder, tmp_path / "good")
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    dataset = write_dataset(synthetic_dataset(10, seed=2), tmp_path / "d.parquet", METADATA)
    monkeypatch.setattr(lgbm_text, "MAX_TREES", 5)
    code = main(["train", "--ranker", "lgbm", "--dataset", str(dataset), "--out", str(target)])
    assert code == 2
    one_line(error_line(capsys.readouterr().err), target, "would not load")
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.parquet", "good"]  # no staging folder left
    monkeypatch.undo()
    load_runtime_model(target)


# --- item 7: export checks and claims its output before any work ---------------------------------------------------

@pytest.fixture
def no_compile(monkeypatch):
    """export's compile, replaced by a failure: a test passes only if the refusal comes before it."""
    from predictor.runtime import compile

    def never(*args, **kwargs):
        raise AssertionError("the compile ran")

    monkeypatch.setattr(compile, "compile", never)


PROGRAM = "import torch\ndef make():\n    return (lambda a, b: a @ b), (torch.ones(4, 4), torch.ones(4, 4))\n"


def test_export_refuses_an_output_of_another_kind_before_any_work(tmp_path, no_compile, capsys):
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    dataset = write_dataset(synthetic_dataset(4, seed=2), tmp_path / "d.parquet", METADATA)
    before = dataset.read_bytes()
    folder = tmp_path / "folder"
    folder.mkdir()
    for out, needle in ((dataset, "is not a lookup table written by gemm-predictor export"),
                        (folder, "is a folder; give a file path"), (Path("/"), "a filesystem root")):
        assert main(["export", "--program", str(program), "--out", str(out)]) == 2
        one_line(error_line(capsys.readouterr().err), out, needle)
    assert dataset.read_bytes() == before and list(folder.iterdir()) == []
    earlier = tmp_path / "table.json"
    earlier.write_text(json.dumps({"table": {}, "schema_version": export.SCHEMA_VERSION}))
    assert export.check_table_out(earlier) == earlier  # an earlier export is replaced


def test_two_exports_to_one_path_the_second_fails_at_once(tmp_path, no_compile):
    out = tmp_path / "table.json"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from predictor.artifacts.atomic import claim_output
        with claim_output({str(out)!r}):
            print("held", flush=True)
            time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "held"
        program = tmp_path / "prog.py"
        program.write_text(PROGRAM)
        with pytest.raises(atomic.OutputError, match="another run is writing it now") as info:
            export.export_program(str(program), out)
        one_line(str(info.value), out)
    finally:
        holder.kill()
        holder.wait()


def test_export_program_that_is_not_a_py_file_is_one_line(tmp_path, no_compile, capsys):
    program = tmp_path / "prog.txt"
    program.write_text(PROGRAM)
    assert main(["export", "--program", str(program), "--out", str(tmp_path / "t.json")]) == 2
    one_line(error_line(capsys.readouterr().err), program, "not a .py file")
    assert not (tmp_path / "t.json").exists()


# --- item 8: the table fits write through the staged-file writer ---------------------------------------------------

FITS = [("gemv-fit", GEMV_LABELS), ("few-rows-fit", FEW_ROWS_LABELS)]


@pytest.mark.parametrize("command, labels", FITS)
def test_a_table_fit_refuses_a_folder_or_the_root_before_any_work(tmp_path, capsys, monkeypatch, command, labels):
    from predictor.offline import gemv_eval

    def never(*args, **kwargs):
        raise AssertionError("the labels were read")

    monkeypatch.setattr(gemv_eval, "read_labels", never)
    folder = tmp_path / "folder"
    folder.mkdir()
    for out, needle in ((folder, "is a folder; give a file path"), ("/", "a filesystem root cannot be an output")):
        assert main([command, str(labels), "--out", str(out)]) == 2
        one_line(error_line(capsys.readouterr().err), out, needle)
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("command, labels", FITS)
def test_a_table_fit_keeps_the_users_tmp_file_and_names_the_path_on_a_full_disk(tmp_path, capsys, monkeypatch,
                                                                               command, labels):
    out = tmp_path / "table.json"
    mine = tmp_path / "table.tmp"  # the fixed name both fits once wrote through, and deleted
    mine.write_text("the user's")
    assert main([command, str(labels), "--out", str(out)]) == 0
    capsys.readouterr()
    assert mine.read_text() == "the user's"
    reader = gemv_table if command == "gemv-fit" else few_rows
    good = out.read_bytes()
    assert reader.read_table(out)
    real_write = pathlib.Path.write_text

    def full_disk(self, *args, **kwargs):
        if self.parent == tmp_path and self.name != "table.tmp":
            real_write(self, "partial")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "write_text", full_disk)
    assert main([command, str(labels), "--out", str(out)]) == 2
    one_line(error_line(capsys.readouterr().err), out, "No space left on device")
    assert out.read_bytes() == good and mine.read_text() == "the user's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.json", "table.tmp"]


# --- item 9: a load during train's swap reads one version ----------------------------------------------------------

SWAPPER = """
import shutil, sys, time
from pathlib import Path
from predictor.artifacts.atomic import MODEL, staged_folder
target, versions, seconds = Path(sys.argv[1]), [Path(p) for p in sys.argv[2:4]], float(sys.argv[4])
swaps, end = 0, time.monotonic() + seconds
print("started", flush=True)
while time.monotonic() < end:
    source = versions[swaps % 2]
    with staged_folder(target, MODEL) as tmp:  # the swap save_model (train) does
        for f in source.iterdir():
            shutil.copy2(f, tmp / f.name)
    swaps += 1
print(swaps, flush=True)
"""


def test_loads_during_swaps_always_see_one_version(tmp_path):
    rows = synthetic_dataset(30, seed=4)
    versions = []
    for i, n in enumerate((40, 60)):
        ranker = make_ranker("lgbm", n_estimators=n, seed=i).fit(rows, DEVICE)
        versions.append(save_model(ranker, tmp_path / f"v{i}", {"device": DEVICE.to_dict(), "name": "v"}))
    target = copy_model(versions[0], tmp_path / "model")
    writer = subprocess.Popen([sys.executable, "-c", SWAPPER, str(target), *map(str, versions), "20"],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert writer.stdout.readline().strip() == "started"
        errors, loads, seen = [], 0, set()
        end = time.monotonic() + 15
        while time.monotonic() < end:
            try:
                _, meta = load_runtime_model(target)
                seen.add(meta["model_sha256"])
            except ModelError as exc:
                errors.append(str(exc))
            loads += 1
        swaps = int(writer.stdout.readline())
    finally:
        writer.kill()
        writer.wait()
    assert swaps > 20 and loads > 100 and len(seen) == 2, (swaps, loads, seen)
    assert errors == [], f"{len(errors)} of {loads} loads over {swaps} swaps failed: {errors[:3]}"


# --- item 10: messages name the file or value -----------------------------------------------------------------------

def test_a_5000_digit_integer_in_metadata_is_one_line_naming_the_file(lgbm_folder, tmp_path):
    folder = copy_model(lgbm_folder, tmp_path / "m")
    text = (folder / "metadata.json").read_text()
    (folder / "metadata.json").write_text(text.replace('"split_seed": 0', '"split_seed": ' + "7" * 5000, 1)
                                          if '"split_seed": 0' in text else text[:-2] + ', "x": ' + "7" * 5000 + "}\n")
    for read in (read_metadata, load_model, load_runtime_model):
        with pytest.raises(ModelError) as info:
            read(folder)
        one_line(str(info.value), folder / "metadata.json", "4300")
    assert discovery.find_model(DEVICE, roots=[tmp_path]) is None  # skipped with a warning, never raised


def test_a_full_disk_during_train_names_the_output_and_keeps_the_model(lgbm_folder, tmp_path, monkeypatch, capsys):
    target = copy_model(lgbm_folder, tmp_path / "good")
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    dataset = write_dataset(synthetic_dataset(10, seed=2), tmp_path / "d.parquet", METADATA)

    def full_disk(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pathlib.Path, "write_bytes", full_disk)
    assert main(["train", "--ranker", "tree", "--dataset", str(dataset), "--out", str(target)]) == 2
    one_line(error_line(capsys.readouterr().err), target, "No space left on device")
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.parquet", "good"]


# --- item 11: the walker's cache, and dataset values ----------------------------------------------------------------

def test_a_home_that_does_not_exist_gets_no_folders(tmp_path, monkeypatch):
    home = tmp_path / "nonexistent" / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert compiled_walk._shared_cache() is None
    assert not (tmp_path / "nonexistent").exists()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "no" / "such" / "cache"))
    assert compiled_walk._shared_cache() is None and not (tmp_path / "no").exists()
    home.mkdir(parents=True)  # an existing home: its .cache and our folder are made, private
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert compiled_walk._shared_cache() == home / ".cache" / "gemm-predictor"
    assert (home / ".cache" / "gemm-predictor").stat().st_mode & 0o777 == 0o700


def test_a_read_only_cache_with_a_valid_walker_is_used(fresh_walker, monkeypatch):
    """A cache folder nothing can be written into (a shared image's; simulated: every new file there fails, as
    it would as a user without write permission) holding a good walker: the walker loads from it, nothing is
    rebuilt, nothing is written there."""
    assert compiled_walk.library(wait=True), "no C compiler here"
    built = sorted(p.name for p in fresh_walker.iterdir())
    compiled_walk.reset()
    real_mkstemp = compiled_walk.tempfile.mkstemp

    def read_only(*args, dir=None, **kwargs):
        if dir is not None and Path(dir) == fresh_walker:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(dir))
        return real_mkstemp(*args, dir=dir, **kwargs)

    monkeypatch.setattr(compiled_walk.tempfile, "mkstemp", read_only)
    monkeypatch.setattr(compiled_walk, "_build", lambda *a: pytest.fail("rebuilt a good cached walker"))
    assert compiled_walk.library() is not None
    assert sorted(p.name for p in fresh_walker.iterdir()) == built


def _rows_with(column: str, value) -> pd.DataFrame:
    df = synthetic_dataset(4, seed=5)
    if column in ("m", "time_us"):
        df[column] = df[column].astype("float64")
    ok = df["status"] == "ok"
    df.loc[ok if column == "time_us" else df.index[:1], column] = value
    df["problem_id"] = [problem_id(*row) for row in df[list(PROBLEM_FIELDS)].itertuples(index=False)]
    return df


@pytest.mark.parametrize("column, value, needle", [
    ("time_us", 5e-324, "time_us 5e-324 at row"), ("m", 512.7, "m 512.7 at row 0"),
    ("op", "conv", "unknown op values \\['conv'\\]"), ("layout_b", "diag", "unknown layout_b values \\['diag'\\]"),
    ("dtype", "float64", "unknown dtype values"),
])
def test_dataset_values_no_measurement_makes_are_refused(tmp_path, column, value, needle):
    rows = _rows_with(column, value)
    path = tmp_path / "bad.parquet"
    table = pa.Table.from_pandas(rows, preserve_index=False)
    meta = {**(table.schema.metadata or {}), **{k.encode(): json.dumps(v).encode() for k, v in METADATA.items()}}
    write_parquet(table.replace_schema_metadata(meta), path)  # bypasses write_dataset's own checks
    with pytest.raises(DatasetError, match=needle) as info:
        read_dataset(path)
    one_line(str(info.value), path)
    with pytest.raises(DatasetError, match=needle):
        write_dataset(rows, tmp_path / "never.parquet", METADATA)


# --- beyond the probes: every other file a user may be handed ------------------------------------------------

OTHER_READERS = """
    import json, sys
    from pathlib import Path
    root = Path(sys.argv[1])
    from predictor.offline.export import read_table_file
    from predictor.offline.report import load_metrics
    from predictor.offline.calibration import Ledger
    from predictor.artifacts.atomic import check_output_folder, MODEL
    from predictor.runtime.choices.discovery import find_model
    from predictor.core.device import DeviceInfo
    from predictor.testing.synthetic import METADATA
    from collectors.in_program.redecide import pooled
    from collectors.in_program.context_dataset import rows_of
    probes = {
        "lookup table": lambda: read_table_file(root / "table.json"),
        "metrics.json": lambda: load_metrics(root / "metrics.json"),
        "calibration ledger": lambda: Ledger(root / "parts"),
        "agreement.json (redecide)": lambda: pooled([str(root / "inprog")]),
        "agreement.json (context dataset)": lambda: rows_of(root / "inprog"),
        "an output folder's marker": lambda: check_output_folder(root / "model", MODEL),
    }
    for name, probe in probes.items():
        try:
            probe()
            print(json.dumps([name, "READ"]))
        except Exception as exc:
            print(json.dumps([name, f"{type(exc).__name__}: {exc}"]))
    print(json.dumps(["discovery", str(find_model(DeviceInfo.from_metadata(METADATA), roots=[root]))]))
"""


def test_every_other_handed_file_that_is_a_fifo_is_refused_at_once(tmp_path):
    """Lookup tables, metrics.json, calibration ledgers, agreement.json (both readers), the marker of a folder an
    output would replace, and a model root's metadata.json: each a FIFO, each refused (or skipped) within seconds."""
    for name in ("table.json", "metrics.json", "parts/calibration/ledger.json", "inprog/agreement.json",
                 "model/metadata.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(tmp_path / name)
    try:
        out = subprocess.run([sys.executable, "-c", textwrap.dedent(OTHER_READERS), str(tmp_path)],
                             capture_output=True, text=True, cwd=ROOT, timeout=HANG_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"a reader hung for {HANG_S} s on a FIFO")
    results = dict(json.loads(line) for line in out.stdout.strip().splitlines())
    assert len(results) == 7, out.stdout + out.stderr[-2000:]
    assert results.pop("discovery") == "None"
    for name, result in results.items():
        assert "not a regular file (a FIFO)" in result and "\n" not in result, (name, result)


@pytest.mark.parametrize("module, edit, needle", [
    (gemv_table, lambda p: p["times"].update({next(iter(p["times"])): -1.0}), "not a finite number > 0"),
    (gemv_table, lambda p: p.update(n=0), "n is 0, not a whole number > 0"),
    (gemv_table, lambda p: p.update(cublas_us=float("nan")), "cublas_us is nan"),
    (few_rows, lambda p: p["cublas_us"].__setitem__(0, 0.0), "cublas_us is 0.0"),
    (few_rows, lambda p: p["times"][next(iter(p["times"]))].__setitem__(0, float("inf")), "is inf"),
    (few_rows, lambda p: p.update(k=1.5), "k is 1.5, not a whole number > 0"),
])
def test_a_per_gpu_table_with_impossible_values_is_refused_not_used(tmp_path, caplog, module, edit, needle):
    """A zero, a negative, a NaN or a fractional size in a table would raise inside every compile (a log of it) or
    pick at random: the reader refuses the table with one line and the compile keeps its default."""
    shipped = ROOT / "models" / module.TABLE_FOLDER / "nvidia-h100.json"
    doc = json.loads(shipped.read_text())
    edit(doc["problems"][0])
    tables = tmp_path / module.TABLE_FOLDER
    tables.mkdir()
    (tables / "nvidia-h100.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=needle) as info:
        module.read_table(tables / "nvidia-h100.json")
    one_line(str(info.value), tables / "nvidia-h100.json")
    module._table.cache_clear()
    assert module._table("NVIDIA H100 80GB HBM3", "9.0", (str(tmp_path),)) == ((), None)
    module._table.cache_clear()
