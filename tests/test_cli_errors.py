"""Bad input gets a one-line error naming the file or value, and a non-zero exit."""

import sys
from pathlib import Path

import pytest

from collectors.cli import main  # the whole CLI, collection subcommands included
from predictor.core.problem import Problem

sys.path.insert(0, str(Path(__file__).parent))
from predictor.testing.synthetic import synthetic_dataset  # noqa: E402


def run_cli(argv, capsys):
    code = main(argv)
    # progress bars share stderr; the error itself is the one line the CLI prefixes
    err = [line for line in capsys.readouterr().err.splitlines() if "gemm-predictor: error:" in line]
    return code, err


@pytest.mark.parametrize("kwargs, needle", [
    ({"op": "mm", "m": 8, "n": 8, "k": 8, "dtype": "float64"}, "unknown dtype 'float64'"),
    ({"op": "mm", "m": 0, "n": 8, "k": 8, "dtype": "float16"}, "m=0"),
    ({"op": "mm", "m": 8, "n": -3, "k": 8, "dtype": "float16"}, "n=-3"),
    ({"op": "conv", "m": 8, "n": 8, "k": 8, "dtype": "float16"}, "unknown op 'conv'"),
])
def test_bad_problem_is_a_one_line_error(kwargs, needle):
    with pytest.raises(ValueError) as info:
        Problem(**kwargs)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_corrupt_dataset(tmp_path, capsys):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 this is not parquet")
    code, err = run_cli(["train", "--dataset", str(bad), "--out", str(tmp_path / "m")], capsys)
    assert code != 0 and len(err) == 1 and "bad.parquet" in err[0]


def test_wrong_schema_dataset(tmp_path, capsys):
    df = synthetic_dataset(8).drop(columns=["time_us_iqr"])
    path = tmp_path / "old.parquet"
    df.to_parquet(path)
    code, err = run_cli(["evaluate", "--dataset", str(path), "--model", "models/h200-default-lgbm", "--out", str(tmp_path / "r")], capsys)
    assert code != 0 and len(err) == 1 and "time_us_iqr" in err[0]


def test_wrong_schema_version(tmp_path, capsys):
    df = synthetic_dataset(8)
    df["schema_version"] = 99
    path = tmp_path / "future.parquet"
    df.to_parquet(path)
    code, err = run_cli(["train", "--dataset", str(path), "--out", str(tmp_path / "m")], capsys)
    assert code != 0 and len(err) == 1 and "schema_version" in err[0]


