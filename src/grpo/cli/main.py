"""The ``grpo`` command: train, demo, eval, report, plot, memory, docs.

Each command group lives in its own module (its parser and its handler); this one assembles
the parser and turns the errors a user can fix into exit codes."""

from __future__ import annotations

import argparse
import sys

from grpo.cli.docs_command import add_docs_parser
from grpo.cli.eval_command import add_eval_parser
from grpo.cli.failures import debugging, failure_report
from grpo.cli.memory_command import add_memory_parser
from grpo.cli.runs_command import add_plot_parser, add_report_parser
from grpo.cli.train_command import add_demo_parser, add_train_parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grpo", description="GRPO for Hugging Face causal LMs")
    commands = parser.add_subparsers(dest="command", required=True)
    add_train_parser(commands)
    add_demo_parser(commands)
    add_eval_parser(commands)
    add_report_parser(commands)
    add_docs_parser(commands)
    add_plot_parser(commands)
    add_memory_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command not in ("train", "demo", "eval"):
        parser.error(f"unrecognised arguments: {' '.join(extra)}")
    from grpo.config import ConfigError
    from grpo.config.errors import UserCodeError
    from grpo.data.dataset import DataError
    from grpo.demo.smollm2 import FetchError
    from grpo.models.loading import ModelError
    from grpo.runtime.checkpoint import CheckpointError
    from grpo.runtime.faults import TrainingStopped
    from grpo.runtime.run_lock import RunDirInUse

    try:
        return args.handler(args, extra)
    except TrainingStopped as error:
        print(f"grpo {args.command}: {error}", file=sys.stderr)
        return 1
    except UserCodeError as error:  # a reward or environment of the user's failed
        print(failure_report(args.command, error, debug=debugging(args)), file=sys.stderr)
        return 2
    except (
        ConfigError,
        DataError,
        ModelError,
        CheckpointError,
        RunDirInUse,
        FetchError,
        FileNotFoundError,
    ) as error:
        print(f"grpo {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
