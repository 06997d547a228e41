"""The shipped models are not overwritten by accident: every CLI command that writes a model folder refuses one
of them unless told ``--force``."""

from __future__ import annotations

from pathlib import Path

from ..artifacts.atomic import OutputError


def shipped_model(folder: str | Path) -> Path | None:
    """The shipped root holding ``folder`` when it is a shipped model folder there, else None. In a git checkout
    that is a folder whose ``metadata.json`` git tracks (a model a user trained into ``models/`` is theirs); in an
    installed package every model folder (the wheel carries them all)."""
    from ..artifacts.model_folder import METADATA_FILE
    from ..artifacts.roots import shipped_roots

    folder = Path(folder).expanduser().resolve()
    if not (folder / METADATA_FILE).is_file():
        return None
    for root in shipped_roots():
        root = Path(root).resolve()
        if folder.parent == root and _tracked(root, folder / METADATA_FILE):
            return root
    return None


def _tracked(root: Path, path: Path) -> bool:
    """Whether git tracks ``path`` in the checkout holding ``root``; True where that cannot be asked (no git
    checkout, no git): a model there is treated as shipped."""
    import shutil
    import subprocess

    git = shutil.which("git")
    if git is None or not (root.parent / ".git").exists():
        return True
    try:
        out = subprocess.run([git, "-C", str(root.parent), "ls-files", "--error-unmatch", "--",
                              str(path.relative_to(root.parent))], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return True
    return out.returncode == 0


def check_not_shipped(folder: str | Path, force: bool, option: str = "--force") -> None:
    """Refuse to write over a shipped model folder without ``force`` (one line naming it)."""
    root = None if force else shipped_model(folder)
    if root is not None:
        raise OutputError(f"{Path(folder).resolve()}: is a shipped model (in {root}); pass {option} to replace it "
                          "(nothing was written)")
