"""The console during training: a progress bar, or plain lines for log files and CI.

* ``bar`` (default): a tqdm bar with the step, elapsed time, ETA and seconds per step,
  the step's reward, accuracy and KL after it, and a full metrics line every
  ``train.log_every`` steps above it.
* ``quiet`` (``train.quiet`` / ``grpo train --quiet``, and whenever stdout or stderr is not
  a terminal, e.g. redirected to a log file): no bar and no carriage returns; one plain line
  every ``train.log_every`` steps with the same numbers and the ETA.
* ``off`` (``train.progress = false``, or a process other than rank 0): nothing.
"""

from __future__ import annotations

import sys
import time
from typing import Literal, TextIO

from grpo.log.metrics import console_line

ProgressMode = Literal["bar", "quiet", "off"]

# metric key → its short label in the bar
BAR_KEYS = (("reward/mean", "reward"), ("accuracy", "acc"), ("kl", "kl"))


def format_duration(seconds: float) -> str:
    """``3725`` → ``"1:02:05"``, ``65`` → ``"01:05"`` (tqdm's own format)."""
    from tqdm import tqdm

    return tqdm.format_interval(max(0.0, seconds))


def bar_postfix(metrics: dict[str, float]) -> str:
    """The numbers after the bar: reward, accuracy, KL and seconds per step."""
    parts = [f"{label} {metrics[key]:.3g}" for key, label in BAR_KEYS if key in metrics]
    if "time/step" in metrics:
        parts.append(f"{metrics['time/step']:.2f} s/step")
    return "  ".join(parts)


class StepProgress:
    """Shows training progress; ``update`` once per finished step, ``close`` at the end."""

    def __init__(
        self,
        mode: ProgressMode,
        *,
        total_steps: int,
        start_step: int = 0,
        log_every: int = 1,
        stream: TextIO | None = None,
    ) -> None:
        self.mode = mode
        self.total_steps = total_steps
        self.start_step = start_step
        self.log_every = log_every
        self.stream = stream
        self.started = time.perf_counter()
        self._bar = None
        if mode == "bar":
            from tqdm.auto import tqdm

            self._bar = tqdm(
                total=total_steps,
                initial=start_step,
                desc="grpo",
                unit="step",
                dynamic_ncols=True,
                file=stream,
            )

    def eta_seconds(self, step: int) -> float:
        """Mean seconds per step so far in this run × steps left."""
        done = step - self.start_step
        if done <= 0:
            return 0.0
        return (time.perf_counter() - self.started) / done * (self.total_steps - step)

    def update(self, step: int, metrics: dict[str, float]) -> None:
        due = step % self.log_every == 0 or step == self.total_steps
        if self._bar is not None:
            self._bar.set_postfix_str(bar_postfix(metrics), refresh=False)
            self._bar.update(1)
            if due:
                self._bar.write(console_line(step, self.total_steps, metrics), file=self.stream)
        elif self.mode == "quiet" and due:
            line = console_line(step, self.total_steps, metrics)
            if "time/step" in metrics:
                line += f"  {metrics['time/step']:.2f} s/step"
            line += f"  eta {format_duration(self.eta_seconds(step))}"
            print(line, file=self.stream or sys.stdout, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def on_terminal() -> bool:
    """Whether a bar can redraw in place: stdout and stderr both terminals, or a notebook
    (its bar is a widget). Redirected, a bar's carriage-return updates pile up into one
    line of many kilobytes in the log, so plain lines are printed instead."""
    if "ipykernel" in sys.modules:
        return True
    return all(stream is not None and stream.isatty() for stream in (sys.stdout, sys.stderr))


def step_progress(
    *,
    total_steps: int,
    start_step: int,
    log_every: int,
    enabled: bool,
    quiet: bool,
    terminal: bool | None = None,
) -> StepProgress:
    """The run's progress display: ``enabled`` is false with ``train.progress = false``,
    off rank 0 or when not verbose; ``quiet`` (``train.quiet``) or ``terminal`` (default:
    :func:`on_terminal`) false turns the bar into plain lines."""
    mode: ProgressMode = "bar" if enabled else "off"
    if terminal is None:
        terminal = on_terminal()
    if mode == "bar" and (quiet or not terminal):
        mode = "quiet"
    return StepProgress(mode, total_steps=total_steps, start_step=start_step, log_every=log_every)
