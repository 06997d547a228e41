"""What a newcomer meets first: the package's metadata and dependencies, the command line's own options, and the
one-line messages for the mistakes a first run makes."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
import torch

import predictor
from predictor import cli
from predictor.artifacts import roots
from predictor.runtime import compile
from predictor.runtime.choices import discovery, installed
from predictor.artifacts.schema import write_dataset
from predictor.testing.synthetic import METADATA, synthetic_dataset

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
TRAIN_LIBRARIES = ("pandas", "pyarrow", "sklearn", "scipy", "lightgbm", "matplotlib", "tqdm")


def one_error_line(capsys) -> list[str]:
    """The CLI's own lines on stderr (progress bars share it)."""
    return [line[line.index("gemm-predictor:"):] for line in capsys.readouterr().err.splitlines()
            if "gemm-predictor:" in line]


@pytest.fixture
def unhooked():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    while installed._STACK:
        predictor.uninstall()


# --- the package ----------------------------------------------------------------------------------------------------

def test_the_runtime_depends_on_torch_and_numpy_alone_and_dev_includes_train():
    assert sorted(re.split(r"[<>=!~ ]", d)[0] for d in PYPROJECT["dependencies"]) == ["numpy", "torch"]
    extras = PYPROJECT["optional-dependencies"]
    train = {re.split(r"[<>=!~ \[]", d)[0] for d in extras["train"]}
    assert {"pandas", "pyarrow", "scikit-learn", "lightgbm", "matplotlib", "tqdm"} <= train
    assert "gemm-predictor[train]" in extras["dev"]
    # no extra may pin what would move a user's torch or numpy
    assert not [d for deps in extras.values() for d in deps if re.match(r"(torch|numpy|triton)\s*[=<]", d)]
    assert PYPROJECT["license"] and PYPROJECT["authors"] and PYPROJECT["urls"]["Homepage"]


def test_the_runtime_and_the_cli_run_without_the_train_extra(tmp_path):
    """A child process in which pandas, pyarrow, scikit-learn, LightGBM, matplotlib and tqdm cannot be imported:
    predictor.compile runs a model (plain's choices on a CPU), --version answers, and train names the extra."""
    script = tmp_path / "no_train_extra.py"
    script.write_text(f"""
import sys
BLOCKED = {TRAIN_LIBRARIES!r}
for name in BLOCKED:  # None in sys.modules: importing it raises ModuleNotFoundError, find_spec answers None
    sys.modules[name] = None
import torch, predictor
from predictor import cli
m = torch.nn.Linear(16, 16)
x = torch.randn(4, 16)
torch.testing.assert_close(predictor.compile(m, cudagraphs=False)(x), m(x))
print("compiled", predictor.stats()["gemms_seen"] >= 0)
try:
    cli.main(["--version"])
except SystemExit as exc:
    print("version exit", exc.code)
print("train exit", cli.main(["train", "--dataset", "d.parquet", "--out", {str(tmp_path / "m")!r}]))
print("loaded", sorted(n for n, m in sys.modules.items() if m is not None and n.split(".")[0] in BLOCKED))
""")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert "compiled True" in lines and "version exit 0" in lines and "train exit 2" in lines
    assert "loaded []" in lines
    assert f"gemm-predictor {version('gemm-predictor')}" in lines
    errors = [line for line in out.stderr.splitlines() if "gemm-predictor: error:" in line]
    assert len(errors) == 1 and "pip install 'gemm-predictor[train]'" in errors[0], out.stderr[-2000:]


# --- the command line -----------------------------------------------------------------------------------------------

def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.strip() == f"gemm-predictor {version('gemm-predictor')}"


@pytest.mark.parametrize(("argv", "verbose"), [(["-v", "report", "--compare", "a", "b"], True),
                                               (["report", "--compare", "a", "b", "-v"], True),
                                               (["report", "-v", "--compare", "a", "b"], True),
                                               (["report", "--compare", "a", "b"], False)])
def test_verbose_before_or_after_the_subcommand(argv, verbose):
    assert cli.build_parser().parse_args(argv).verbose is verbose


