"""``calibrate``'s collection half on a CPU: plan, budget, resume (fake rankers, fake clock, fake timings)."""

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from collectors.bulk import collect_loop
from collectors.selection import load_problems
from collectors.calibrate import build_plan, candidate_problems, run_calibration_collection
from collectors.store import PartWriter, finished_problem_ids, merge_parts
from predictor.core.device import DeviceInfo
from predictor.offline.calibration import Ledger, labelled_within
from predictor.core.problem import Problem
from predictor.spaces import enumerate_space

sys.path.insert(0, str(Path(__file__).parent))
from predictor.testing.synthetic import DEVICE, METADATA  # noqa: E402

DEV = DeviceInfo.from_metadata(METADATA)
ENV = {"collector": "bulk", "gpu": DEVICE["gpu"], "cc": DEVICE["cc"], "torch": "2.11.0", "triton": "3.6.0",
       "schema_version": METADATA["schema_version"], "space": "default"}


class HashRanker:
    """Deterministic pseudo-scores (a stand-in for a fitted model)."""

    def __init__(self, salt: int) -> None:
        self.salt = salt

    def score(self, rows: pd.DataFrame, device: DeviceInfo) -> np.ndarray:
        key = rows["m"] * 7 + rows["n"] * 3 + rows["k"] + rows.get("block_m", 0).fillna(0) * 11 + self.salt
        return ((key.to_numpy(dtype=np.int64) * 2654435761) % 1000).astype(float)


def write_corpus(tmp_path: Path) -> Path:
    rows = []
    for i in range(30):
        fam = ("llm:alpha:qkv:fwd", "llm:beta:mlp:fwd", "enc:gamma:attn:fwd")[i % 3]
        p = Problem("mm" if i % 4 else "bmm", 64 + 32 * i, 128 + 16 * (i % 5), 256 + 64 * (i % 3),
                    ("float16", "bfloat16", "float32")[i % 3], b=1 if i % 4 else 2)
        rows.append({**p.to_dict(), "family_tag": fam, "group": ":".join(fam.split(":")[:2])})
    path = tmp_path / "corpus.parquet"
    pd.DataFrame(rows).to_parquet(path)
    return path


def write_model(tmp_path: Path, name: str, test_groups: list[str]) -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "metadata.json").write_text(json.dumps({"split": {"test_groups": test_groups}, **METADATA}))
    return str(folder)


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def fake_collect(corpus: Path, parts: Path, clock: FakeClock, seconds_per_problem: float, die_after: int | None = None):
    problems = load_problems(corpus).set_index("problem_id", drop=False)

    def collect_fn(order, should_stop, on_problem):
        todo = problems.loc[order]
        calls = {"n": 0}

        def measure(p, cands):
            calls["n"] += 1
            if die_after is not None and calls["n"] > die_after:
                raise SystemExit(143)  # what SIGTERM does to the real collector
            clock.t += seconds_per_problem
            return [{"status": "ok", "time_us": float(p.m + i), "time_us_iqr": 0.1, "reps": 10}
                    for i, _ in enumerate(cands)]

        writer = PartWriter(parts, "part-s0of1-g0", METADATA, every=3)
        return collect_loop(todo, lambda p: enumerate_space(p, "default", DEV), measure, writer, ENV,
                            should_stop=should_stop, on_problem=on_problem)

    return collect_fn


@pytest.fixture
def setup(tmp_path, monkeypatch):
    from predictor.artifacts import model_folder

    corpus = write_corpus(tmp_path)
    base = write_model(tmp_path, "base", ["llm:beta"])
    monkeypatch.setattr(model_folder, "load_model", lambda folder: (HashRanker(len(Path(folder).name)),
                                                               json.loads((Path(folder) / "metadata.json").read_text())))
    return corpus, base


def calibrate(corpus, base, parts, clock, minutes, per_problem, die_after=None):
    return run_calibration_collection(str(corpus), str(parts), minutes, base, [base], base, workers=4,
                                      prepare=lambda: DEV, collect_fn=fake_collect(corpus, parts, clock, per_problem,
                                                                                   die_after), clock=clock)


def test_held_out_groups_never_planned_and_order_deterministic(setup, tmp_path):
    corpus, base = setup
    problems = load_problems(corpus)
    cands = candidate_problems(problems, {"llm:beta"})
    assert len(cands) == 20 and not (cands["group"] == "llm:beta").any()
    plans = [build_plan(c, DEV, HashRanker(1), DEV, HashRanker(2), DEV, workers=4)
             for c in (cands, cands.sample(frac=1.0, random_state=3))]
    assert plans[0]["problem_id"].tolist() == plans[1]["problem_id"].tolist()
    assert set(plans[0]["problem_id"]) == set(cands["problem_id"])
    assert plans[0]["reason"].str.len().min() > 0
    # coverage: the first picks span both dtypes left (bfloat16 rows are all in the held-out group)
    first = problems.set_index("problem_id").loc[plans[0]["problem_id"].head(4), "dtype"]
    assert set(first) == {"float16", "float32"}


