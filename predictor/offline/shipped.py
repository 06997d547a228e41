"""The shipped models are not overwritten by accident: every CLI command that writes a model folder refuses one
of them unless told ``--force``."""

from __future__ import annotations

from pathlib import Path

from ..atomic import OutputError


def shipped_model(folder: str | Path) -> Path | None:
    """The shipped root holding ``folder`` when it is an existing model folder there, else None. Every folder in
    a shipped root ships (``setup.py`` packages the whole ``models/`` folder)."""
    from ..artifacts import METADATA_FILE
    from ..runtime.discovery import shipped_roots

    folder = Path(folder).expanduser().resolve()
    if not (folder / METADATA_FILE).is_file():
        return None
    for root in shipped_roots():
        if folder.parent == Path(root).resolve():
            return Path(root)
    return None


def check_not_shipped(folder: str | Path, force: bool, option: str = "--force") -> None:
    """Refuse to write over a shipped model folder without ``force`` (one line naming it)."""
    root = None if force else shipped_model(folder)
    if root is not None:
        raise OutputError(f"{Path(folder).resolve()}: is a shipped model (in {root}); pass {option} to replace it "
                          "(nothing was written)")
