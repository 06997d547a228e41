"""A model folder's ``metadata.json``, read as a JSON object (what finding a model for a GPU needs; every other check
is ``model_check``'s), and the one error every refusal of a model folder raises."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .reading import METADATA_BYTES, InputError, MissingInput, parse_json, read_regular

METADATA_FILE = "metadata.json"


class ModelError(ValueError):
    """A model folder that cannot be used here: missing, corrupt, tampered with, or made for something else."""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160] if text else ''}"


def _read_metadata(folder: str | Path) -> tuple[bytes, dict[str, Any]]:
    """``(bytes, document)`` of the folder's metadata.json, unchecked beyond being a JSON object."""
    path = Path(folder) / METADATA_FILE
    try:
        data = read_regular(path, METADATA_BYTES, METADATA_FILE)
    except MissingInput:
        raise ModelError(f"{folder}: no model here ({METADATA_FILE} missing)") from None
    except InputError as exc:  # a FIFO, a device, a folder, a file over the cap: named as such, never "missing"
        raise ModelError(str(exc)) from None
    try:
        meta = parse_json(data, path, "JSON document")
    except InputError as exc:  # bad JSON, deep nesting, an integer of thousands of digits
        raise ModelError(str(exc)) from None
    if not isinstance(meta, dict):
        raise ModelError(f"{path}: not a JSON object")
    return data, meta


def read_metadata(folder: str | Path) -> dict[str, Any]:
    """The folder's metadata.json, unchecked beyond being a JSON object."""
    return _read_metadata(folder)[1]