def test_budget_stops_then_resume_counts_earlier_time(setup, tmp_path):
    corpus, base = setup
    parts, clock = tmp_path / "parts", FakeClock()
    held = set(load_problems(corpus).query("group == 'llm:beta'").problem_id)
    first = calibrate(corpus, base, parts, clock, minutes=1.0, per_problem=10.0)  # 60 s: 6 problems of 10 s
    assert first["new"] == 6 and first["spent_s"] == pytest.approx(60.0)
    assert len(finished_problem_ids(parts)) == 6
    plan = pd.read_parquet(parts / "calibration" / "plan.parquet")
    assert not held & set(plan.problem_id)
    # the same budget again: nothing left
    assert calibrate(corpus, base, parts, clock, minutes=1.0, per_problem=10.0)["new"] == 0
    # a larger budget resumes where it stopped, in plan order, counting the 60 s already spent
    second = calibrate(corpus, base, parts, clock, minutes=2.0, per_problem=10.0)
    assert second["new"] == 6 and second["spent_s"] == pytest.approx(120.0)
    times = labelled_within(parts)
    assert sorted(times.values()) == pytest.approx([10.0 * i for i in range(1, 13)])
    assert sorted(labelled_within(parts, minutes=0.5).values()) == pytest.approx([10.0, 20.0, 30.0])
    order = plan["problem_id"].tolist()
    assert sorted(times, key=times.get) == order[:12]
    assert not held & set(times)
    df = merge_parts(parts, tmp_path / "merged.parquet")  # the calibration folder stays out of the merge
    assert df.problem_id.nunique() == 12


def test_killed_run_keeps_written_problems_and_its_time(setup, tmp_path):
    corpus, base = setup
    parts, clock = tmp_path / "parts", FakeClock()
    with pytest.raises(SystemExit):
        calibrate(corpus, base, parts, clock, minutes=5.0, per_problem=10.0, die_after=4)
    ledger = Ledger(parts)
    assert ledger.spent_s == pytest.approx(40.0) and len(ledger.runs) == 1
    assert len(labelled_within(parts)) == 4  # flushed on the way down
    again = calibrate(corpus, base, parts, clock, minutes=1.0, per_problem=10.0)
    assert again["new"] == 2 and again["spent_s"] == pytest.approx(60.0)
    assert len(Ledger(parts).runs) == 2


def test_bad_arguments_fail_before_any_work(setup, tmp_path):
    corpus, base = setup
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match="not a folder"):
        calibrate(corpus, base, tmp_path / "afile", FakeClock(), 1.0, 1.0)
    with pytest.raises(ValueError, match="positive"):
        calibrate(corpus, base, tmp_path / "p", FakeClock(), 0.0, 1.0)
    nogroups = write_model(tmp_path, "old", [])
    with pytest.raises(ValueError, match="test_groups"):
        run_calibration_collection(str(corpus), str(tmp_path / "p"), 1.0, base, [nogroups], None, 4,
                                   prepare=lambda: DEV, collect_fn=None)


def test_fit_takes_the_prefix_labelled_in_time_and_makes_a_model_for_the_new_gpu(setup, tmp_path, monkeypatch):
    """calibrate's fit: the new GPU's rows labelled within --until-minutes plus the base GPU's training rows (its
    held-out groups left out), saved as a model folder naming the new GPU that the runtime loader accepts."""
    from predictor.artifacts.model_folder import load_runtime_model
    from predictor.offline import calibrate_fit
    from predictor.testing.synthetic import synthetic_dataset

    corpus, base = setup
    parts, clock = tmp_path / "parts", FakeClock()
    calibrate(corpus, base, parts, clock, minutes=2.0, per_problem=10.0)  # 12 problems, one per 10 s
    base_rows = synthetic_dataset(40, groups=4)
    held = base_rows["problem_id"].str[0].isin(list("0123"))  # whole problems of a group the base model held out
    base_rows = base_rows.assign(family_tag=base_rows["family_tag"].where(~held, "llm:beta:x:fwd"))
    monkeypatch.setattr(calibrate_fit, "base_training_rows", lambda model: (
        base_rows[~base_rows["family_tag"].str.startswith("llm:beta")], DeviceInfo.from_metadata(METADATA), ["llm:beta"]))
    new_device = {**DEVICE, "gpu": "New GPU", "mem_bandwidth_gbs": 2000.0}
    monkeypatch.setattr(calibrate_fit, "read_dataset", _relabel_gpu(new_device))
    meta = calibrate_fit.calibrate_fit(parts, tmp_path / "models" / "new", base, minutes=1.0)
    assert meta["device"]["gpu"] == "New GPU" and meta["device"]["mem_bandwidth_gbs"] == 2000.0
    assert meta["calibration"]["new_problems"] == 6 and meta["calibration"]["labelled_seconds"] == pytest.approx(60.0)
    assert meta["calibration"]["base_rows"] == int((~base_rows["family_tag"].str.startswith("llm:beta")).sum())
    assert meta["split"]["test_groups"] == ["llm:beta"]
    ranker, loaded = load_runtime_model(tmp_path / "models" / "new")
    assert loaded["device"]["gpu"] == "New GPU"
    assert np.isfinite(ranker.score(base_rows, DeviceInfo.from_metadata(loaded))).all()
    with pytest.raises(ValueError, match="method must be one of"):
        calibrate_fit.fit_calibrated(base_rows, DeviceInfo.from_metadata(METADATA), method="finetune")
    with pytest.raises(ValueError, match="needs the base GPU's rows"):
        calibrate_fit.fit_calibrated(base_rows, DeviceInfo.from_metadata(METADATA), method="union")


def _relabel_gpu(device: dict):
    """read_dataset for the calibration parts, as if they had been measured on ``device``."""
    from predictor.artifacts.schema import read_dataset

    def read(path):
        rows = read_dataset(path)
        rows.attrs["metadata"] = {**rows.attrs["metadata"], "gpu": device["gpu"], "device": device}
        return rows

    return read
