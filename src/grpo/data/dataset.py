"""Prompt datasets: loading, validation, prompt formatting and tokenization.

Every row is checked and every prompt tokenized once at start-up, so a bad row stops the
run before the first step, with the file and row named, instead of hours into it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class DataError(ValueError):
    """A bad dataset row or file; the message names the file and row."""


@dataclass
class PromptDataset:
    """Rows of a prompt dataset with their prompts already tokenized.

    ``columns[name][i]`` is row i's value of a task column (passed to reward functions).
    ``skipped[reason]`` lists the file rows left out by ``data.skip_bad_rows``.
    """

    source: str
    prompts: list[str]  # the formatted prompt text (after any chat template)
    prompt_token_ids: list[list[int]]
    columns: dict[str, list[Any]]
    skipped: dict[str, list[int]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.prompts)

    def describe_skipped(self) -> str:
        """'3 rows skipped: 2 over max_prompt_tokens (rows 4, 9), …' or ''."""
        if not self.skipped:
            return ""
        total = sum(len(rows) for rows in self.skipped.values())
        parts = [
            f"{len(rows)} {reason} (row{'s' if len(rows) > 1 else ''} "
            f"{', '.join(map(str, rows[:5]))}{', …' if len(rows) > 5 else ''})"
            for reason, rows in self.skipped.items()
        ]
        return f"{self.source}: {total} row(s) skipped: " + "; ".join(parts)


# Suffix → the `datasets` builder that reads it (and its options).
_DATASETS_BUILDERS: dict[str, tuple[str, dict[str, Any]]] = {
    ".csv": ("csv", {}),
    ".tsv": ("csv", {"delimiter": "\t"}),
    ".parquet": ("parquet", {}),
    ".arrow": ("arrow", {}),
}
ANSWER_FORMATS = ("plain", "gsm8k", "math")


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
    return [row for _, row in _numbered_rows(Path(path), None)]


def _numbered_rows(
    path: Path, bad: dict[str, list[int]] | None
) -> list[tuple[int, dict[str, Any]]]:
    """(row number, row): the line number in a JSONL file. With ``bad``, a line that is
    not a JSON object is recorded there instead of being an error."""
    if not path.exists():
        raise DataError(f"dataset not found: {path}")
    if path.suffix == ".json" and path.read_text().lstrip().startswith("["):
        return list(enumerate(_read_json_array(path), start=1))
    if path.suffix in {".jsonl", ".json"}:
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
    if not path.is_dir() and path.suffix not in _DATASETS_BUILDERS:
        raise DataError(
            f"{path}: unknown dataset format {path.suffix!r}: use .jsonl, .json, .csv, .tsv, "
            ".parquet, .arrow or a folder written by datasets' save_to_disk"
        )
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
        return list(enumerate(loaded, start=1))
    builder, options = _DATASETS_BUILDERS[path.suffix]
    loaded = datasets.load_dataset(builder, data_files=str(path), split="train", **options)
    return list(enumerate(loaded, start=1))


def reference_answer(text: Any, answer_format: str) -> str | None:
    """The final answer of a reference solution, or None when it has none.

    ``plain``: the value itself. ``gsm8k``: the rest of the text after the last ``####``
    (GSM8K's "…reasoning… #### 72" → "72"). ``math``: the contents of the last
    ``\\boxed{…}`` (MATH's solutions).
    """
    if answer_format == "plain":
        return text
    from grpo.rewards.math import last_boxed

    text = str(text)
    if answer_format == "gsm8k":
        tail = text.rsplit("####", 1)[1].strip() if "####" in text else ""
        return tail.splitlines()[0].strip() if tail else None
    if answer_format == "math":
        boxed = last_boxed(text)
        return boxed.strip() if boxed else None
    raise DataError(
        f"data.answer_format must be one of {list(ANSWER_FORMATS)}, got {answer_format!r}"
    )


def format_prompt(text: str, tokenizer: Any, *, chat_template: bool, system_prompt: str) -> str:
    if not chat_template:
        return system_prompt + text if system_prompt else text
    if not getattr(tokenizer, "chat_template", None):
        raise DataError("data.chat_template is true but the tokenizer has no chat template")
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": text})
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def _row_problem(row: dict[str, Any], prompt_column: str, columns: dict[str, str]) -> str | None:
    """Why a row cannot be used (a short reason, the key of ``skipped``), or None.
    ``columns``: each required column → how an error names it."""
    if prompt_column not in row:
        return f"missing the prompt column {prompt_column!r}"
    text = row[prompt_column]
    if not isinstance(text, str):
        return f"column {prompt_column!r} not a string"
    if not text.strip():
        return "empty prompt"
    missing = [label for name, label in columns.items() if name not in row]
    if missing:
        return f"missing column(s) {missing}"
    return None


def load_prompt_dataset(
    path: str | Path,
    tokenizer: Any,
    *,
    prompt_column: str = "prompt",
    max_prompt_tokens: int = 512,
    truncate_long_prompts: bool = False,
    chat_template: bool = False,
    system_prompt: str = "",
    skip_bad_rows: bool = False,
    column_map: dict[str, str] | None = None,
    answer_format: str = "plain",
) -> PromptDataset:
    """Read, check, format and tokenize every row of a prompt dataset.

    A bad row (missing the prompt or a column the first row has, an empty prompt, a prompt
    over ``max_prompt_tokens`` unless truncated) is a :class:`DataError` naming the file and
    row, or with ``skip_bad_rows`` left out and counted in ``skipped``. ``column_map`` maps
    the names reward functions see to the dataset's columns (e.g. ``{"answer":
    "solution"}``); the dataset's own columns are passed as well. ``answer_format`` (see
    :func:`reference_answer`) then reduces the ``answer`` column to the final answer.
    """
    skipped: dict[str, list[int]] = {}
    rows = _numbered_rows(Path(path), skipped if skip_bad_rows else None)
    if not rows:
        raise DataError(f"{path}: the dataset is empty")
    column_map = dict(column_map or {})
    _check_first_row(path, rows[0][1], prompt_column, column_map, answer_format, skip_bad_rows)
    prompts, token_ids = [], []
    own_columns = [name for name in rows[0][1] if name != prompt_column]
    column_names = own_columns + [name for name in column_map if name not in own_columns]
    required = {name: name for name in own_columns} | {
        source: f"{source} (data.column_map.{name})" for name, source in column_map.items()
    }
    columns: dict[str, list[Any]] = {name: [] for name in column_names}
    for row_number, row in rows:
        where = f"{path}: row {row_number}"
        problem = _row_problem(row, prompt_column, required)
        if problem is not None:
            if not skip_bad_rows:
                raise DataError(f"{where}: {problem} (data.skip_bad_rows = true skips such rows)")
            skipped.setdefault(problem, []).append(row_number)
            continue
        task = _task_columns(row, own_columns, column_map, answer_format, where)
        prompt = format_prompt(
            row[prompt_column], tokenizer, chat_template=chat_template, system_prompt=system_prompt
        )
        # A chat template already carries any special tokens it wants.
        ids = tokenizer(prompt, add_special_tokens=not chat_template)["input_ids"]
        if len(ids) > max_prompt_tokens:
            if skip_bad_rows and not truncate_long_prompts:
                skipped.setdefault(_long_reason(max_prompt_tokens), []).append(row_number)
                continue
            ids = _truncated(ids, max_prompt_tokens, truncate_long_prompts, where)
        prompts.append(prompt)
        token_ids.append(ids)
        for name in column_names:
            columns[name].append(task[name])
    if not prompts:
        raise DataError(f"{path}: no usable row ({sum(map(len, skipped.values()))} skipped)")
    return PromptDataset(
        source=str(path),
        prompts=prompts,
        prompt_token_ids=token_ids,
        columns=columns,
        skipped=skipped,
    )


def _check_first_row(
    path: str | Path,
    first_row: dict[str, Any],
    prompt_column: str,
    column_map: dict[str, str],
    answer_format: str,
    skip_bad_rows: bool,
) -> None:
    """Errors the first row shows for the whole file: no prompt column (unless bad rows
    are skipped), or no answer column for an ``answer_format`` to reduce."""
    if prompt_column not in first_row and not skip_bad_rows:
        raise DataError(
            f"{path}: no column {prompt_column!r} (data.prompt_column); "
            f"its columns are {sorted(first_row)}"
        )
    if answer_format != "plain" and "answer" not in column_map and "answer" not in first_row:
        raise DataError(
            f"{path}: data.answer_format = {answer_format!r} reads the 'answer' column, which "
            f'it lacks: map one with data.column_map = {{ answer = "..." }}'
        )


def _task_columns(
    row: dict[str, Any],
    own_columns: list[str],
    column_map: dict[str, str],
    answer_format: str,
    where: str,
) -> dict[str, Any]:
    """The row's values for reward functions: its own columns, then the mapped ones, with
    the answer reduced by ``answer_format``."""
    task = {name: row[name] for name in own_columns}
    task.update({name: row[source] for name, source in column_map.items()})
    if answer_format != "plain":
        answer = reference_answer(task["answer"], answer_format)
        if answer is None:
            expected = "'#### <answer>'" if answer_format == "gsm8k" else "a \\boxed{...}"
            raise DataError(
                f"{where}: data.answer_format = {answer_format!r} but its answer has no "
                f"{expected}: {str(task['answer'])[:80]!r}"
            )
        task["answer"] = answer
    return task


def _long_reason(max_prompt_tokens: int) -> str:
    """Why a long prompt is refused: an error's wording and the key of ``skipped``."""
    return f"over data.max_prompt_tokens = {max_prompt_tokens}"


def _truncated(
    ids: list[int], max_prompt_tokens: int, truncate_long_prompts: bool, where: str
) -> list[int]:
    """A too-long prompt's last ``max_prompt_tokens`` tokens, or, without
    ``truncate_long_prompts``, the error naming its row."""
    if not truncate_long_prompts:
        raise DataError(
            f"{where}: prompt is {len(ids)} tokens, {_long_reason(max_prompt_tokens)} (set "
            "data.truncate_long_prompts = true to keep its end, or "
            "data.skip_bad_rows = true to skip it)"
        )
    return ids[-max_prompt_tokens:]


def load_dataset_for(path: str | Path, tokenizer: Any, data: Any) -> PromptDataset:
    """:func:`load_prompt_dataset` with the formatting options of a ``[data]`` config section."""
    return load_prompt_dataset(
        path,
        tokenizer,
        prompt_column=data.prompt_column,
        max_prompt_tokens=data.max_prompt_tokens,
        truncate_long_prompts=data.truncate_long_prompts,
        chat_template=data.chat_template,
        system_prompt=data.system_prompt,
        skip_bad_rows=data.skip_bad_rows,
        column_map=data.column_map,
        answer_format=data.answer_format,
    )
