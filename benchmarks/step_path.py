"""The path a reader follows through one training step: which source files run, how many
calls deep the decode and the loss sit, and which containers the step's data passes through.

    python benchmarks/step_path.py

Trains a tiny random Llama for one synchronous, single-process step with the defaults (β =
0.04, μ = 1, one reward, the built-in engine) and records every call into ``src/grpo`` made
while :func:`grpo.training.loop._step` runs (``sys.setprofile``). It prints:

- the files whose functions ran, in first-call order, split into the step's own code and the
  engine and model internals below ``generate_rows`` and ``completion_logprobs`` (sampling
  and log-prob kernels: library code of ours, not the step's structure);
- the calls from ``_step`` (``_step`` calling f directly is 1) to the decode loop
  (``TransformersEngine._decode``) and of the loss aggregation (``aggregate``), counting only
  ``src/grpo`` frames;
- the classes whose instances were built during the step (the containers the data changes
  into), by module.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from types import FrameType
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src" / "grpo"
sys.path.insert(0, str(SRC.parent))
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Below these, a call is the engine's or the model's own work (sampling, prefill, the
# per-token log-probs): counted apart from the step's structure.
INTERNALS = ("generate_rows", "completion_logprobs", "_reference_logprobs")


def _grpo_depth(frame: FrameType | None, step_frame: FrameType) -> int | None:
    """Frames of src/grpo between ``frame`` and ``_step`` (``_step`` itself is 0)."""
    depth = 0
    while frame is not None:
        if frame is step_frame:
            return depth
        if frame.f_code.co_filename.startswith(str(SRC)):
            depth += 1
        frame = frame.f_back
    return None


def _under_internals(frame: FrameType | None, step_frame: FrameType) -> bool:
    frame = frame.f_back if frame is not None else None
    while frame is not None and frame is not step_frame:
        if frame.f_code.co_name in INTERNALS and frame.f_code.co_filename.startswith(str(SRC)):
            return True
        frame = frame.f_back
    return False


def _digit_fraction(prompts: list[str], completions: list[str], **_: object) -> list[float]:
    return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]


def main() -> None:
    import torch

    torch.set_num_threads(1)
    import grpo.training.loop as loop
    from grpo.config import load_config
    from grpo.demo.model import build_tiny_llama
    from grpo.demo.task import make_splits, write_jsonl
    from grpo.demo.tokenizer import build_char_tokenizer
    from grpo.rewards.runner import RewardFunction

    work = Path(tempfile.mkdtemp(prefix="grpo-step-path-"))
    tokenizer = build_char_tokenizer(work / "model")
    build_tiny_llama(tokenizer, hidden_size=32, layers=2, heads=2, directory=work / "model")
    rows, _ = make_splits(64, 0, seed=1)
    data = write_jsonl(rows, work / "train.jsonl")
    config = load_config(
        None,
        [
            f"--model.path={work / 'model'}",
            f"--data.train_path={data}",
            '--rewards=[{ function = "grpo.rewards:numeric_answer" }]',  # replaced below
            "--rollout.group_size=4",
            "--rollout.max_new_tokens=6",
            "--train.steps=1",
            "--train.prompts_per_step=2",
            f"--train.run_dir={work / 'run'}",
            "--train.progress=false",
        ],
    )

    files: dict[str, str] = {}  # file → "step" or "internal", in first-call order
    depths: dict[str, int] = {}
    built: dict[str, set[str]] = defaultdict(set)
    original_step = loop._step

    def traced_step(*args: Any, **kwargs: Any) -> Any:
        step_frame = sys._getframe()  # its callee, _step, is depth 1: reported as 0

        def profile(frame: FrameType, event: str, _: Any) -> None:
            if event != "call":
                return
            code = frame.f_code
            if code.co_name == "__init__" and "self" in frame.f_locals:
                cls = type(frame.f_locals["self"])  # dataclasses' __init__ is generated code
                if cls.__module__.startswith("grpo"):
                    built[cls.__module__].add(cls.__name__)
            if not code.co_filename.startswith(str(SRC)):
                return
            name = str(Path(code.co_filename).relative_to(SRC))
            kind = "internal" if _under_internals(frame, step_frame) else "step"
            if files.get(name) != "step":
                files[name] = kind
            depth = _grpo_depth(frame, step_frame)
            if depth is not None:
                key = code.co_qualname
                depths[key] = min(depths.get(key, depth), depth)

        sys.setprofile(profile)
        try:
            return original_step(*args, **kwargs)
        finally:
            sys.setprofile(None)

    loop._step = traced_step
    # A reward that differs between random completions, so that groups train.
    reward = RewardFunction(name="digit_fraction", fn=_digit_fraction)
    loop.train(config, reward_functions=[reward], verbose=False)

    step_files = [f for f, kind in files.items() if kind == "step"]
    internal_files = [f for f, kind in files.items() if kind == "internal"]
    print(f"source files run during one step: {len(files)}")
    print(f"  the step's own ({len(step_files)}): " + ", ".join(step_files))
    print(
        f"  engine and model internals below {', '.join(INTERNALS)} "
        f"({len(internal_files)}): " + ", ".join(internal_files)
    )
    targets = (
        "TransformersEngine._decode",
        "aggregate",
        "policy_loss",
        "PromptSampler.next_indices",
    )
    for target in targets:
        depth = depths.get(target)
        print(f"calls from _step to {target}: {None if depth is None else depth - 1}")
    print("classes built during the step:")
    for module, names in sorted(built.items()):
        print(f"  {module}: {', '.join(sorted(names))}")


if __name__ == "__main__":
    main()
