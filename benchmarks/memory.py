"""Peak training memory, measured: GRPO vs PPO (and LoRA vs full) next to the planner's prediction.

Each configuration trains the same random-weight Llama (built from a config, ~75M
parameters by default) on the same batch for ``--steps`` steps with ``grpo.training.loop.train``,
each in its own fresh process, so one run's allocations cannot hide in another's peak.

What is measured, per process:
- CPU: the peak resident set size (``ru_maxrss``) just before the final model export (the
  export is outside training: it writes a copy). A ``baseline`` process does everything
  but load models and train: interpreter, torch / transformers / peft / grpo imports,
  tokenizer, dataset, reward function. measured training state = peak − baseline.
- CUDA (``--device cuda``): ``torch.cuda.max_memory_allocated`` (tensors only; the CUDA
  context and allocator cache are not in it), so the baseline is 0.

The planner (:func:`grpo.models.memory.plan_memory`) is given the same model config, fp32 AdamW,
the reference loaded (β > 0), no reward model (the reward is a Python function), the
micro-batch (sequences × (prompt + new tokens)) and ``critic_update="separate"``, which is
how grpo's PPO runs (the policy's gradients are freed before the critic's backward).

    python benchmarks/memory.py [--hidden 768 --layers 8 --steps 2 --device cpu]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = {  # name: (estimator, lora_rank)
    "grpo": ("grpo", 0),
    "ppo": ("ppo", 0),
    "grpo-lora": ("grpo", 16),
    "ppo-lora": ("ppo", 16),
}


def offset_digit_fraction(prompts: list[str], completions: list[str], **_: object) -> list[float]:
    """A reward that varies within every group of random completions (no group is dropped)."""
    return [1.0 + sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]


def _overrides(args: argparse.Namespace, work: Path, estimator: str, lora_rank: int) -> list[str]:
    return [
        f"model.path='{work / 'model'}'",
        f"model.device='{args.device}'",
        f"model.lora_rank={lora_rank}",
        f"data.train_path='{work / 'train.jsonl'}'",
        "rewards=[{function='grpo.rewards:numeric_answer'}]",
        f"algorithm.estimator='{estimator}'",
        "algorithm.beta=0.04",
        f"train.steps={args.steps}",
        f"train.prompts_per_step={args.prompts}",
        f"rollout.group_size={args.group_size}",
        f"rollout.max_new_tokens={args.new_tokens}",
        f"train.sequences_per_micro_batch={args.micro_batch}",
        f"train.run_dir='{work / ('run-' + estimator + str(lora_rank))}'",
        "train.progress=false",
        "train.tensorboard=false",
        "optim.lr=1e-5",
    ]


def memory_status() -> dict[str, int]:
    """This process's VmHWM (peak RSS), VmRSS, RssAnon and RssFile in bytes (Linux).

    VmHWM belongs to this process's own address space; ``ru_maxrss`` would not do: a child
    started by vfork/posix_spawn inherits its parent's high-water mark.
    """
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) * 1024
    return fields


def child(args: argparse.Namespace) -> None:
    """One configuration in this fresh process; prints one JSON line."""
    import peft  # noqa: F401  (imported by the baseline too, so both count it)
    import torch
    import transformers

    import grpo.training.loop
    from grpo.config import load_config
    from grpo.data.dataset import load_dataset_for
    from grpo.models.loading import load_tokenizer
    from grpo.rewards.runner import RewardFunction

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    work = Path(args.work)
    estimator, lora_rank = RUNS.get(args.child, ("grpo", 0))
    config = load_config(None, _overrides(args, work, estimator, lora_rank))
    cuda = args.device == "cuda"
    rewards = [RewardFunction("offset_digit_fraction", offset_digit_fraction)]
    result: dict[str, object] = {"name": args.child}
    if args.child == "baseline":
        tokenizer = load_tokenizer(config.model.path, tokenizer_path=config.model.tokenizer_path)
        load_dataset_for(config.data.train_path, tokenizer, config.data)
        offset_digit_fraction(["1+1="], ["2"])
        torch.ones(4, 4) @ torch.ones(4, 4)
    else:
        peaks: dict[str, int] = {}
        real_save = grpo.training.loop.save_model

        def save_after_measuring(*a, **k):
            peaks.update(memory_status())
            if cuda:
                peaks["cuda"] = torch.cuda.max_memory_allocated()
            return real_save(*a, **k)

        grpo.training.loop.save_model = save_after_measuring  # measure, then export as usual
        started = time.perf_counter()
        history = grpo.training.loop.train(config, reward_functions=rewards, verbose=False).history
        result["seconds"] = time.perf_counter() - started
        result["groups_trained"] = [row["groups_trained"] for row in history]
        result["value_loss"] = [row.get("value_loss") for row in history]
        result.update(peak_rss=peaks["VmHWM"], peak_cuda=peaks.get("cuda", 0), at_peak=peaks)
    result["at_exit"] = memory_status()
    print("RESULT " + json.dumps(result), flush=True)


def prepare(args: argparse.Namespace, work: Path) -> tuple[int, int]:
    """The model (random weights, from a config) and the data; (parameters, longest prompt)."""
    from grpo.demo.model import build_tiny_llama
    from grpo.demo.task import make_splits, write_jsonl
    from grpo.demo.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer(work / "model")
    model = build_tiny_llama(
        tokenizer,
        hidden_size=args.hidden,
        layers=args.layers,
        heads=args.heads,
        max_positions=256,
        directory=work / "model",
    )
    rows, _ = make_splits(256, 0, seed=0)
    write_jsonl(rows, work / "train.jsonl")
    longest = max(len(tokenizer(row["prompt"])["input_ids"]) for row in rows)
    return sum(p.numel() for p in model.parameters()), longest


def predicted(args: argparse.Namespace, work: Path, longest_prompt: int) -> dict[int, object]:
    """The planner's plans for full fine-tuning (0) and LoRA (16), as the runs are configured."""
    from grpo.models.architecture import architecture_from_config
    from grpo.models.memory import plan_memory

    architecture = architecture_from_config(str(work / "model"))
    return {
        lora_rank: plan_memory(
            architecture.parameters,
            architecture=architecture,
            precision="fp32",
            optimizer="adamw",
            reference=True,
            reward_model=False,
            lora_rank=lora_rank,
            sequences=args.micro_batch,
            sequence_length=longest_prompt + args.new_tokens,
            completion_length=args.new_tokens,
            critic_update="separate",
        )
        for lora_rank in (0, 16)
    }


