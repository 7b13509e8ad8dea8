"""Where the time goes: ``torch.profiler`` on one benchmark rollout and on demo steps.

    python benchmarks/profile_step.py rollout [--threads 2] [--compile]
    python benchmarks/profile_step.py demo --config runs/demo/grpo.toml [--steps 20]

``rollout``: trl_compare's model (58M Llama, vocabulary 32000, random weights), 8 prompts of
32 tokens × G = 8, 64 new tokens without early EOS; one warm-up rollout, then one profiled.
``demo``: GRPO steps of the demo's configuration (after ``grpo demo``, whose warm-started
model it trains), the first few left out as warm-up.

Each part of the code is marked with ``record_function`` by wrapping its function, and every
aten op's own time goes to the innermost mark around it; a mark's own time (wall time inside
it that no op accounts for) is Python and dispatch overhead. The profiler adds a few µs per
op, so the profiled wall time is printed beside the unprofiled one.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).parent))
MARK = "§"
MATMULS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear"}
STOP_OPS = {"aten::isin", "aten::any", "aten::all", "aten::item", "aten::_local_scalar_dense"}
STOP_OPS |= {"aten::bitwise_or", "aten::bitwise_not", "aten::bitwise_and", "aten::eq"}
STOP_OPS |= {"aten::nonzero", "aten::logical_not", "aten::is_nonzero", "aten::max", "aten::sum"}


@contextlib.contextmanager
def marked(targets: list[tuple[Any, str, str]]) -> Iterator[None]:
    """Wrap ``getattr(owner, name)`` in ``record_function(§label)`` for each target."""

    def get(owner: Any, name: str) -> Any:
        return owner[name] if isinstance(owner, dict) else getattr(owner, name)

    def put(owner: Any, name: str, value: Any) -> None:
        if isinstance(owner, dict):
            owner[name] = value
        else:
            setattr(owner, name, value)

    originals = [(owner, name, get(owner, name)) for owner, name, _ in targets]
    for (owner, name, original), (_, _, label) in zip(originals, targets, strict=True):
        put(owner, name, _wrap(original, label))
    try:
        yield
    finally:
        for owner, name, original in originals:
            put(owner, name, original)


def _wrap(fn: Callable, label: str) -> Callable:
    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with record_function(MARK + label):
            return fn(*args, **kwargs)

    return wrapped


def attribute(events: Any, classify: Callable[[list[str], str], str]) -> dict[str, float]:
    """Seconds per category: each op's own time by ``classify(marks, op)`` (marks: the
    enclosing marks, innermost last); each mark's own time as "Python: <mark>"."""
    seconds: dict[str, float] = defaultdict(float)
    for event in events:
        if event.device_type != torch.autograd.DeviceType.CPU:
            continue
        marks, parent = [], event.cpu_parent
        while parent is not None:
            if parent.name.startswith(MARK):
                marks.append(parent.name[1:])
            parent = parent.cpu_parent
        marks.reverse()
        own = event.self_cpu_time_total / 1e6
        if event.name.startswith(MARK):
            seconds[f"Python and dispatch: {event.name[1:]}"] += own
        elif marks:
            seconds[classify(marks, event.name)] += own
        else:
            seconds["outside every mark"] += own
    return dict(seconds)


def allocations_by_mark(events: Any) -> dict[str, int]:
    """How many ops allocated memory inside each innermost mark (the decode loop's own
    bookkeeping is "rollout"; a compiled step's allocations are in "rollout" too)."""
    counts: dict[str, int] = defaultdict(int)
    for event in events:
        if event.name.startswith(MARK) or event.self_cpu_memory_usage <= 0:
            continue
        parent = event.cpu_parent
        while parent is not None and not parent.name.startswith(MARK):
            parent = parent.cpu_parent
        counts[parent.name[1:] if parent is not None else "outside every mark"] += 1
    return dict(counts)


def classify_rollout(marks: list[str], op: str) -> str:
    for category in ("prefill", "sampling", "attention", "KV cache update"):
        if category in marks:
            return category
    if marks[-1] == "rollout":  # the compiled step: its graph runs inside no finer mark
        if op in MATMULS:
            return "matmuls"
        if "scaled_dot_product" in op:
            return "attention"
        if op.startswith("## Call CompiledFxGraph"):
            return "compiled graph's fused kernels (norms, rotary, sampling, …)"
        if op.startswith(("TorchDynamo", "Torch-Compiled")):
            return "compiled step: guards and dispatch"
    if "model" in marks:
        return "matmuls" if op in MATMULS else "norms, activations, rotary, embedding"
    if op in STOP_OPS:
        return "stop checks and host syncs"
    return "output writes, masks, row drops"


