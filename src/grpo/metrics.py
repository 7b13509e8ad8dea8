"""Step metrics: JSONL (the record), TensorBoard (when installed), and the console."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


class MetricsLog:
    """Appends one JSON object per step to RUN_DIR/metrics.jsonl; mirrors to TensorBoard."""

    def __init__(
        self,
        run_dir: Path,
        *,
        tensorboard: bool = True,
        enabled: bool = True,
        purge_step: int | None = None,
    ) -> None:
        """``purge_step``: TensorBoard hides the earlier events at this step and later ones
        (a resumed run logs again the steps after its checkpoint)."""
        self.enabled = enabled
        self.path = run_dir / "metrics.jsonl"
        self._writer = None
        if enabled and tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._writer = SummaryWriter(
                    log_dir=str(run_dir / "tensorboard"), purge_step=purge_step
                )
            except ImportError:  # tensorboard is an optional extra
                self._writer = None

    def write(self, step: int, metrics: dict[str, float]) -> None:
        if not self.enabled:
            return
        with self.path.open("a") as handle:
            handle.write(json.dumps({"step": step, **metrics}) + "\n")
        if self._writer is not None:
            for key, value in metrics.items():
                self._writer.add_scalar(key, value, step)
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def console_line(step: int, total_steps: int, metrics: dict[str, float]) -> str:
    parts = [f"step {step}/{total_steps}"]
    for key, label in CONSOLE_KEYS:
        if key in metrics:
            parts.append(f"{label} {metrics[key]:.3g}")
    return "  ".join(parts)


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
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
