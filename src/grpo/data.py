"""Prompt datasets: loading, validation, prompt formatting and tokenization, and the sampler.

Every row is checked and every prompt tokenized once at start-up, so a bad row stops the
run before the first step, with the file and row named, instead of hours into it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from grpo.config import CurriculumConfig
from grpo.curriculum import PromptStats, draw_prompts


class DataError(ValueError):
    """A bad dataset row or file; the message names the file and row."""


@dataclass
class PromptDataset:
    """Rows of a prompt dataset with their prompts already tokenized.

    ``columns[name][i]`` is row i's value of a task column (passed to reward functions).
    """

    source: str
    prompts: list[str]  # the formatted prompt text (after any chat template)
    prompt_token_ids: list[list[int]]
    columns: dict[str, list[Any]]

    def __len__(self) -> int:
        return len(self.prompts)


# Suffix → the `datasets` builder that reads it (and its options).
_DATASETS_BUILDERS: dict[str, tuple[str, dict[str, Any]]] = {
    ".csv": ("csv", {}),
    ".tsv": ("csv", {"delimiter": "\t"}),
    ".parquet": ("parquet", {}),
    ".arrow": ("arrow", {}),
}
ANSWER_FORMATS = ("plain", "gsm8k", "math")


def _read_json_lines(path: Path) -> list[dict[str, Any]]:
    text = path.read_text()
    if path.suffix == ".json" and text.lstrip().startswith("["):  # one JSON array of rows
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as error:
            raise DataError(f"{path}: invalid JSON ({error})") from None
        for number, row in enumerate(rows, start=1):
            if not isinstance(row, dict):
                raise DataError(f"{path}: row {number}: expected a JSON object")
        return rows
    rows = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataError(f"{path}: row {line_number}: invalid JSON ({error})") from None
        if not isinstance(row, dict):
            raise DataError(f"{path}: row {line_number}: expected a JSON object")
        rows.append(row)
    return rows


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a dataset file, as dicts.

    JSONL (or a ``.json`` array) is read here; CSV, TSV, Parquet, Arrow and folders written
    by ``datasets.Dataset.save_to_disk`` through the ``datasets`` extra.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(f"dataset not found: {path}")
    if path.suffix in {".jsonl", ".json"}:
        return _read_json_lines(path)
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
        return list(loaded)
    builder, options = _DATASETS_BUILDERS[path.suffix]
    return list(datasets.load_dataset(builder, data_files=str(path), split="train", **options))


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


def load_prompt_dataset(
    path: str | Path,
    tokenizer: Any,
    *,
    prompt_column: str = "prompt",
    max_prompt_tokens: int = 512,
    truncate_long_prompts: bool = False,
    chat_template: bool = False,
    system_prompt: str = "",
    column_map: dict[str, str] | None = None,
    answer_format: str = "plain",
) -> PromptDataset:
    """Read, check, format and tokenize every row of a prompt dataset.

    ``column_map`` maps the names reward functions see to the dataset's columns (e.g.
    ``{"answer": "solution"}``); the dataset's own columns are passed as well.
    ``answer_format`` (see :func:`reference_answer`) then reduces the ``answer`` column to
    the final answer.
    """
    rows = read_rows(path)
    if not rows:
        raise DataError(f"{path}: the dataset is empty")
    column_map = dict(column_map or {})
    if prompt_column not in rows[0]:
        raise DataError(
            f"{path}: no column {prompt_column!r} (data.prompt_column); "
            f"its columns are {sorted(rows[0])}"
        )
    if answer_format != "plain" and "answer" not in column_map and "answer" not in rows[0]:
        raise DataError(
            f"{path}: data.answer_format = {answer_format!r} reads the 'answer' column, which "
            f'it lacks: map one with data.column_map = {{ answer = "..." }}'
        )
    prompts, token_ids = [], []
    own_columns = [name for name in rows[0] if name != prompt_column]
    column_names = own_columns + [name for name in column_map if name not in own_columns]
    columns: dict[str, list[Any]] = {name: [] for name in column_names}
    for index, row in enumerate(rows):
        where = f"{path}: row {index + 1}"
        text = row.get(prompt_column)
        if not isinstance(text, str) or not text:
            raise DataError(f"{where}: column {prompt_column!r} must be a non-empty string")
        missing = [name for name in own_columns if name not in row]
        missing += [
            f"{source} (data.column_map.{name})"
            for name, source in column_map.items()
            if source not in row
        ]
        if missing:
            raise DataError(f"{where}: missing column(s) {missing}")
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
        prompt = format_prompt(
            text, tokenizer, chat_template=chat_template, system_prompt=system_prompt
        )
        # A chat template already carries any special tokens it wants.
        ids = tokenizer(prompt, add_special_tokens=not chat_template)["input_ids"]
        if len(ids) > max_prompt_tokens:
            if not truncate_long_prompts:
                raise DataError(
                    f"{where}: prompt is {len(ids)} tokens, over data.max_prompt_tokens = "
                    f"{max_prompt_tokens} (set data.truncate_long_prompts = true to keep its end)"
                )
            ids = ids[-max_prompt_tokens:]
        prompts.append(prompt)
        token_ids.append(ids)
        for name in column_names:
            columns[name].append(task[name])
    return PromptDataset(
        source=str(path), prompts=prompts, prompt_token_ids=token_ids, columns=columns
    )


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
        column_map=data.column_map,
        answer_format=data.answer_format,
    )


@dataclass
class PromptSampler:
    """Epoch-wise shuffled indices with a resumable cursor (epoch, position), or, with a
    curriculum, draws weighted by each prompt's E[p(1 − p)] (see ``grpo.curriculum``).

    Per-prompt statistics (``stats``, filled by the trainer) are kept in every mode; all
    state, statistics included, is in :meth:`state_dict` and so in checkpoints.
    """

    size: int
    seed: int
    shuffle: bool = True
    epoch: int = 0
    position: int = 0
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    draws: int = 0  # curriculum draws so far: each seeds its own generator (resumable)
    stats: PromptStats = field(init=False)
    _order: list[int] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self.stats = PromptStats.empty(self.size)

    def next_indices(self, count: int) -> list[int]:
        if self.curriculum.enabled:
            self.draws += 1
            return draw_prompts(
                self.stats,
                count,
                strength=self.curriculum.strength,
                prior_successes=self.curriculum.prior_successes,
                prior_failures=self.curriculum.prior_failures,
                generator=torch.Generator().manual_seed(self.seed * 1_000_003 + self.draws),
            )
        picked = []
        while len(picked) < count:
            if not self._order:
                self._order = self._epoch_order()
            if self.position >= self.size:
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._epoch_order()
            take = min(count - len(picked), self.size - self.position)
            picked.extend(self._order[self.position : self.position + take])
            self.position += take
        return picked

    def _epoch_order(self) -> list[int]:
        if not self.shuffle:
            return list(range(self.size))
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return torch.randperm(self.size, generator=generator).tolist()

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "position": self.position,
            "draws": self.draws,
            "stats": self.stats.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.position = state["epoch"], state["position"]
        self.draws = state.get("draws", 0)  # checkpoints from before the curriculum lack these
        if "stats" in state:
            self.stats.load_state_dict(state["stats"])
        self._order = self._epoch_order()