def rollout_marks() -> list[tuple[Any, str, str]]:
    import transformers.cache_utils as cache_utils
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    import grpo.rollout.hf_engine as hf_engine
    import grpo.rollout.hf_prefill as hf_prefill
    from grpo.rollout.hf_engine import TransformersEngine

    marks = [
        (TransformersEngine, "generate_rows", "rollout"),
        (hf_engine, "prefill_prompts", "prefill"),
        (hf_engine, "next_token", "sampling"),
        (cache_utils.DynamicCache, "update", "KV cache update"),
        (hf_prefill, "preallocate_cache", "prefill"),
    ]
    if "sdpa" in ALL_ATTENTION_FUNCTIONS:
        marks.append((ALL_ATTENTION_FUNCTIONS._global_mapping, "sdpa", "attention"))
    return marks


def table(seconds: dict[str, float], wall: float, per: int = 1, title: str = "") -> str:
    """A markdown table: category, seconds (per ``per`` repeats), share of ``wall``."""
    lines = [f"| {title or 'where'} | seconds | share |", "|---|---:|---:|"]
    accounted = sum(seconds.values())
    for name, value in sorted(seconds.items(), key=lambda item: -item[1]):
        lines.append(f"| {name} | {value / per:.4f} | {value / wall:.1%} |")
    lines.append(
        f"| not in any op or mark (profiler, gaps) | {(wall - accounted) / per:.4f} | "
        f"{(wall - accounted) / wall:.1%} |"
    )
    lines.append(f"| **profiled wall time** | **{wall / per:.4f}** | 100% |")
    return "\n".join(lines)


def profile_rollout(threads: int, new_tokens: int, compile_mode: str) -> None:
    import transformers
    from transformers import AutoModelForCausalLM
    from transformers.models.llama import modeling_llama
    from trl_compare import build_model_dir

    from grpo.rollout.engine import SamplingParams
    from grpo.rollout.hf_engine import TransformersEngine

    transformers.utils.logging.set_verbosity_error()
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as directory:
        build_model_dir(Path(directory), vocab=32000, max_positions=1024)
        model = AutoModelForCausalLM.from_pretrained(directory).eval()
    prompts = torch.randint(3, 32000, (8, 32), generator=torch.Generator().manual_seed(0))
    compiled = {} if compile_mode == "false" else {"compile": compile_mode == "true"}
    engine = TransformersEngine(model, pad_token_id=0, eos_token_ids=set(), **compiled)
    params = SamplingParams(temperature=1.0, max_new_tokens=new_tokens)

    def rollout() -> float:
        started = time.perf_counter()
        engine.generate(prompts.tolist(), 8, params, torch.Generator().manual_seed(1))
        return time.perf_counter() - started

    first = rollout()  # warm-up (and the compilation, when on)
    plain = min(rollout() for _ in range(2))
    marks = [
        *rollout_marks(),
        (type(model), "forward", "model"),
        (modeling_llama, "create_causal_mask", "attention mask"),
    ]
    if compile_mode == "true":  # marks inside the compiled step would make it compile again
        marks = [mark for mark in marks if mark[2] in ("rollout", "prefill")]
    with marked(marks), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        wall = rollout()
    events = prof.events()
    seconds = attribute(events, classify_rollout)
    print(
        f"rollout: 64 rows × {new_tokens} tokens, {threads} threads, compile={compile_mode}; "
        f"first (warm-up) {first:.2f} s, unprofiled {plain:.3f} s, profiled {wall:.3f} s"
    )
    print(table(seconds, wall, title="rollout"))
    allocations = allocations_by_mark(events)
    print(
        "ops that allocate, per decoded token, by the innermost mark around them: "
        + ", ".join(f"{mark} {n / new_tokens:.1f}" for mark, n in sorted(allocations.items()))
    )


def classify_step(marks: list[str], op: str) -> str:
    inner = marks[-1]
    if inner == "model" and len(marks) >= 2:
        inner = marks[-2]
    if inner == "rollout" or "rollout" in marks:
        return "rollout: matmuls" if op in MATMULS else "rollout: other ops"
    return f"{inner}: matmuls" if op in MATMULS else f"{inner}: other ops"


