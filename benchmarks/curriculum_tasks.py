"""The two embedded task families of ``benchmarks/curriculum.py``: files, base models, config.

- ``arithmetic``: the demo's integer problems with a ``kind`` column (one-digit addition
  and multiplication: mostly solved; two-digit addition and subtraction: often not).
- ``edits``: multi-step string edits (:mod:`grpo.demo.edits`) with a ``level`` column
  (1, 2 or 3 edits): the difficulty is composition depth.

Each task gets a warm-started tiny Llama (supervised until a greedy accuracy on a dev split
that leaves room to learn), built once per work directory and reused by every run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Task:
    name: str
    column: str  # the difficulty column the pooled curriculum keys on
    reward: str  # "module:function"
    max_new_tokens: int
    warm_target: float  # stop the warm start at this dev greedy accuracy


TASKS = {
    "arithmetic": Task("arithmetic", "kind", "grpo.rewards:numeric_answer", 6, 0.30),
    "edits": Task("edits", "level", "grpo.demo.edits:exact_edit", 8, 0.30),
}

CONFIG = """
[model]
path = "{base}"

[data]
train_path = "{train}"

[rollout]
group_size = 8
max_new_tokens = {max_new_tokens}
temperature = 1.0

[algorithm]
advantage_scale = "group"
aggregation = "sequence"
beta = 0.0

[[rewards]]
function = "{reward}"
accuracy = true

[optim]
lr = 1e-4

[eval]
path = "{eval}"

[train]
sequences_per_micro_batch = 256
run_dir = "{run_dir}"
"""


def task_rows(
    task: Task, train_prompts: int, held_out: int
) -> tuple[list[dict], list[dict], list[dict]]:
    """(warm-start rows, RL training rows, held-out rows), each with the task's difficulty
    column. The first 200 held-out rows are the warm start's dev split, the rest the
    evaluation set. Arithmetic's RL set keeps every one-digit problem (the easy kinds, few
    and mostly solved) and fills up with two-digit ones, as the first benchmark did."""
    if task.name == "edits":
        from grpo.demo.edits import make_edit_splits

        warm, test = make_edit_splits(4000, held_out + 200, seed=0)
        return warm, warm[:train_prompts], test
    from grpo.demo.run import problem_kind
    from grpo.demo.task import make_splits

    warm, test = make_splits(4000, held_out + 200, seed=0)
    warm = [{**row, "kind": problem_kind(row["prompt"])} for row in warm]
    test = [{**row, "kind": problem_kind(row["prompt"])} for row in test]
    easy = [row for row in warm if row["kind"].endswith("1-digit")]
    hard = [row for row in warm if not row["kind"].endswith("1-digit")]
    return warm, easy + hard[: max(0, train_prompts - len(easy))], test


def warm_start(task: Task, base_dir: Path, rows: list[dict], dev: list[dict], say) -> None:
    """Supervised steps in chunks of 50 until the dev greedy accuracy reaches the target."""
    from grpo.config.sections import RewardConfig
    from grpo.data.dataset import PromptDataset
    from grpo.demo.model import build_tiny_llama
    from grpo.demo.tokenizer import build_char_tokenizer
    from grpo.demo.warm_start import supervised_warm_start
    from grpo.eval.evaluate import greedy_accuracy
    from grpo.rewards.resolve import resolve_reward_functions

    tokenizer = build_char_tokenizer()
    reward = resolve_reward_functions([RewardConfig(function=task.reward, accuracy=True)])[0]
    probe = PromptDataset(
        source=f"{task.name} dev",
        prompts=[row["prompt"] for row in dev],
        prompt_token_ids=[tokenizer(row["prompt"])["input_ids"] for row in dev],
        columns={"answer": [row["answer"] for row in dev]},
    )
    model = build_tiny_llama(tokenizer, hidden_size=128, layers=4, heads=4, seed=0)
    steps, accuracy = 0, 0.0
    while steps < 4000 and accuracy < task.warm_target:
        supervised_warm_start(model, tokenizer, rows, steps=50, lr=1e-3, seed=steps)
        steps += 50
        accuracy = greedy_accuracy(
            model, tokenizer, probe, reward, max_new_tokens=task.max_new_tokens
        )
    model.save_pretrained(str(base_dir), safe_serialization=True)
    tokenizer.save_pretrained(str(base_dir))
    say(f"{task.name}: warm start {steps} supervised steps → {accuracy:.1%} greedy on dev")


def build_task(task: Task, work_dir: Path, train_size: int, held_out: int, say) -> dict[str, Path]:
    """Base model (built once), training and held-out files; returns their paths."""
    from grpo.demo.task import write_jsonl

    task_dir = work_dir / task.name
    task_dir.mkdir(parents=True, exist_ok=True)
    warm, train, test = task_rows(task, train_size, held_out)
    base_dir = task_dir / "base"
    if not (base_dir / "config.json").exists():
        warm_start(task, base_dir, warm, test[:200], say)
    return {
        "base": base_dir,
        "train": write_jsonl(train, task_dir / "train.jsonl"),
        "eval": write_jsonl(test[200 : 200 + held_out], task_dir / "eval.jsonl"),
    }


def write_config(task: Task, paths: dict[str, Path], run_dir: Path) -> Path:
    path = run_dir.parent / f"{run_dir.name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        CONFIG.format(
            base=paths["base"],
            train=paths["train"],
            eval=paths["eval"],
            run_dir=run_dir,
            reward=task.reward,
            max_new_tokens=task.max_new_tokens,
        )
    )
    return path
