"""Reading datasets into numbered rows: JSONL and JSON arrays here; the other formats (CSV,
TSV, Parquet, Arrow, ``save_to_disk`` folders, folders of data files) and Hub dataset ids
(``org/name[@revision]``) through the optional ``datasets`` package. Checking and tokenizing
the rows is :mod:`grpo.data.dataset`'s job."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from grpo.models.names import first_line


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


_HUB_DATASET_ID = re.compile(r"[\w.-]+/[\w.-]+(@[^@\s]+)?")


def is_hub_dataset_id(text: str) -> bool:
    """``org/name`` or ``org/name@revision`` that is no local path and no data file's name."""
    return (
        _HUB_DATASET_ID.fullmatch(text) is not None
        and not text.startswith(".")
        and Path(text).suffix not in {".jsonl", ".json", *_DATASETS_BUILDERS}
        and not Path(text).exists()
    )


def dataset_rows(
    source: str | Path, bad: dict[str, list[int]] | None, config: str = "", split: str = ""
) -> tuple[str, list[tuple[int, dict[str, Any]]]]:
    """How errors name the dataset, and its (row number, row): a local file or folder
    (:func:`numbered_rows`, ``bad`` as there), or split ``split`` of a Hub dataset id
    (``config`` its configuration, "" its default), named with the split its rows count in."""
    if is_hub_dataset_id(str(source)):
        split = split or "train"
        rows = list(enumerate(hub_dataset(str(source), config, split), start=1))
        return f"{source} [{split}]", rows
    return str(source), numbered_rows(Path(source), bad, config=config, split=split)


def numbered_rows(
    path: Path, bad: dict[str, list[int]] | None, *, config: str = "", split: str = ""
) -> list[tuple[int, dict[str, Any]]]:
    """(row number, row): the line number in a JSONL file. With ``bad``, a line that is
    not a JSON object is recorded there instead of being an error. ``config`` and ``split``
    choose within a folder of data files or of splits."""
    if not path.exists():
        raise DataError(f"dataset not found: {path}")
    if path.suffix == ".json" and path.read_text().lstrip().startswith("["):
        return list(enumerate(_read_json_array(path), start=1))
    if path.suffix in {".jsonl", ".json"}:
        return _jsonl_rows(path, bad)
    if not path.is_dir() and path.suffix not in _DATASETS_BUILDERS:
        raise DataError(
            f"{path}: unknown dataset format {path.suffix!r}: use .jsonl, .json, .csv, .tsv, "
            ".parquet, .arrow, a folder (save_to_disk's, or of data files) or a Hub dataset id"
        )
    return list(enumerate(_datasets_rows(path, config, split), start=1))


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


def _import_datasets(what: str) -> Any:
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"{what} needs the `datasets` extra (pip install 'grpo[datasets]'); .jsonl needs "
            "nothing"
        ) from None
    return datasets


def _datasets_rows(path: Path, config: str, split: str) -> Any:
    """The rows of a CSV, TSV, Parquet or Arrow file, a ``save_to_disk`` folder (its split
    ``split`` when it holds several) or a folder of data files (laid out as a Hub dataset
    repository), read by the optional ``datasets`` package."""
    datasets = _import_datasets(f"{path}: reading {path.suffix or 'a folder'}")
    if path.is_dir():
        try:
            loaded = datasets.load_from_disk(str(path))
        except FileNotFoundError:  # not save_to_disk's: data files, as in a Hub repository
            return _load_dataset(datasets, str(path), config, split or "train")
        if isinstance(loaded, datasets.DatasetDict):
            if split in loaded:
                return loaded[split]
            raise DataError(
                f"{path} holds the splits {sorted(loaded)}: point at one of them, "
                f"e.g. {path / next(iter(loaded))}, or name it in data.split"
            )
        return loaded
    builder, options = _DATASETS_BUILDERS[path.suffix]
    return datasets.load_dataset(builder, data_files=str(path), split="train", **options)


def hub_dataset(dataset_id: str, config: str, split: str) -> Any:
    """Split ``split`` of the Hub dataset ``org/name[@revision]``, through
    ``datasets.load_dataset``: its cache and ``HF_HUB_OFFLINE`` apply. Offline, or with the
    Hub out of reach, a snapshot in the hub cache (``hf download org/name --repo-type
    dataset``) is read as a local folder, which ``datasets`` alone would not look for."""
    datasets = _import_datasets(f"{dataset_id}: a Hub dataset")
    repo, _, revision = dataset_id.partition("@")
    try:
        return _load_dataset(datasets, repo, config, split, revision=revision or None)
    except ConnectionError as unreachable:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError

        try:
            folder = snapshot_download(
                repo, repo_type="dataset", revision=revision or None, local_files_only=True
            )
        except LocalEntryNotFoundError:
            raise DataError(
                f"{dataset_id}: the Hub dataset cannot be reached ({first_line(unreachable)}) "
                f"and is not in the hub cache: fetch it first with `hf download {repo} "
                "--repo-type dataset` while online"
            ) from None
        return _load_dataset(datasets, folder, config, split)


def _load_dataset(
    datasets: Any, where: str, config: str, split: str, revision: str | None = None
) -> Any:
    """``datasets.load_dataset(where, name=config, split=split)``; its errors in one line,
    naming the keys that choose."""
    try:
        return datasets.load_dataset(where, name=config or None, split=split, revision=revision)
    except ConnectionError:
        raise
    except (OSError, ValueError, KeyError) as error:  # no such dataset, config or split
        raise DataError(
            f"{where}: cannot load it with data.config = {config!r} and split {split!r}: "
            f"{first_line(error)}"
        ) from None