def step_marks() -> list[tuple[Any, str, str]]:
    import grpo.rounds.source as source_module
    import grpo.training.loop as loop
    import grpo.training.update.policy as policy_module
    from grpo.log.metrics import MetricsLog
    from grpo.rollout.hf_engine import TransformersEngine
    from grpo.rounds.source import SingleTurn

    return [
        (loop, "_step", "step"),
        (TransformersEngine, "generate_rows", "rollout"),
        (SingleTurn, "produce", "rollout and decode to text"),
        (source_module, "score_completions", "rewards"),
        (source_module, "text_features", "text features"),
        (source_module, "gather_rows", "gather, groups"),
        (loop, "select_groups", "advantages, selection"),
        (loop, "record_step", "curriculum statistics"),
        (loop, "learn", "update"),
        (policy_module, "_reference_pass", "reference pass"),
        (policy_module, "_micro_step", "policy forward and backward"),
        (torch.optim.AdamW, "step", "optimizer"),
        (loop, "step_metrics", "metrics"),
        (loop, "accuracy", "metrics"),
        (loop, "reasoning_metrics", "metrics"),
        (MetricsLog, "write", "logging"),
        (MetricsLog, "completions", "logging"),
    ]


def trl_overrides(directory: Path, prompt_tokens: int) -> list[str]:
    """trl_compare's grpo settings on its model and prompts, built in ``directory``."""
    from trl_compare import build_model_dir, write_prompts

    import grpo.rounds.engines as engines_module

    build_model_dir(directory, vocab=32000, max_positions=1024)
    write_prompts(directory / "prompts.jsonl", 32000, prompt_tokens)
    engines_module.eos_token_ids = lambda *_: set()  # no early EOS, as in trl_compare
    return [
        f"model.path={directory}",
        f"data.train_path={directory / 'prompts.jsonl'}",
        "rollout.group_size=8",
        "rollout.max_new_tokens=64",
        "algorithm.beta=0.04",
        "algorithm.aggregation=sequence",
        "optim.lr=1e-6",
        "train.prompts_per_step=8",
        "train.sequences_per_micro_batch=16",
        "train.tensorboard=false",
        'rewards=[{function = "trl_compare_child:grpo_reward"}]',
    ]


def profile_training(
    config_path: Path | None, overrides: list[str], steps: int, warmup: int, threads: int
) -> None:
    """``warmup + steps`` steps unprofiled (the median logged time/step after the warm-up),
    then ``steps`` more, profiled, in a second run."""
    from grpo.config import load_config
    from grpo.training.loop import train

    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as run_dir:
        common = [*overrides, "eval.every=0", "train.progress=false", f"train.threads={threads}"]
        plain = [f"train.steps={warmup + steps}", f"train.run_dir={run_dir}/a", *common]
        history = train(load_config(config_path, plain), verbose=False).history[warmup:]
        unprofiled = statistics.median(row["time/step"] for row in history)
        config = load_config(
            config_path, [f"train.steps={steps}", f"train.run_dir={run_dir}/b", *common]
        )
        with marked(step_marks()), profile(activities=[ProfilerActivity.CPU]) as prof:
            train(config, verbose=False)
    events = [e for e in prof.events() if _in_step_or_log(e)]
    wall = (
        sum(e.cpu_time_total for e in events if e.name in (MARK + "step", MARK + "logging")) / 1e6
    )
    seconds = attribute(events, classify_step)
    print(
        f"{steps} GRPO steps profiled ({threads} threads); a step takes {unprofiled:.3f} s "
        f"unprofiled (median time/step of {len(history)} after {warmup} warm-up), "
        f"{wall / steps:.3f} s profiled"
    )
    print(table(seconds, wall, per=steps, title="step"))


def _in_step_or_log(event: Any) -> bool:
    while event is not None:
        if event.name in (MARK + "step", MARK + "logging"):
            return True
        event = event.cpu_parent
    return False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["rollout", "demo", "trl-step"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--compile", default="false", choices=["false", "true"])
    parser.add_argument("--config", type=Path, default=Path("runs/demo/grpo.toml"))
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    compiled = [f"rollout.compile={args.compile}"]
    if args.what == "rollout":
        profile_rollout(args.threads, args.new_tokens, args.compile)
    elif args.what == "demo":
        profile_training(args.config, compiled, args.steps, args.warmup, args.threads)
    else:
        with tempfile.TemporaryDirectory() as directory:
            overrides = trl_overrides(Path(directory), args.prompt_tokens)
            profile_training(None, overrides + compiled, args.steps, args.warmup, args.threads)


if __name__ == "__main__":
    main()
