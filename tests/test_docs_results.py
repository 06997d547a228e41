"""Every benchmark-result folder under docs/ is cited: by the README, a doc (docs/*.md, the zoo's index), a dataset or
model card, or, for a run's sub-run, by that run's own README. A folder nobody cites is a superseded run."""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# a folder holding one of these is a run's result
RESULT_FILES = ("results.json", "results.md", "README.md", "report.md", "metrics.json", "hints.md", "table.json",
                "agreement.json")
# folders whose README is an index of runs: a doc, not a result
INDEXES = ("docs/benchmarks/zoo",)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def citing_docs(repo: Path) -> list[Path]:
    return ([repo / "README.md", repo / "benchmarks" / "README.md", *sorted((repo / "docs").glob("*.md"))]
            + [repo / i / "README.md" for i in INDEXES]
            + sorted((repo / "datasets").rglob("*.md")) + sorted((repo / "models").rglob("*.md")))


def cited_text(repo: Path, mds: list[Path]) -> str:
    """The docs' text and every relative link they hold, resolved to a path from the repository root."""
    parts = []
    for md in (m for m in mds if m.is_file()):
        text = md.read_text()
        parts.append(text)
        for target in LINK.findall(text):
            if not re.match(r"[a-z]+:", target) and not target.startswith("#"):
                parts.append(os.path.relpath(os.path.normpath(md.parent / target.split("#")[0]), repo))
    return "\n".join(parts)


def names(text: str, path: str) -> bool:
    return re.search(re.escape(path) + r"(?![\w.-])", text) is not None


def result_folders(repo: Path) -> list[Path]:
    docs = repo / "docs"
    folders = {p.parent for p in docs.rglob("*") if p.is_file() and p.name in RESULT_FILES}
    return sorted(f for f in folders if f != docs and str(f.relative_to(repo)) not in INDEXES)


def uncited(repo: Path) -> list[str]:
    text = cited_text(repo, citing_docs(repo))
    folders = result_folders(repo)
    covered = {f for f in folders if names(text, str(f.relative_to(repo)))}
    grew = True
    while grew:  # a run's README names its sub-runs by their path from it
        grew = False
        for run in list(covered):
            own = "\n".join(md.read_text() for md in run.glob("*.md"))
            for f in folders:
                if f not in covered and run in f.parents and names(own, str(f.relative_to(run))):
                    covered.add(f)
                    grew = True
    return [str(f.relative_to(repo)) for f in folders if f not in covered]


def test_every_result_folder_is_cited():
    assert result_folders(REPO)
    assert not uncited(REPO), uncited(REPO)


def test_an_uncited_run_is_found(tmp_path):
    """On a stand-in tree: a run cited by a doc, its sub-run named by the run's README, a sub-run nobody names and
    a run nobody cites."""
    docs = tmp_path / "docs"
    for run in ("benchmarks/zoo/cited", "benchmarks/zoo/cited/sub", "benchmarks/zoo/cited/stale", "benchmarks/orphan"):
        (docs / run).mkdir(parents=True)
        (docs / run / "results.json").write_text("[]")
    (docs / "benchmarks/zoo/cited/README.md").write_text("the other order: `sub/`")
    (docs / "USAGE.md").write_text("[zoo](benchmarks/zoo/cited/README.md)")
    (tmp_path / "README.md").write_text("")
    assert uncited(tmp_path) == ["docs/benchmarks/orphan", "docs/benchmarks/zoo/cited/stale"]
