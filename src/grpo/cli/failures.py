"""How ``grpo`` reports a failure of the user's own code that stopped the run: one line
naming the code, the dataset file and row, the step and the exception, then the user's own
frames only (grpo's are noise to the user). ``--debug`` or ``GRPO_DEBUG=1`` prints the
whole traceback instead."""

from __future__ import annotations

import argparse
import os
import traceback

from grpo.config.errors import UserCodeError, user_traceback

DEBUG_HELP = "on a failure of your own code, print the whole traceback (as GRPO_DEBUG=1)"


def add_debug_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)


def debugging(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "debug", False)) or os.environ.get("GRPO_DEBUG", "") not in ("", "0")


def failure_report(command: str, error: UserCodeError, *, debug: bool) -> str:
    """The text printed for ``error``: its line, after the whole traceback with ``debug``,
    else followed by the user's frames (none when grpo found the problem itself)."""
    step = f"step {error.step}: " if error.step is not None else ""
    line = f"grpo {command}: error: {step}{error}".replace("\n", "\\n")
    if debug:
        whole = error.full_traceback or "".join(traceback.format_exception(error))
        return f"{whole.rstrip()}\n{line}"
    frames = user_traceback(error).rstrip()
    if not frames:
        return line
    header = "Your code (most recent call last; --debug or GRPO_DEBUG=1 for the whole traceback):"
    return f"{line}\n{header}\n{frames}"
