"""Prompt datasets: checking, formatting and tokenizing the rows of a file (read by
:mod:`grpo.data.files`).

Every row is checked and every prompt tokenized once at start-up, so a bad row stops the
run before the first step, with the file and row named, instead of hours into it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo.config import DataConfig
from grpo.data.files import DataError, dataset_rows
from grpo.text.boxed import last_boxed


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
    row_numbers: list[int] = field(default_factory=list)  # each prompt's row in the file

    def __len__(self) -> int:
        return len(self.prompts)

    def where(self, index: int) -> str:
        """How an error names prompt ``index``: its file and row (a JSONL file's line)."""
        number = self.row_numbers[index] if self.row_numbers else index + 1
        return f"{self.source}: row {number}"

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


ANSWER_FORMATS = ("plain", "gsm8k", "math")


def reference_answer(text: Any, answer_format: str) -> str | None:
    """The final answer of a reference solution, or None when it has none.

    ``plain``: the value itself. ``gsm8k``: the rest of the text after the last ``####``
    (GSM8K's "…reasoning… #### 72" → "72"). ``math``: the contents of the last
    ``\\boxed{…}`` (MATH's solutions).
    """
    if answer_format == "plain":
        return text
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
    dataset_config: str = "",
    split: str = "",
) -> PromptDataset:
    """Read, check, format and tokenize every row of a prompt dataset: a file, a folder, or a
    Hub dataset id (``dataset_config`` and ``split`` choose in it). A bad row (missing the
    prompt or a column the first row has, an empty prompt, a prompt over
    ``max_prompt_tokens`` unless truncated) is a :class:`DataError` naming the file and row,
    or with ``skip_bad_rows`` left out and counted in ``skipped``. ``column_map`` maps the
    names reward functions see to the dataset's columns (e.g. ``{"answer": "solution"}``);
    the dataset's own columns are passed as well. ``answer_format`` (see
    :func:`reference_answer`) then reduces the ``answer`` column to the final answer."""
    skipped: dict[str, list[int]] = {}
    path, rows = dataset_rows(path, skipped if skip_bad_rows else None, dataset_config, split)
    if not rows:
        raise DataError(f"{path}: the dataset is empty")
    column_map = dict(column_map or {})
    _check_first_row(path, rows[0][1], prompt_column, column_map, answer_format, skip_bad_rows)
    own_columns, required = _column_plan(rows[0][1], prompt_column, column_map)
    prompts, token_ids, tasks, numbers = [], [], [], []
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
        fitted = _fitted(ids, max_prompt_tokens, truncate_long_prompts, skip_bad_rows, where)
        if fitted is None:
            skipped.setdefault(_long_reason(max_prompt_tokens), []).append(row_number)
            continue
        prompts.append(prompt)
        token_ids.append(fitted)
        tasks.append(task)
        numbers.append(row_number)
    if not prompts:
        raise DataError(f"{path}: no usable row ({sum(map(len, skipped.values()))} skipped)")
    column_names = own_columns + [name for name in column_map if name not in own_columns]
    return PromptDataset(
        source=str(path),
        prompts=prompts,
        prompt_token_ids=token_ids,
        columns={name: [task[name] for task in tasks] for name in column_names},
        skipped=skipped,
        row_numbers=numbers,
    )


def _column_plan(
    first_row: dict[str, Any], prompt_column: str, column_map: dict[str, str]
) -> tuple[list[str], dict[str, str]]:
    """The first row's task columns (all but the prompt), and every column a row needs
    (its own and the mapped sources) → how an error names it."""
    own_columns = [name for name in first_row if name != prompt_column]
    required = {name: name for name in own_columns} | {
        source: f"{source} (data.column_map.{name})" for name, source in column_map.items()
    }
    return own_columns, required


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


def _fitted(
    ids: list[int],
    max_prompt_tokens: int,
    truncate_long_prompts: bool,
    skip_bad_rows: bool,
    where: str,
) -> list[int] | None:
    """A prompt's token ids within ``max_prompt_tokens``: as they are, or a too-long
    prompt's last ``max_prompt_tokens`` with ``truncate_long_prompts``; otherwise None
    (skip it) with ``skip_bad_rows``, else the error naming its row."""
    if len(ids) <= max_prompt_tokens:
        return ids
    if truncate_long_prompts:
        return ids[-max_prompt_tokens:]
    if skip_bad_rows:
        return None
    raise DataError(
        f"{where}: prompt is {len(ids)} tokens, {_long_reason(max_prompt_tokens)} (set "
        "data.truncate_long_prompts = true to keep its end, or "
        "data.skip_bad_rows = true to skip it)"
    )


def load_dataset_for(
    path: str | Path,
    tokenizer: Any,
    data: DataConfig,
    *,
    agent: bool = False,
    split: str | None = None,
) -> PromptDataset:
    """The prompts at ``path`` (the training set or a held-out one), read, checked and
    formatted as the ``[data]`` section says.

    ``agent`` (an ``[agent]`` run): the prompts stay the text of the user's first message,
    since the agent renders the whole conversation itself (``grpo.agents.chat``); with
    ``data.chat_template`` the system prompt is its system message (see ``agent_settings``),
    not text put before the prompt. ``split``: in a Hub dataset (or a folder of splits);
    None = ``data.split``."""
    templated = data.chat_template and not agent
    return load_prompt_dataset(
        path,
        tokenizer,
        prompt_column=data.prompt_column,
        max_prompt_tokens=data.max_prompt_tokens,
        truncate_long_prompts=data.truncate_long_prompts,
        chat_template=templated,
        system_prompt="" if agent and data.chat_template else data.system_prompt,
        skip_bad_rows=data.skip_bad_rows,
        column_map=data.column_map,
        answer_format=data.answer_format,
        dataset_config=data.config,
        split=data.split if split is None else split,
    )
