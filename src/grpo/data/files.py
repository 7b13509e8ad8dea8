"""Reading dataset files into numbered rows: JSONL and JSON arrays here, the other formats
(CSV, TSV, Parquet, Arrow, ``save_to_disk`` folders) through the optional ``datasets``
package. Checking and tokenizing the rows is :mod:`grpo.data.dataset`'s job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class DataError(ValueError):
    """A bad dataset row or file; the message names the file and row."""


# Suffix → the `datasets` builder that reads it (and its options).
_DATASETS_BUILDERS: dict[str, tuple[str, dict[str, Any]]] = {
    ".csv": ("csv", {}),
    ".tsv": ("csv", {"delimiter": "\t"}),
    ".parquet": ("parquet", {}),
    ".arrow": ("arrow", {}),
}


def _read_json_array(path: Path) -> list[dict[str, Any]]:
    """A ``.json`` file holding one array of row objects."""
    try:
        rows = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise DataError(f"{path}: invalid JSON ({error})") from None
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise DataError(f"{path}: row {number}: expected a JSON object")
    return rows


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a dataset file, as dicts.

    JSONL (or a ``.json`` array) is read here; CSV, TSV, Parquet, Arrow and folders written
    by ``datasets.Dataset.save_to_disk`` through the ``datasets`` extra.
    """
    return [row for _, row in numbered_rows(Path(path), None)]


def numbered_rows(path: Path, bad: dict[str, list[int]] | None) -> list[tuple[int, dict[str, Any]]]:
    """(row number, row): the line number in a JSONL file. With ``bad``, a line that is
    not a JSON object is recorded there instead of being an error."""
    if not path.exists():
        raise DataError(f"dataset not found: {path}")
    if path.suffix == ".json" and path.read_text().lstrip().startswith("["):
        return list(enumerate(_read_json_array(path), start=1))
    if path.suffix in {".jsonl", ".json"}:
        return _jsonl_rows(path, bad)
    if not path.is_dir() and path.suffix not in _DATASETS_BUILDERS:
        raise DataError(
            f"{path}: unknown dataset format {path.suffix!r}: use .jsonl, .json, .csv, .tsv, "
            ".parquet, .arrow or a folder written by datasets' save_to_disk"
        )
    return list(enumerate(_datasets_rows(path), start=1))


def _jsonl_rows(path: Path, bad: dict[str, list[int]] | None) -> list[tuple[int, dict[str, Any]]]:
    """One JSON object per line; blank lines are skipped but keep the numbering."""
    rows = []
    with path.open() as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                problem = f"invalid JSON ({error})"
                row = None
            else:
                problem = "expected a JSON object"
            if not isinstance(row, dict):
                if bad is None:
                    raise DataError(f"{path}: row {line_number}: {problem}")
                bad.setdefault("not a JSON object", []).append(line_number)
                continue
            rows.append((line_number, row))
    return rows


def _datasets_rows(path: Path) -> Any:
    """The rows of a CSV, TSV, Parquet or Arrow file or a ``save_to_disk`` folder, read by
    the optional ``datasets`` package."""
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"{path}: reading {path.suffix or 'a folder'} needs the `datasets` extra "
            "(pip install 'grpo[datasets]'); .jsonl needs nothing"
        ) from None
    if path.is_dir():
        try:
            loaded = datasets.load_from_disk(str(path))
        except FileNotFoundError as error:
            raise DataError(f"{path}: not a datasets save_to_disk folder ({error})") from None
        if isinstance(loaded, datasets.DatasetDict):
            raise DataError(
                f"{path} holds the splits {sorted(loaded)}: point at one of them, "
                f"e.g. {path / next(iter(loaded))}"
            )
        return loaded
    builder, options = _DATASETS_BUILDERS[path.suffix]
    return datasets.load_dataset(builder, data_files=str(path), split="train", **options)
