"""Package layout that pyproject.toml cannot express: the shipped models ride in the wheel as ``predictor/models``.

The models stay in the top-level ``models/`` folder (the training CLI writes there; docs and tests name that path),
and ``packages.find`` cannot add a package mapped from another folder, so the package list lives here.
``predictor.runtime.choices.discovery`` finds them through ``importlib.resources`` once installed. ``datasets/`` is no package
and never enters the wheel.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["predictor*", "collectors*"]), "predictor.models"],
    package_dir={"predictor.models": "models"},
    # the three files a model folder holds (predictor.artifacts.model_folder), the GEMV block tables
    # (predictor.runtime.lowerings.gemv_blocks) and the few-rows tables (predictor.runtime.lowerings.few_rows); nothing else a models/
    # folder may gather
    package_data={"predictor.models": ["*/metadata.json", "*/MODEL_CARD.md", "*/model.lgbm.txt", "*/model.json",
                                       "gemv-blocks/*.json", "few-rows/*.json"],
                  "predictor.artifacts": ["tree_walk.c"]},  # compiled on first use (predictor.artifacts.compiled_walk)
)
