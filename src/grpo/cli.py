"""The ``grpo`` command: train, demo, eval, plot, memory."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path


def _quiet_transformers() -> None:
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def cmd_train(args: argparse.Namespace, overrides: list[str]) -> int:
    from grpo.config import load_config
    from grpo.trainer import train

    bad = [o for o in overrides if not (o.startswith("--") and "=" in o)]
    if bad:
        print(
            f"grpo train: unrecognised argument(s) {bad}; overrides look like --section.key=value",
            file=sys.stderr,
        )
        return 2
    if args.resume:
        overrides = [*overrides, "--train.resume=true"]
    config = load_config(args.config, overrides)
    _quiet_transformers()
    result = train(config)
    if result.stopped_by is not None:  # a SIGTERM/SIGINT: checkpointed, exit 0
        kept = [o for o in overrides if "train.resume" not in o]
        again = shlex.join(["grpo", "train", args.config, *kept, "--resume"])
        print(f"grpo: stopped by {result.stopped_by}; resume with: {again}")
    return 0


def cmd_demo(args: argparse.Namespace, overrides: list[str]) -> int:
    from grpo.demo.run import run_demo

    _quiet_transformers()
    run_demo(Path(args.work_dir), overrides=overrides, quick=args.quick)
    return 0


def cmd_eval(args: argparse.Namespace, overrides: list[str]) -> int:
    from grpo.data import load_prompt_dataset
    from grpo.evaluate import greedy_accuracy
    from grpo.models import load_tokenizer
    from grpo.rewards.runner import RewardFunction, resolve_function

    _quiet_transformers()
    from transformers import AutoModelForCausalLM

    from grpo.config import ModelConfig

    tokenizer = load_tokenizer(ModelConfig(path=args.model))
    model = AutoModelForCausalLM.from_pretrained(args.model).eval()
    dataset = load_prompt_dataset(args.data, tokenizer, max_prompt_tokens=10**9)
    reward = RewardFunction(name=args.reward.partition(":")[2], fn=resolve_function(args.reward))
    accuracy = greedy_accuracy(
        model, tokenizer, dataset, reward, max_new_tokens=args.max_new_tokens
    )
    print(f"greedy accuracy on {len(dataset)} prompts of {args.data}: {accuracy:.1%}")
    return 0


def cmd_plot(args: argparse.Namespace, overrides: list[str]) -> int:
    from grpo.metrics import read_metrics, text_curve

    rows = read_metrics(args.run_dir)
    values = [row[args.key] for row in rows if args.key in row]
    steps = [row["step"] for row in rows if args.key in row]
    if not values:
        print(f"no {args.key!r} in {Path(args.run_dir) / 'metrics.jsonl'}", file=sys.stderr)
        return 1
    print(text_curve(values, label=args.key, steps=steps))
    return 0


def cmd_memory(args: argparse.Namespace, overrides: list[str]) -> int:
    from grpo.memory_cli import run_memory

    return run_memory(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grpo", description="GRPO for Hugging Face causal LMs")
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser(
        "train", help="train from a TOML config; override keys with --section.key=value"
    )
    train.add_argument("config", help="path to the TOML config")
    train.add_argument(
        "--resume",
        action="store_true",
        help="continue from RUN_DIR/checkpoints/latest (train.resume = true)",
    )
    train.set_defaults(handler=cmd_train)

    demo = commands.add_parser(
        "demo", help="the embedded default: warm start → GRPO → held-out accuracy"
    )
    demo.add_argument("--work-dir", default="runs/demo", help="where the model, data and run go")
    demo.add_argument(
        "--quick", action="store_true", help="a few steps only, to check the plumbing"
    )
    demo.set_defaults(handler=cmd_demo)

    evaluate = commands.add_parser("eval", help="greedy accuracy of a model on a JSONL prompt set")
    evaluate.add_argument("model", help="local model directory")
    evaluate.add_argument("data", help="JSONL with a prompt column and the reward's columns")
    evaluate.add_argument("--reward", default="grpo.rewards:numeric_answer", help="module:function")
    evaluate.add_argument("--max-new-tokens", type=int, default=256)
    evaluate.set_defaults(handler=cmd_eval)

    plot = commands.add_parser("plot", help="plot a metric of a run as text")
    plot.add_argument("run_dir")
    plot.add_argument("--key", default="reward/mean")
    plot.set_defaults(handler=cmd_plot)

    from grpo.memory_cli import add_memory_arguments

    memory = commands.add_parser("memory", help="plan GRPO vs PPO training memory, row by row")
    add_memory_arguments(memory)
    memory.set_defaults(handler=cmd_memory)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command not in ("train", "demo"):
        parser.error(f"unrecognised arguments: {' '.join(extra)}")
    from grpo.checkpoint import CheckpointError
    from grpo.config import ConfigError
    from grpo.data import DataError
    from grpo.faults import TrainingStopped
    from grpo.models import ModelError
    from grpo.rewards.runner import RewardError

    try:
        return args.handler(args, extra)
    except TrainingStopped as error:
        print(f"grpo {args.command}: {error}", file=sys.stderr)
        return 1
    except (
        ConfigError,
        DataError,
        RewardError,
        ModelError,
        CheckpointError,
        FileNotFoundError,
    ) as error:
        print(f"grpo {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
