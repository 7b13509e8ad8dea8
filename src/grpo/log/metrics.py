"""Where a run's numbers go: metrics.jsonl (always), TensorBoard (when installed), W&B and
trackio (optional extras, when a project is named), and the console line.

Every ``train.completions_every`` steps the step's completions (prompt, completion, each
reward, the total and the advantage; an agent run's conversation, and with
``train.log_token_ids`` the ids trained on: see :mod:`grpo.log.conversations`) go to
``completions.jsonl`` and, as a table, to the same backends. Under torchrun only rank 0
writes, so the table holds rank 0's rows.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from grpo.log.conversations import agent_fields, token_id_fields, transcript
from grpo.log.metric_table import metric
from grpo.rollout.engine import Rollout

CONSOLE_KEYS = (
    ("reward/mean", "reward"),
    ("accuracy", "acc"),
    ("zero_variance_frac", "zero_var"),
    ("kl", "kl"),
    ("clip_frac", "clip"),
    ("entropy", "ent"),
    ("completion_len/mean", "len"),
    ("grad_norm", "|g|"),
    ("eval/accuracy", "eval_acc"),
)
TRACKERS = ("wandb", "trackio")  # both take wandb's calls: init, log, Table, finish
METRICS_FILE, COMPLETIONS_FILE = "metrics.jsonl", "completions.jsonl"
# The files a run appends to, one JSON object a line, each with its "step" (a resume cuts
# them back to its checkpoint's step); TensorBoard's events are purged by the writer.
APPENDED_LOGS = (METRICS_FILE, COMPLETIONS_FILE)


def completion_rows(
    step: int,
    prompts: Sequence[str],
    completions: Sequence[str],
    per_function: dict[str, torch.Tensor],
    total_B: torch.Tensor,
    advantages_B: torch.Tensor,
    extras: Sequence[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One dict per completion: step, prompt, completion, reward (total), rewards (each
    function's value) and advantage, then the row's ``extras`` (a conversation, ids)."""
    values = {name: tensor.tolist() for name, tensor in per_function.items()}
    totals, advantages = total_B.tolist(), advantages_B.tolist()
    extras = extras if extras is not None else [{} for _ in prompts]
    return [
        {
            "step": step,
            "prompt": prompt,
            "completion": completion,
            "reward": totals[row],
            "rewards": {name: column[row] for name, column in values.items()},
            "advantage": advantages[row],
            **extra,
        }
        for row, (prompt, completion, extra) in enumerate(
            zip(prompts, completions, extras, strict=True)
        )
    ]


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The completions as a Markdown table (TensorBoard's text tab renders it)."""
    if not rows:
        return ""
    names = list(rows[0]["rewards"])
    header = ["prompt", "completion", "reward", *names, "advantage"]

    def cell(text: Any) -> str:
        text = f"{text:.4g}" if isinstance(text, float) else str(text)
        return text.replace("|", "\\|").replace("\n", "<br>")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        values = [row["prompt"], transcript(row), row["reward"]]
        values += [row["rewards"][name] for name in names] + [row["advantage"]]
        lines.append("| " + " | ".join(cell(v) for v in values) + " |")
    return "\n".join(lines)


def open_trackers(
    projects: dict[str, str], run_dir: Path, config: dict[str, Any], warn: Callable[[str], None]
) -> list[Any]:
    """Start a run in each tracker named in ``projects`` (name → project; "" = off).

    A tracker that is not installed is skipped with a warning: they are optional extras.
    """
    modules = []
    for name, project in projects.items():
        if not project:
            continue
        try:
            module = importlib.import_module(name)
        except ImportError:
            warn(
                f"train.{name}_project is set but {name} is not installed "
                f"(pip install 'grpo[{name}]'): not logging to {name}"
            )
            continue
        options = {"dir": str(run_dir)} if name == "wandb" else {}
        module.init(project=project, name=run_dir.name, config=config, **options)
        modules.append(module)
    return modules


class MetricsLog:
    """Appends one JSON object per step to RUN_DIR/metrics.jsonl and mirrors it to
    TensorBoard and the trackers; writes the completion tables."""

    def __init__(
        self,
        run_dir: Path,
        *,
        tensorboard: bool = True,
        enabled: bool = True,
        purge_step: int | None = None,
        completions_every: int = 0,
        token_ids: bool = False,
        trackers: dict[str, str] | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        """``purge_step``: TensorBoard hides the earlier events at this step and later ones
        (a resumed run logs again the steps after its checkpoint); ``token_ids``: the
        completion tables hold the ids trained on (``train.log_token_ids``)."""
        self.enabled = enabled
        self.path = run_dir / METRICS_FILE
        self.completions_path = run_dir / COMPLETIONS_FILE
        self.completions_every = completions_every
        self.token_ids = token_ids
        self._writer = None
        self._trackers: list[Any] = []
        if not enabled:
            return
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._writer = SummaryWriter(
                    log_dir=str(run_dir / "tensorboard"), purge_step=purge_step
                )
            except ImportError:  # tensorboard is an optional extra
                self._writer = None
        self._trackers = open_trackers(
            trackers or {}, run_dir, config or {}, lambda text: print(text, file=sys.stderr)
        )

    def write(self, step: int, metrics: dict[str, float]) -> None:
        """One step's metrics; every key must be in the metric table (a key that is not
        would fail the torchrun reduction, so a single-process run refuses it too)."""
        for key in metrics:
            metric(key)
        if not self.enabled:
            return
        with self.path.open("a") as handle:
            handle.write(json.dumps({"step": step, **metrics}) + "\n")
        if self._writer is not None:
            for key, value in metrics.items():
                self._writer.add_scalar(key, value, step)
            self._writer.flush()
        for tracker in self._trackers:
            tracker.log(dict(metrics), step=step)

    def completions(
        self,
        step: int,
        prompts: Sequence[str],
        completions: Sequence[str],
        scores: Any,
        advantages_B: torch.Tensor,
        *,
        columns: dict[str, list[Any]] | None = None,
        rollout: Rollout | None = None,
    ) -> None:
        """The step's completion table, every ``completions_every`` steps (``scores``: the
        step's :class:`~grpo.rewards.runner.RewardScores` for these rows; ``columns``: the
        producer's, an agent run's conversation among them; ``rollout``: these rows' ids)."""
        if not self.enabled or not self.completions_every or step % self.completions_every:
            return
        extras = agent_fields(columns or {}, len(prompts))
        if self.token_ids and rollout is not None:
            extras = [{**e, **ids} for e, ids in zip(extras, token_id_fields(rollout), strict=True)]
        rows = completion_rows(
            step,
            prompts,
            completions,
            scores.per_function,
            scores.total_B,
            advantages_B.cpu(),
            extras,
        )
        with self.completions_path.open("a") as handle:
            handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        if self._writer is not None:
            self._writer.add_text("completions", markdown_table(rows), step)
            self._writer.flush()
        for tracker in self._trackers:
            names = list(rows[0]["rewards"]) if rows else []
            columns = ["prompt", "completion", "reward", *names, "advantage"]
            data = [
                [r["prompt"], transcript(r), r["reward"]]
                + [r["rewards"][n] for n in names]
                + [r["advantage"]]
                for r in rows
            ]
            tracker.log({"completions": tracker.Table(columns=columns, data=data)}, step=step)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        for tracker in self._trackers:
            tracker.finish()


def console_line(step: int, total_steps: int, metrics: dict[str, float]) -> str:
    parts = [f"step {step}/{total_steps}"]
    for key, label in CONSOLE_KEYS:
        if key in metrics:
            parts.append(f"{label} {metrics[key]:.3g}")
    return "  ".join(parts)


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS_FILE
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_completions(run_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of RUN_DIR/completions.jsonl (none when the run wrote no tables)."""
    path = Path(run_dir) / COMPLETIONS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def text_curve(
    values: list[float],
    *,
    width: int = 60,
    height: int = 10,
    label: str = "",
    steps: list[int] | None = None,
) -> str:
    """A plain-text plot of a series (bucketed to ``width`` columns), for terminals and logs.

    ``steps`` are the values' step numbers (default 1, 2, …), for the axis label.
    """
    if not values:
        return "(no data)"
    buckets = max(1, min(width, len(values)))
    per = len(values) / buckets
    points = [
        sum(chunk) / len(chunk)
        for chunk in (
            values[int(i * per) : max(int((i + 1) * per), int(i * per) + 1)] for i in range(buckets)
        )
    ]
    low, high = min(points), max(points)
    span = (high - low) or 1.0
    rows = []
    for level in range(height - 1, -1, -1):
        threshold = low + span * level / (height - 1 if height > 1 else 1)
        axis = f"{threshold:8.3f} |"
        rows.append(axis + "".join("•" if p >= threshold else " " for p in points))
    rows.append(" " * 9 + "+" + "-" * len(points))
    first, last = (steps[0], steps[-1]) if steps else (1, len(values))
    rows.append(" " * 10 + f"steps {first}..{last}" + (f"  ({label})" if label else ""))
    return "\n".join(rows)
