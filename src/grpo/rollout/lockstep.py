"""Turn sessions in lockstep across processes, for an FSDP-sharded policy.

Under FSDP every forward pass gathers the parameters from all processes, so every process
must run as many forward passes as the others, in the same order. A multi-turn rollout
breaks that: each process's rows finish their turns, call tools and end their
trajectories at their own pace, and a process whose rows are all done leaves the session
while another still decodes.

The rule that keeps them together: every forward pass of a session is preceded by a
:func:`vote`, one all-reduce (two when no process needs a pass), and runs on every process
or on none. Each process votes whether it needs a pass now and whether it has closed its
session; the outcome is the same everywhere:

- ``FORWARD``: some process needs a pass. Every process runs one: its own (a turn's
  tokens, padding for rows that ended) or, with nothing to compute, :func:`idle_forward`.
- ``PAUSE``: no process needs one, but some are still in their session (between two
  turns, say, running tool calls): a decoding turn ends here; a closed session votes again.
- ``END``: every process has closed its session: they all leave it together.

A closed session keeps voting (:func:`wait_for_all`) until ``END``, so a process that is
done still joins every pass of the others' later turns.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

FORWARD, PAUSE, END = "forward", "pause", "end"

AllDone = Callable[[bool], bool]  # True when the flag is true on every process


def vote(all_done: AllDone, *, need: bool, closed: bool = False) -> str:
    """FORWARD if some process ``need``s a pass; else END if every process is ``closed``,
    else PAUSE. The same answer on every process (see the module docstring)."""
    if not all_done(not need):
        return FORWARD
    return END if all_done(closed) else PAUSE


def idle_forward(model: nn.Module, pad_token_id: int, device: torch.device) -> None:
    """One pass on a single padding token, no cache: the parameter gathers of a pass, for a
    process with nothing of its own to compute."""
    ids_11 = torch.full((1, 1), pad_token_id, dtype=torch.long, device=device)
    with torch.no_grad():
        model(input_ids=ids_11, attention_mask=torch.ones_like(ids_11), use_cache=False)


def wait_for_all(all_done: AllDone, forward: Callable[[], None]) -> None:
    """A closed session: join the other processes' passes (``forward``) until all closed."""
    while (outcome := vote(all_done, need=False, closed=True)) != END:
        if outcome == FORWARD:
            forward()
