"""``grpo train`` (a TOML config, with overrides, resumable) and ``grpo demo`` (the embedded
default: warm start → GRPO → held-out accuracy)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from grpo.cli.common import (
    Commands,
    bad_overrides,
    check_model_names,
    import_user_code,
    quiet_transformers,
)
from grpo.cli.failures import add_debug_flag
from grpo.models.threads import apply_threads


def cmd_train(args: argparse.Namespace, overrides: list[str]) -> int:
    from grpo.config import load_config
    from grpo.training.loop import train

    if bad_overrides("train", overrides):
        return 2
    if args.resume:
        overrides = [*overrides, "--train.resume=true"]
    quiet = ["--train.quiet=true"] if args.quiet else []
    config = load_config(args.config, overrides + quiet)
    import_user_code(config)  # a bad tool or reward spec fails here, before any model loads
    check_model_names(config)  # and a bad model name, a missing .gguf or an uncached Hub id
    quiet_transformers()
    rollout = config.rollout  # local asynchronous workers take CPUs of their own
    local_workers = rollout.mode == "async" and rollout.backend == "local"
    reserved = rollout.workers * rollout.worker_threads if local_workers else 0
    threads = apply_threads(config.train.threads, reserved)  # every process of a torchrun job
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


DEMO_WORK_DIRS = {
    "arithmetic": "runs/demo",
    "tools": "runs/demo-tools",
    "smollm2": "runs/demo-smollm2",
}


def cmd_demo(args: argparse.Namespace, overrides: list[str]) -> int:
    from grpo.config.sections import TrainConfig
    from grpo.demo.run import run_demo
    from grpo.demo.smollm2_demo import run_smollm2_demo
    from grpo.demo.tools_demo import run_tools_demo

    quiet_transformers()
    # The warm start runs before the demo's config exists: the thread count is set first,
    # from a --train.threads=N override when given (a malformed one fails at load_config).
    threads = [o.split("=", 1)[1] for o in overrides if o.lstrip("-").startswith("train.threads=")]
    explicit = int(threads[-1]) if threads and threads[-1].isdigit() else TrainConfig.threads
    print(apply_threads(explicit), flush=True)
    quiet = ["train.quiet=true"] if args.quiet else []
    demo = {"arithmetic": run_demo, "tools": run_tools_demo, "smollm2": run_smollm2_demo}[args.task]
    work_dir = args.work_dir or DEMO_WORK_DIRS[args.task]
    demo(Path(work_dir), overrides=overrides + quiet, quick=args.quick)
    return 0


def add_train_parser(commands: Commands) -> None:
    train = commands.add_parser(
        "train",
        help="train from a TOML config; override keys with --section.key=value",
        description="Train from a TOML config. Any config key can be overridden on the "
        "command line as --section.key=value (a TOML value; a bare word is a string), "
        "e.g. --train.steps=200 --optim.lr=1e-5 --rollout.group_size=8.",
        epilog="Every key, its type, default and meaning: `grpo docs`, or the "
        "documentation's configuration reference (docs/reference/configuration.md).",
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
    add_debug_flag(train)
    train.set_defaults(handler=cmd_train)


def add_demo_parser(commands: Commands) -> None:
    demo = commands.add_parser(
        "demo", help="the embedded default: warm start → GRPO → held-out accuracy"
    )
    demo.add_argument(
        "--work-dir",
        default=None,
        help="where the model, data and run go (default: runs/demo, runs/demo-tools, "
        "runs/demo-smollm2)",
    )
    demo.add_argument(
        "--task",
        choices=list(DEMO_WORK_DIRS),
        default="arithmetic",
        help="arithmetic: single-turn sums and products; tools: 2-digit products through "
        "calls of a mul tool (multi-turn); smollm2: a real pretrained chat model "
        "(SmolLM2-135M-Instruct, a GGUF fetched once from the package registry) on "
        "arithmetic facts",
    )
    demo.add_argument(
        "--quick", action="store_true", help="a few steps only, to check the plumbing"
    )
    demo.add_argument("--quiet", action="store_true", help="no progress bar: plain lines")
    add_debug_flag(demo)
    demo.set_defaults(handler=cmd_demo)
