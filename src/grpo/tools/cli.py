"""The ``grpo`` command: train, demo, eval, report, plot, memory, docs."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from grpo.models.threads import apply_threads


def _quiet_transformers() -> None:
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def cmd_train(args: argparse.Namespace, overrides: list[str]) -> int:
    from grpo.config import load_config
    from grpo.training.loop import train

    if _bad_overrides("train", overrides):
        return 2
    if args.resume:
        overrides = [*overrides, "--train.resume=true"]
    quiet = ["--train.quiet=true"] if args.quiet else []
    config = load_config(args.config, overrides + quiet)
    _quiet_transformers()
    threads = apply_threads(config.train.threads)  # every process of a torchrun job
    if os.environ.get("RANK", "0") == "0":
        print(threads, flush=True)
    result = train(config)
    if result.stopped_by is not None:  # a SIGTERM/SIGINT: checkpointed, exit 0
        kept = [o for o in overrides if "train.resume" not in o]
        again = shlex.join(["grpo", "train", args.config, *kept, "--resume"])
        print(f"grpo: stopped by {result.stopped_by}; resume with: {again}")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        _exit_before_finalizing()
    return 0


def _exit_before_finalizing() -> None:
    """End a finished torchrun process without Python's interpreter finalization.

    Under FSDP the model keeps the gloo process group alive after ``destroy_process_group``,
    and a gloo worker thread may drop its last collective (whose tensors are Python objects)
    only after the interpreter began finalizing; taking the GIL then kills the thread and the
    process aborts ("terminate called without an active exception", exit -6) although
    training finished. Seen about 1 run in 20 on busy cores; pytorch/pytorch#179291 tried to
    fix it in torch. Everything is written and closed by now (train's last barrier)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def cmd_demo(args: argparse.Namespace, overrides: list[str]) -> int:
    from grpo.config.sections import TrainConfig
    from grpo.demo.run import run_demo
    from grpo.demo.tools_demo import run_tools_demo

    _quiet_transformers()
    # The warm start runs before the demo's config exists: the thread count is set first,
    # from a --train.threads=N override when given (a malformed one fails at load_config).
    threads = [o.split("=", 1)[1] for o in overrides if o.lstrip("-").startswith("train.threads=")]
    explicit = int(threads[-1]) if threads and threads[-1].isdigit() else TrainConfig.threads
    print(apply_threads(explicit), flush=True)
    quiet = ["train.quiet=true"] if args.quiet else []
    demo = run_tools_demo if args.task == "tools" else run_demo
    work_dir = args.work_dir or ("runs/demo-tools" if args.task == "tools" else "runs/demo")
    demo(Path(work_dir), overrides=overrides + quiet, quick=args.quick)
    return 0


def _bad_overrides(command: str, overrides: list[str]) -> bool:
    bad = [o for o in overrides if not (o.startswith("--") and "=" in o)]
    if bad:
        print(
            f"grpo {command}: unrecognised argument(s) {bad}; "
            "overrides look like --section.key=value",
            file=sys.stderr,
        )
    return bool(bad)


def eval_config(args: argparse.Namespace, overrides: list[str]):
    """The config ``grpo eval`` runs under: ``--config`` (or the defaults), the model and
    data from the command line, ``--reward`` replacing the rewards, then the overrides."""
    from grpo.config import load_config

    data = args.data_option or args.data
    if not data:
        raise FileNotFoundError("grpo eval needs a dataset: --data FILE")
    fixed = [f"--model.path={json.dumps(args.model)}", f"--data.train_path={json.dumps(data)}"]
    rewards = args.reward or ([] if args.config else ["grpo.rewards:numeric_answer"])
    if rewards:
        tables = ", ".join("{ function = " + json.dumps(spec) + " }" for spec in rewards)
        fixed.append(f"--rewards=[{tables}]")
    return load_config(args.config, fixed + overrides)


def cmd_eval(args: argparse.Namespace, overrides: list[str]) -> int:
    from grpo.data.dataset import load_dataset_for
    from grpo.eval.evaluate import correctness_reward, evaluate_model
    from grpo.models.loading import load_reference, load_tokenizer, pick_device
    from grpo.rewards.runner import resolve_reward_functions
    from grpo.training.generate import agent_settings

    if _bad_overrides("eval", overrides):
        return 2
    config = eval_config(args, overrides)
    _quiet_transformers()
    tokenizer = load_tokenizer(config.model)
    dataset = load_dataset_for(config.data.train_path, tokenizer, config.data)
    model = load_reference(config.model, pick_device(config.model.device))  # frozen, eval mode
    rewards = resolve_reward_functions(config.rewards)
    ks = sorted({int(k) for k in args.k.split(",")}) if args.samples else []
    agent = agent_settings(config.agent, tokenizer) if config.agent.enabled else None
    report = evaluate_model(
        model,
        tokenizer,
        dataset,
        rewards,
        correctness_reward(config.eval.reward, rewards),
        max_new_tokens=args.max_new_tokens
        or config.eval.max_new_tokens
        or config.rollout.max_new_tokens,
        samples=args.samples,
        ks=[k for k in ks if k <= args.samples],
        temperature=args.temperature or config.rollout.temperature,
        top_p=config.rollout.top_p,
        top_k=config.rollout.top_k,
        seed=args.seed,
        agent=agent,
        # Turns end on the stop strings (a tool call's closing tag) as in training.
        stop_strings=config.rollout.stop_strings if agent else (),
    )
    print(report.table())
    if args.json:
        Path(args.json).write_text(json.dumps(report.summary(), indent=2) + "\n")
        print(f"written to {args.json}")
    return 0


def cmd_report(args: argparse.Namespace, overrides: list[str]) -> int:
    from grpo.log.report import write_report

    try:
        page = write_report(args.run_dir, args.out)
    except ImportError as error:  # matplotlib is an optional extra
        print(f"grpo report: error: {error}", file=sys.stderr)
        return 2
    print(f"report written to {page} (open it in a browser; the PNGs are beside it)")
    return 0


def cmd_docs(args: argparse.Namespace, overrides: list[str]) -> int:
    from grpo.tools.docs import config_reference, with_reference, write_reference

    if args.check:
        readme = Path(args.check)
        if with_reference(readme.read_text()) != readme.read_text():
            stale = f"{readme}: the configuration reference is out of date"
            print(f"{stale}; run grpo docs --write {readme}", file=sys.stderr)
            return 1
        print(f"{readme}: the configuration reference is up to date")
    elif args.write:
        changed = write_reference(args.write)
        print(f"{args.write}: configuration reference {'updated' if changed else 'unchanged'}")
    else:
        print(config_reference(), end="")
    return 0


def cmd_plot(args: argparse.Namespace, overrides: list[str]) -> int:
    from grpo.log.metrics import read_metrics, text_curve

    rows = read_metrics(args.run_dir)
    values = [row[args.key] for row in rows if args.key in row]
    steps = [row["step"] for row in rows if args.key in row]
    if not values:
        print(f"no {args.key!r} in {Path(args.run_dir) / 'metrics.jsonl'}", file=sys.stderr)
        return 1
    print(text_curve(values, label=args.key, steps=steps))
    return 0


def cmd_memory(args: argparse.Namespace, overrides: list[str]) -> int:
    from grpo.tools.memory_cli import run_memory

    return run_memory(args)


# The object ``add_subparsers`` returns, to which each command's parser is added.
Commands = argparse._SubParsersAction


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grpo", description="GRPO for Hugging Face causal LMs")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_train_parser(commands)
    _add_demo_parser(commands)
    _add_eval_parser(commands)
    _add_report_parser(commands)
    _add_docs_parser(commands)
    _add_plot_parser(commands)
    _add_memory_parser(commands)
    return parser


def _add_train_parser(commands: Commands) -> None:
    train = commands.add_parser(
        "train",
        help="train from a TOML config; override keys with --section.key=value",
        description="Train from a TOML config. Any config key can be overridden on the "
        "command line as --section.key=value (a TOML value; a bare word is a string), "
        "e.g. --train.steps=200 --optim.lr=1e-5 --rollout.group_size=8.",
        epilog="Every key, its type, default and meaning: `grpo docs`, or the README's "
        "configuration reference.",
    )
    train.add_argument("config", help="path to the TOML config")
    train.add_argument(
        "--resume",
        action="store_true",
        help="continue from RUN_DIR/checkpoints/latest (train.resume = true)",
    )
    train.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar: plain lines (the default when output is not a terminal)",
    )
    train.set_defaults(handler=cmd_train)


