"""Resume with rounds in flight: the checkpoint records the prompts requested and not yet
trained on, and the resumed run requests them again first, in order. Every step trains the
prompts of the uninterrupted run: none lost, none twice."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

from grpo.runtime.checkpoint import latest_checkpoint, read_extra
from grpo.training.loop import train

SETTINGS = (  # over tiny_config's
    "rollout.group_size=2",
    "rollout.max_new_tokens=4",
    "rollout.mode='async'",
    "rollout.max_staleness=2",
    "optim.lr=1e-6",
    "train.steps=6",
    "train.prompts_per_step=3",
    "train.completions_every=1",
    "train.save_every=100",
)


def _prompts_by_step(run_dir: Path) -> dict[int, list[str]]:
    by_step: dict[int, list[str]] = {}
    for line in (run_dir / "completions.jsonl").read_text().splitlines():
        row = json.loads(line)
        by_step.setdefault(row["step"], []).append(row["prompt"])
    return by_step


def _stop_after_step(run_dir: Path, step: int) -> threading.Thread:
    """SIGTERM this process once ``step`` is logged: the loop finishes the step it is on,
    checkpoints it and returns (train.save_every is too large to checkpoint otherwise)."""

    def watch() -> None:
        metrics = run_dir / "metrics.jsonl"
        while not metrics.exists() or len(metrics.read_text().splitlines()) < step:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_resume_requests_the_rounds_in_flight_again(tiny_config, tmp_path, capsys) -> None:
    straight = tmp_path / "straight"
    train(tiny_config(*SETTINGS, run_dir=straight), verbose=False)
    stopped = tmp_path / "stopped"
    _stop_after_step(stopped, 1)
    first = train(tiny_config(*SETTINGS, run_dir=stopped), verbose=False)
    assert first.stopped_by == "SIGTERM"
    checkpoint = latest_checkpoint(stopped)
    pending = read_extra(checkpoint)["async"]["pending"]
    stopped_at = int(checkpoint.name.removeprefix("step-"))
    # requested up to max_staleness + 1 steps ahead of the last trained one (not past 6)
    assert len(pending) == min(3, 6 - stopped_at) > 0
    train(tiny_config(*SETTINGS, "train.resume=true", run_dir=stopped), verbose=True)
    assert f"requesting again the {len(pending)} rounds in flight" in capsys.readouterr().out
    want, got = _prompts_by_step(straight), _prompts_by_step(stopped)
    assert sorted(got) == list(range(1, 7))
    assert got == want  # the same prompts at the same steps
    assert Counter(p for ps in got.values() for p in ps) == Counter(
        p for ps in want.values() for p in ps
    )