def test_collect_without_gpu(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code, err = run_cli(["collect", "--out", str(tmp_path / "parts")], capsys)
    assert code != 0 and len(err) == 1 and "CUDA GPU" in err[0]


def test_bad_k(capsys):
    with pytest.raises(SystemExit) as info:
        main(["evaluate", "--k", "0,5"])
    assert info.value.code != 0
    assert "--k values must be >= 1" in capsys.readouterr().err


# --- issue 17: crashes that were tracebacks ------------------------------------------------------------------

def test_report_compare_without_labels_uses_the_folder_names(tmp_path, capsys):
    from predictor.offline.evaluate import evaluate, write_report
    from predictor.testing.synthetic import METADATA

    from predictor.core.device import DeviceInfo
    from predictor.rankers import make_ranker

    rows = synthetic_dataset(12, seed=1)
    device = DeviceInfo.from_metadata(METADATA)
    for name in ("h100", "h200"):
        write_report(evaluate(rows, {"roofline": make_ranker("roofline"), "random": None}, device, ks=(1, 5)),
                     tmp_path / name, {"main": "roofline"})
    assert main(["report", "--compare", str(tmp_path / "h100"), str(tmp_path / "h200" / "metrics.json")]) == 0
    assert "## Comparison: h100 vs h200" in capsys.readouterr().out
    assert main(["report", "--compare", str(tmp_path / "h100"), str(tmp_path / "h100")]) == 0  # same names: paths


@pytest.mark.parametrize("content", [b"{bad", b"[1]", b'{"metrics": [1]}', b'{"metrics": [], "context": 3}',
                                     b"\xff\xfe\x00binary"])
def test_report_compare_bad_json_is_one_line(tmp_path, capsys, content):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    code, err = run_cli(["report", "--compare", str(bad), str(bad), "--labels", "a", "b"], capsys)
    assert code != 0 and len(err) == 1 and "bad.json" in err[0]


def test_a_foreign_file_in_a_parts_folder_does_not_crash_the_writer(tmp_path, caplog):
    from collectors.store import PartWriter
    from predictor.testing.synthetic import METADATA

    parts = tmp_path / "parts"
    parts.mkdir()
    for name in ("part-s0of1-g0-00003.parquet", "part-s0of1-g0-copy.parquet", "part-s0of1-g0-00001 (1).parquet"):
        (parts / name).write_bytes(b"")
    writer = PartWriter(parts, "part-s0of1-g0", METADATA)
    assert writer._seq == 4 and "part-s0of1-g0-copy.parquet" in caplog.text


@pytest.mark.parametrize("args, needle", [
    (["--limit", "-5"], "--limit -5: must be a positive number of problems"),
    (["--limit", "0"], "--limit 0"),
    (["--shard", "3/2"], "--shard 3/2"),
    (["--shard", "x"], "--shard must look like i/n"),
    (["--corpus", "missing.parquet"], "missing.parquet"),
    (["--screen", "1.0"], "--screen 1.0: must be 0 (off) or >= 1.5"),
    (["--screen", "-2"], "--screen -2"),
    (["--reps", "3"], "--reps 3"),
    (["--gpus", "zero"], "--gpus 'zero'"),
])
def test_collect_checks_its_arguments_before_the_gpu(tmp_path, capsys, args, needle):
    code, err = run_cli(["collect", "--out", str(tmp_path / "parts"), *args], capsys)
    assert code != 0 and len(err) == 1 and needle in err[0] and "CUDA" not in err[0], err
    assert not (tmp_path / "parts").exists()


@pytest.mark.parametrize("args, needle", [
    (["--limit", "-5"], "--limit -5"), (["--sample", "0"], "--sample 0"), (["--shard", "1/1"], "--shard 1/1"),
    (["--backends", "ATEN,CUDNN"], "unknown CUDNN"), (["--corpus", "nope.parquet"], "nope.parquet"),
])
def test_collect_inductor_checks_its_arguments_before_the_gpu(tmp_path, capsys, args, needle):
    pytest.importorskip("triton")
    code, err = run_cli(["collect-inductor", "--out", str(tmp_path / "parts"), *args], capsys)
    assert code != 0 and len(err) == 1 and needle in err[0] and "CUDA" not in err[0], err


@pytest.mark.parametrize("change, needle", [
    (lambda m: m.update(libraries="x"), "metadata 'libraries' is 'x', not an object"),
    (lambda m: m.update(split="x"), "metadata 'split' is 'x', not an object"),
    (lambda m: m.update(split_seed=None), "metadata 'split_seed' is None, not an integer"),
    (lambda m: m.update(test_fraction=[]), "metadata 'test_fraction' is [], not a number"),
    (lambda m: m.update(pruning=7), "metadata 'pruning' is 7, not an object or null"),
    (lambda m: m["device"].update(sm_count="many"), "sm_count is 'many', not an integer"),
    (lambda m: m["device"].update(gpu=7), "gpu is 7, not a string"),
    (lambda m: m["device"].update(peak_tflops="fast"), "peak_tflops"),
    (lambda m: m.update(ranker="lgbm"), "no ranker section"),
    (lambda m: m.update(feature_names="all"), "no feature_names list"),
])
def test_model_metadata_of_the_wrong_type_is_one_line(tmp_path, capsys, change, needle):
    import json
    import shutil

    folder = tmp_path / "m"
    shutil.copytree(Path(__file__).resolve().parents[1] / "models" / "h200-default-tree", folder)
    meta = json.loads((folder / "metadata.json").read_text())
    change(meta)
    (folder / "metadata.json").write_text(json.dumps(meta))
    code, err = run_cli(["evaluate", "--model", str(folder), "--out", str(tmp_path / "r")], capsys)
    assert code != 0 and len(err) == 1 and needle in err[0] and str(folder) in err[0], err


def test_dataset_metadata_of_the_wrong_type_is_one_line(tmp_path, capsys):
    from predictor.artifacts.schema import write_dataset
    from predictor.testing.synthetic import METADATA

    meta = {**METADATA, "device": {**METADATA["device"], "sm_count": "many"}}
    path = write_dataset(synthetic_dataset(8), tmp_path / "d.parquet", meta)
    code, err = run_cli(["train", "--dataset", str(path), "--out", str(tmp_path / "m")], capsys)
    assert code != 0 and len(err) == 1 and "sm_count is 'many'" in err[0] and "d.parquet" in err[0], err


def test_commands_that_fit_no_booster_run_without_lightgbm():
    """The GPU machines have no LightGBM: the CLI must still build and run its other commands there."""
    import subprocess

    code = ("import sys; sys.modules['lightgbm'] = None\n"
            "from predictor.cli import main\n"
            "sys.exit(main(['gemv-fit', 'datasets/nvidia-h200/gemv_blocks.parquet']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).parent.parent, timeout=120)
    assert done.returncode == 0, done.stderr[-500:]
    assert "oracle@1" in done.stdout