def _add_demo_parser(commands: Commands) -> None:
    demo = commands.add_parser(
        "demo", help="the embedded default: warm start → GRPO → held-out accuracy"
    )
    demo.add_argument(
        "--work-dir",
        default=None,
        help="where the model, data and run go (default: runs/demo, runs/demo-tools)",
    )
    demo.add_argument(
        "--task",
        choices=["arithmetic", "tools"],
        default="arithmetic",
        help="arithmetic: single-turn sums and products; tools: 2-digit products through "
        "calls of a mul tool (multi-turn)",
    )
    demo.add_argument(
        "--quick", action="store_true", help="a few steps only, to check the plumbing"
    )
    demo.add_argument("--quiet", action="store_true", help="no progress bar: plain lines")
    demo.set_defaults(handler=cmd_demo)


def _add_eval_parser(commands: Commands) -> None:
    evaluate = commands.add_parser(
        "eval",
        help="pass@1 (greedy), pass@k (sampled) and mean rewards of a model on a prompt set",
        description="pass@1 (greedy), pass@k (sampled) and mean rewards of a model on a "
        "prompt set. --section.key=value overrides apply as in `grpo train` (see `grpo docs`).",
    )
    evaluate.add_argument("model", help="local model directory")
    evaluate.add_argument("data", nargs="?", help="the prompt set (or --data)")
    evaluate.add_argument("--data", dest="data_option", metavar="FILE", help="the prompt set")
    evaluate.add_argument(
        "--config", help="a training TOML: its [data] formatting, [[rewards]] and [eval] apply"
    )
    evaluate.add_argument(
        "--reward",
        action="append",
        metavar="MODULE:FUNCTION",
        help="a reward function (repeat for several; default: the config's, else "
        "grpo.rewards:numeric_answer)",
    )
    evaluate.add_argument(
        "--samples",
        type=int,
        default=0,
        help="n sampled completions per prompt for pass@k "
        "(default: %(default)s = greedy pass@1 only)",
    )
    evaluate.add_argument(
        "--k", default="1,4,8", help="the k of pass@k, comma-separated, ≤ n (default: %(default)s)"
    )
    evaluate.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="of the sampled completions (default: %(default)s = the config's rollout.temperature)",
    )
    evaluate.add_argument(
        "--max-new-tokens",
        type=int,
        default=0,
        help="(default: %(default)s = the config's eval.max_new_tokens, "
        "else rollout.max_new_tokens)",
    )
    evaluate.add_argument(
        "--seed", type=int, default=0, help="seeds the sampling (default: %(default)s)"
    )
    evaluate.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    evaluate.set_defaults(handler=cmd_eval)