def test_shipped_defaults_resolve_from_any_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = cli.build_parser().parse_args(["evaluate"])
    assert Path(args.model).is_absolute() and (Path(args.model) / "metadata.json").is_file()
    assert Path(args.model).parent in [Path(r) for r in discovery.shipped_roots()]
    assert Path(args.dataset).is_file()  # this checkout's dataset
    assert cli.model_folder("models/nope") == "models/nope"  # not shipped: left as given, refused where read
    (tmp_path / "models" / "h200-default-lgbm").mkdir(parents=True)
    assert cli.model_folder("models/h200-default-lgbm") == "models/h200-default-lgbm"  # one that exists here wins


def test_train_prints_its_metrics_as_one_json_document(tmp_path, capsys):
    data = write_dataset(synthetic_dataset(60, seed=1), tmp_path / "d.parquet", METADATA)
    assert cli.main(["train", "--dataset", str(data), "--ranker", "tree", "--out", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out)  # the whole of stdout
    assert {"train", "heldout"} <= set(doc) and doc["heldout"]["tree"]["problems"] > 0
    big = {"heldout": {f"ranker{i}": {"oracle@1": i / 100} for i in range(300)}}  # a real dataset's size and more
    cli._print_metrics(big)
    printed = capsys.readouterr().out
    assert len(printed) > 4000 and json.loads(printed) == big


def test_train_into_the_shipped_models_folder_needs_force(tmp_path, monkeypatch, capsys):
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    monkeypatch.setattr(roots, "shipped_roots", lambda: [shipped])
    data = write_dataset(synthetic_dataset(60, seed=1), tmp_path / "d.parquet", METADATA)
    argv = ["train", "--dataset", str(data), "--ranker", "tree", "--out", str(shipped / "mine")]
    assert cli.main(argv) == 2
    err = one_error_line(capsys)
    assert len(err) == 1 and "shipped models folder" in err[0] and "--force" in err[0]
    assert not (shipped / "mine").exists()
    assert cli.main([*argv, "--force"]) == 0 and (shipped / "mine" / "metadata.json").is_file()


def test_train_docs_write_outside_the_shipped_models():
    text = (ROOT / "docs" / "TRAIN.md").read_text()
    outs = re.findall(r"--out (\S+)((?: --force)?)", text.split("## Evaluate")[0])
    assert outs and all(not out.startswith("models/") or force for out, force in outs), outs


def test_ctrl_c_is_one_line_and_exit_130(capsys):
    def register(sub):
        p = cli.add_command(sub, "wait-forever", "stands for any long command")
        p.set_defaults(func=lambda args: (_ for _ in ()).throw(KeyboardInterrupt()))

    assert cli.main(["wait-forever"], plugins=[register]) == 130
    assert one_error_line(capsys) == ["gemm-predictor: wait-forever interrupted"]


def test_a_gemv_label_set_names_its_subcommand(capsys, tmp_path):
    assert cli.main(["train", "--dataset", str(ROOT / "datasets" / "nvidia-h200" / "gemv.parquet"),
                     "--out", str(tmp_path / "m")]) == 2
    err = one_error_line(capsys)
    assert len(err) == 1 and "a GEMV label set, not a GEMM dataset" in err[0] and "gemm-predictor gemv-eval" in err[0]


def test_an_h100_model_on_h200_data_says_the_gpus_differ(tmp_path, capsys):
    h200 = {**METADATA, "gpu": "NVIDIA H200", "device": {**METADATA["device"], "gpu": "NVIDIA H200"}}
    data = write_dataset(synthetic_dataset(30, seed=2).assign(gpu="NVIDIA H200"), tmp_path / "h200.parquet", h200)
    assert cli.main(["evaluate", "--model", "models/h100-default-lgbm", "--dataset", str(data),
                     "--out", str(tmp_path / "r")]) == 2
    err = one_error_line(capsys)
    assert len(err) == 1 and "the GPUs differ" in err[0] and "NVIDIA H100" in err[0] and "NVIDIA H200" in err[0]
    assert "--split all" in err[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the message is for a machine without a GPU")
def test_the_deploy_docs_export_example_on_a_cpu_is_one_line(tmp_path, capsys):
    text = (ROOT / "docs" / "DEPLOY.md").read_text()
    program = re.search(r"```python\n(# my_model.py\n.*?)```", text, flags=re.S).group(1)
    (tmp_path / "my_model.py").write_text(program)
    assert cli.main(["export", "--program", str(tmp_path / "my_model.py"), "--out", str(tmp_path / "t.json")]) == 2
    err = one_error_line(capsys)
    assert len(err) == 1 and "export runs on the target GPU" in err[0] and "no CUDA device" in err[0]


# --- predictor.compile and the backend ------------------------------------------------------------------------------

def test_compile_refuses_no_model(unhooked):
    for bad in (None, 3):
        with pytest.raises(ValueError, match="needs a model to compile") as info:
            predictor.compile(bad)
        assert "\n" not in str(info.value)


def test_a_missing_model_folder_is_refused_on_any_machine(unhooked, tmp_path):
    with pytest.raises(ValueError, match=r"predictor_model 'models/nope': no such folder"):
        predictor.compile(torch.nn.Linear(4, 4), predictor_model="models/nope")
    with pytest.raises(ValueError, match="not a model folder"):
        predictor.compile(torch.nn.Linear(4, 4), predictor_model=tmp_path)
    assert not installed._STACK  # refused before any hook was installed


def test_size_ranges_needs_dynamic_shapes(unhooked, caplog):
    with pytest.raises(ValueError, match="size_ranges=True needs a symbolic M.*dynamic=True"):
        predictor.compile(torch.nn.Linear(4, 4), size_ranges=True, dynamic=False)
    with caplog.at_level(logging.WARNING, logger=compile.__name__):
        predictor.compile(torch.nn.Linear(4, 4), size_ranges=True)
        predictor.compile(torch.nn.Linear(4, 4), size_ranges=True, dynamic=True)
    assert [r.getMessage() for r in caplog.records if "size_ranges" in r.getMessage()] == [
        "gemm-predictor: size_ranges=True acts on GEMMs whose M is symbolic: pass dynamic=True (without it only "
        "graphs that Dynamo recompiles as dynamic after a size change get ranges)"]


def test_the_backend_names_its_own_option(unhooked):
    x = torch.randn(2, 8)
    bad = torch.compile(torch.nn.Linear(8, 8), backend="gemm_predictor", options={"tune": -1})
    with pytest.raises(Exception) as info:
        bad(x)
    last = str(info.value).strip().splitlines()
    assert any(line.startswith("ValueError: backend 'gemm_predictor', options {'tune': -1}: tune must be a positive "
                               "integer") for line in last), last
    assert not any("predictor.compile" in line for line in last)
    torch._dynamo.reset()
    model = torch.nn.Linear(8, 8)
    torch.testing.assert_close(torch.compile(model, backend="gemm_predictor", options={"tune": 2})(x), model(x))
    settings = installed._STACK[-1].pruner.settings
    assert (settings.policy, settings.top_k) == ("tune", 2)
    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"unknown Inductor option\(s\) 'tunee' in torch.compile\(backend='gemm_predictor'"):
        torch.compile(model, backend="gemm_predictor", options={"tunee": 2})(x)


def test_a_fused_transformer_layer_says_no_gemm_reached_inductor(unhooked, monkeypatch, caplog):
    monkeypatch.setattr(compile, "_warned_fused", set())
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True).eval()
    x = torch.randn(2, 6, 32)
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger=compile.__name__):
        torch.testing.assert_close(predictor.compile(layer, cudagraphs=False)(x), layer(x))
    lines = [r.getMessage() for r in caplog.records if "fused op" in r.getMessage()]
    assert len(lines) == 1 and "_transformer_encoder_layer_fwd" in lines[0] and "no GEMM" in lines[0]
    assert predictor.stats()["gemms_seen"] == 0
    caplog.clear()
    torch._dynamo.reset()
    with caplog.at_level(logging.WARNING, logger=compile.__name__):  # in training mode its GEMMs reach Inductor
        predictor.compile(layer.train(), cudagraphs=False)(x)
    assert not [r for r in caplog.records if "fused op" in r.getMessage()]