def run_child(name: str, args: argparse.Namespace, work: Path) -> dict:
    command = [sys.executable, __file__, "--child", name, "--work", str(work)]
    for key in ("hidden", "layers", "heads", "steps", "prompts", "group_size", "new_tokens"):
        command += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    command += ["--micro-batch", str(args.micro_batch), "--device", args.device]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{name} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", default=",".join(RUNS), help="comma-separated subset")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    names = [name for name in args.runs.split(",") if name]
    unknown = sorted(set(names) - set(RUNS))
    if unknown:
        parser.error(f"--runs: unknown {unknown}; choose from {list(RUNS)}")
    work = Path(tempfile.mkdtemp(prefix="grpo-memory-"))
    parameters, longest_prompt = prepare(args, work)
    plans = predicted(args, work, longest_prompt)
    sequences = args.prompts * args.group_size
    print(
        f"model: Llama {args.layers} layers × {args.hidden} hidden, {parameters:,} parameters, "
        f"fp32, random weights; batch: {args.prompts} prompts × G={args.group_size} = "
        f"{sequences} sequences of ≤ {longest_prompt} + {args.new_tokens} tokens, micro-batches "
        f"of {args.micro_batch}; β = 0.04 (reference loaded); {args.steps} steps; {args.device}",
        flush=True,
    )
    baseline = 0
    if args.device == "cpu":
        baseline = run_child("baseline", args, work)["at_exit"]["VmHWM"]
        print(f"baseline (interpreter, imports, tokenizer, data): {baseline / 1e6:,.0f} MB")
    results = {}
    for name in names:
        results[name] = run_child(name, args, work)
        peak = results[name]["peak_cuda" if args.device == "cuda" else "peak_rss"]
        estimator, lora_rank = RUNS[name]
        plan = plans[lora_rank]
        results[name]["state"] = peak - baseline
        results[name]["planned"] = plan.grpo_total if estimator == "grpo" else plan.ppo_total
        print(
            f"{name}: peak {peak / 1e6:,.0f} MB, state {(peak - baseline) / 1e6:,.0f} MB, "
            f"planned {results[name]['planned'] / 1e6:,.0f} MB, "
            f"{results[name]['seconds']:.0f} s, groups trained {results[name]['groups_trained']}, "
            f"value loss {results[name]['value_loss']}",
            flush=True,
        )
    print()
    print(table(results, baseline, args.device))
    for lora_rank, plan in plans.items():
        print(f"\nplanner, LoRA r={lora_rank}:" if lora_rank else "\nplanner, full fine-tuning:")
        print(format_plan_mb(plan))
    print(json.dumps({name: {k: v for k, v in r.items()} for name, r in results.items()}))


def table(results: dict[str, dict], baseline: int, device: str) -> str:
    peak_key = "peak_cuda" if device == "cuda" else "peak_rss"
    measured = "max_memory_allocated" if device == "cuda" else "peak RSS"
    lines = [
        f"| run | {measured} (MB) | training state = peak − baseline (MB) | planner (MB) "
        "| planner error |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        error = (r["planned"] - r["state"]) / r["state"]
        lines.append(
            f"| {name} | {r[peak_key] / 1e6:,.0f} | {r['state'] / 1e6:,.0f} | "
            f"{r['planned'] / 1e6:,.0f} | {error:+.1%} |"
        )
    for a, b in (("grpo", "ppo"), ("grpo-lora", "ppo-lora"), ("grpo-lora", "grpo")):
        if a in results and b in results:
            state_a, state_b = results[a]["state"], results[b]["state"]
            peak_a, peak_b = results[a][peak_key], results[b][peak_key]
            lines.append(
                f"\n{a} vs {b}: training state {1 - state_a / state_b:.1%} lower "
                f"({state_b / state_a:.2f}×); whole-process peak {1 - peak_a / peak_b:.1%} lower"
            )
    return "\n".join(lines)


def format_plan_mb(plan) -> str:
    rows = [
        f"  {name:<17} GRPO {g / 1e6:>8,.0f} MB   PPO {p / 1e6:>8,.0f} MB"
        for name, (g, p) in plan.rows.items()
    ]
    rows.append(
        f"  {'total':<17} GRPO {plan.grpo_total / 1e6:>8,.0f} MB   "
        f"PPO {plan.ppo_total / 1e6:>8,.0f} MB"
    )
    return "\n".join(rows)


if __name__ == "__main__":
    main()
