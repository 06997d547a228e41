"""Training an exhaustive-space model from two datasets: exhaustive rows where a problem has them, else default."""

import sys
from pathlib import Path

import pytest

from predictor.offline.train import load_training_rows, train
from predictor.artifacts.schema import write_dataset

sys.path.insert(0, str(Path(__file__).parent))
from predictor.testing.synthetic import METADATA, synthetic_dataset  # noqa: E402


@pytest.fixture
def two_datasets(tmp_path):
    rows = synthetic_dataset(n_problems=40, groups=4)
    default = rows.assign(space="default")
    some = sorted(rows["problem_id"].unique())[:12]
    # the 'exhaustive' rows of 12 problems: the same candidates measured again, 10% slower, so we can tell them apart
    exhaustive = rows[rows["problem_id"].isin(some)].assign(space="exhaustive")
    exhaustive["time_us"] = exhaustive["time_us"] * 1.1
    d, e = tmp_path / "default.parquet", tmp_path / "exhaustive.parquet"
    write_dataset(default, d, {**METADATA, "space": "default"})
    write_dataset(exhaustive, e, {**METADATA, "space": "exhaustive"})
    return d, e, set(some), rows


def test_problems_keep_their_exhaustive_rows_and_the_rest_fall_back_to_default(two_datasets):
    d, e, some, rows = two_datasets
    got, device, _ = load_training_rows([d, e], "exhaustive")
    assert set(got["problem_id"]) == set(rows["problem_id"])  # no problem lost, none doubled below
    assert set(got.loc[got["space"] == "exhaustive", "problem_id"]) == some
    assert not set(got.loc[got["space"] == "default", "problem_id"]) & some
    assert len(got) == len(rows)
    assert device.gpu == METADATA["gpu"]


def test_datasets_of_two_gpus_are_refused(two_datasets, tmp_path):
    d, e, _, rows = two_datasets
    other = tmp_path / "other.parquet"
    write_dataset(rows.assign(space="exhaustive", gpu="NVIDIA H100"), other, {**METADATA, "gpu": "NVIDIA H100", "space": "exhaustive"})
    with pytest.raises(ValueError, match="other.parquet: measured on 'NVIDIA H100'"):
        load_training_rows([d, other], "exhaustive")


def test_exhaustive_model_is_scored_only_on_exhaustive_problems(two_datasets, tmp_path):
    d, e, some, _ = two_datasets
    meta = train([d, e], "tree", tmp_path / "m", space="exhaustive", progress=False)
    assert meta["space"] == "exhaustive"
    assert [x["path"] for x in meta["datasets"]] == [str(d), str(e)]
    assert meta["split"]["scored_test_problems"] <= len(some)
    assert meta["split"]["scored_test_problems"] < meta["split"]["test_problems"]


def test_evaluation_holds_out_exactly_the_groups_training_held_out(two_datasets, tmp_path):
    from predictor.offline.evaluate import run_evaluation
    from predictor.offline.split import groups_of, split_by_group

    d, e, some, rows = two_datasets
    exhaustive_only = rows[rows["problem_id"].isin(some)]
    groups = groups_of(exhaustive_only)
    # a seed where re-splitting the exhaustive file alone would hold out other problems than training did
    for seed in range(20):
        held_out = set(groups_of(split_by_group(rows, 0.25, seed)[1]))
        resplit = set(groups_of(split_by_group(exhaustive_only, 0.25, seed)[1]))
        if groups.isin(held_out).any() and resplit != held_out & set(groups):
            break
    else:
        pytest.fail("fixture: no seed separates the two splits")
    meta = train([d, e], "tree", tmp_path / "m", space="exhaustive", seed=seed, progress=False)
    assert set(meta["split"]["test_groups"]) == held_out
    result = run_evaluation(tmp_path / "m", e, tmp_path / "report", space="exhaustive")
    assert result["context"]["n_problems"] == exhaustive_only.loc[groups.isin(held_out), "problem_id"].nunique()


def test_holdout_from_a_model_keeps_its_groups_when_the_dataset_grows(two_datasets, tmp_path):
    """A fraction-based split moves when groups grow; --holdout-from pins an earlier model's held-out groups."""
    import subprocess

    d, e, some, rows = two_datasets
    first = train(d, "tree", tmp_path / "first", progress=False)
    held_out = first["split"]["test_groups"]
    again = train(d, "tree", tmp_path / "again", holdout_groups=held_out, progress=False)
    assert again["split"]["test_groups"] == held_out
    assert again["split"]["test_problems"] == first["split"]["test_problems"]
    assert again["split"]["method"] == "predictor.offline.split.split_by_named_groups"
    assert "held-out groups of an earlier model" in (tmp_path / "again" / "MODEL_CARD.md").read_text()
    with pytest.raises(ValueError, match="not in the dataset: synthetic:g99"):
        train(d, "tree", tmp_path / "bad", holdout_groups=["synthetic:g99"], progress=False)
    cli = subprocess.run([sys.executable, "-m", "predictor.cli", "train", "--dataset", str(d), "--ranker", "tree",
                          "--out", str(tmp_path / "cli"), "--holdout-from", str(tmp_path / "first")],
                         capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr[-500:]
    import json

    assert json.loads((tmp_path / "cli" / "metadata.json").read_text())["split"]["test_groups"] == held_out
    bad = subprocess.run([sys.executable, "-m", "predictor.cli", "train", "--dataset", str(d), "--ranker", "tree",
                          "--out", str(tmp_path / "x"), "--holdout-from", str(tmp_path / "nowhere")],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1 and "nowhere" in bad.stderr