def _add_report_parser(commands: Commands) -> None:
    report = commands.add_parser(
        "report", help="PNG plots and an HTML page (with sample completions) of a run"
    )
    report.add_argument("run_dir")
    report.add_argument("--out", help="output folder (default RUN_DIR/report)")
    report.set_defaults(handler=cmd_report)


def _add_docs_parser(commands: Commands) -> None:
    docs = commands.add_parser(
        "docs", help="print the configuration reference (from config/sections.py)"
    )
    docs_target = docs.add_mutually_exclusive_group()
    docs_target.add_argument("--write", metavar="README", help="refresh the README's copy")
    docs_target.add_argument(
        "--check", metavar="README", help="exit 1 when the README's copy is out of date"
    )
    docs.set_defaults(handler=cmd_docs)


def _add_plot_parser(commands: Commands) -> None:
    plot = commands.add_parser("plot", help="plot a metric of a run as text")
    plot.add_argument("run_dir")
    plot.add_argument("--key", default="reward/mean")
    plot.set_defaults(handler=cmd_plot)


def _add_memory_parser(commands: Commands) -> None:
    from grpo.tools.memory_cli import add_memory_arguments

    memory = commands.add_parser("memory", help="plan GRPO vs PPO training memory, row by row")
    add_memory_arguments(memory)
    memory.set_defaults(handler=cmd_memory)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command not in ("train", "demo", "eval"):
        parser.error(f"unrecognised arguments: {' '.join(extra)}")
    from grpo.config import ConfigError
    from grpo.data.dataset import DataError
    from grpo.models.loading import ModelError
    from grpo.rewards.runner import RewardError
    from grpo.training.runtime.checkpoint import CheckpointError
    from grpo.training.runtime.faults import TrainingStopped

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
