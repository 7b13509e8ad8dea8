"""The errors a user fixes: a configuration mistake, and a failure of the user's own code
(a reward function, an environment) that stops the run."""

from __future__ import annotations

import sysconfig
import traceback
from pathlib import Path

GRPO_DIR = Path(__file__).resolve().parents[1]  # the grpo package: frames here are ours


class ConfigError(ValueError):
    """A bad configuration value; the message names the key."""


class UserCodeError(RuntimeError):
    """The user's code failed and the run stops (a reward or environment under
    ``on_error = "fail"``).

    ``str()`` is one line naming the code, the dataset file and row and what went wrong;
    the loop sets ``step``. The user's exception, when there is one, is ``__cause__``;
    ``frames`` is its traceback's text cut to the user's frames, set where the traceback
    itself cannot travel (an asynchronous worker's error)."""

    step: int | None = None
    frames: str | None = None
    full_traceback: str | None = None  # the worker's whole traceback, for --debug


def user_frames(error: BaseException) -> list[traceback.FrameSummary]:
    """The user's frames of ``error``'s traceback: grpo's own are left out, and so are the
    standard library's before the first of the user's (the threads and event loops grpo
    calls user code through)."""
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if not Path(frame.filename).resolve().is_relative_to(GRPO_DIR)
    ]
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    while frames and Path(frames[0].filename).resolve().is_relative_to(stdlib):
        frames.pop(0)
    return frames


def user_traceback(error: UserCodeError) -> str:
    """The user's frames of the exception behind ``error``, each as its place and its
    source line (empty when grpo itself found the problem, a malformed return value say)."""
    if error.frames is not None:
        return error.frames
    cause = error.__cause__
    frames = user_frames(cause) if cause is not None else []
    return "".join(
        f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}\n'
        + (f"    {frame.line.strip()}\n" if frame.line else "")
        for frame in frames
    )
