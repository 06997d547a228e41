"""Bad input gets a one-line error naming the file or value, and a non-zero exit."""

import sys
from pathlib import Path

import pytest

from predictor.cli import main
from predictor.problem import Problem

sys.path.insert(0, str(Path(__file__).parent))
from synthetic import synthetic_dataset  # noqa: E402


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
