"""Turn-by-turn generation on token ids: the interface multi-turn rollouts (``grpo.agents``)
sample through.

A :class:`TurnSession` holds a block of a step's rows (row b samples from prompt b // G, as
in :class:`~grpo.rollout.engine.RolloutRequest`). Each :meth:`TurnSession.generate` call
appends the environment's tokens to some of the rows and samples one assistant turn for
each of them; rows left out of a call are finished and cost nothing more. Everything is
token ids: what the caller trains on is exactly the ids sampled here plus the ids it
inserted, never a re-rendering of text.

Engines that can do this implement :class:`TurnEngine`: the built-in engine continues from
its KV cache (:mod:`grpo.rollout.hf_turns`), vLLM resubmits each row's whole history and
lets its prefix cache find the shared part (:mod:`grpo.rollout.vllm_turns`).

**The prefix property.** Let C_k be the ids a row's turn k was sampled on (C_1: the
prompt), S_k the ids sampled then and I_k the ids inserted after them. The property:
C_{k+1} = C_k + S_k + I_k at every turn, so nothing the model read or wrote is rewritten,
and the one sequence the trainer scores, prompt + S_1 + I_1 + … + S_K, is the context of
every turn, each token's log-probability the sampler's. Where it can break here:

- *Re-encoded text.* A turn's ids are kept as sampled, never decoded and encoded again
  (that text can encode to other ids: "mul" sampled as "m" + "ul" encodes as one token),
  and an insertion is its own ids, appended. Holds by construction.
- *The template's rendering.* An insertion is read off the chat template after the
  end-of-turn token (:mod:`grpo.agents.chat`); earlier turns are never re-rendered, so a
  template that rewrites them once more messages follow (Qwen3 drops earlier ``<think>``
  blocks) rewrites nothing here. Holds by construction.
- *The end of a turn.* A turn that ended on a stop string (or on another EOS id) lacks the
  template's end-of-turn token: it is inserted, as part of I_k. Holds.
- *A cut turn* (``max_new_tokens`` reached, no end-of-turn token): the row ends there, so
  no C_{k+1} exists; its last turn is trained as sampled, and ``Rollout.stopped_B`` is
  False for it (``truncated_frac``, ``algorithm.mask_truncated_completions``).
- *The engine.* C_{k+1} is what the engine conditions on: its KV cache, or the ids it
  resubmits. An engine that rebuilds a row's context from text (a chat server that renders
  and tokenizes messages), cuts it to a window, or mixes up rows breaks the property.
  Each session reports every id it holds for a row (:meth:`TurnSession.context`); after
  every turn the multi-turn rollout compares that with the row's trajectory, and a row
  that differs is a *prefix break*: it ends there, its trajectory is masked
  (:attr:`Trajectory.prefix_broken`: no model token trains) and counted
  (``agent/prefix_breaks``). A session that keeps no such record (``context`` is None)
  is not checked.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch

from grpo.rollout.engine import Rollout, RolloutRequest, left_pad


@dataclass
class TurnOutput:
    """One row's sampled turn."""

    token_ids: list[int]  # the sampled ids, the ending EOS (or stop-string token) included
    logprobs: list[float]  # the sampler's log-probability of each
    stopped: bool  # ended on EOS or a stop string; False: cut at the turn's token budget


class TurnSession(ABC):
    """Rows of a multi-turn rollout, continued turn after turn (see the module docstring)."""

    @abstractmethod
    def generate(
        self, rows: list[int], inserted: list[list[int]], max_new_tokens: list[int]
    ) -> list[TurnOutput]:
        """Append ``inserted[i]`` (environment ids; empty only on the first turn) to row
        ``rows[i]`` (an index into the session's rows, increasing), then sample one turn of
        at most ``max_new_tokens[i]`` tokens for it. Rows not listed are dropped for good."""

    def context(self, row: int) -> list[int] | None:
        """Every id session row ``row`` holds in order: the prompt, then each insertion and
        each sampled turn as the engine conditioned on them (the prefix property, in the
        module docstring, is checked against it); None: the session keeps no record."""
        return None

    def close(self) -> None:  # noqa: B027 (optional to override)
        """Free what the session holds (KV cache, engine state)."""


class TurnEngine(ABC):
    """An engine that samples turn by turn (see :class:`TurnSession`)."""

    pad_token_id: int  # fills the assembled rollout's padding

    @property
    @abstractmethod
    def device(self) -> torch.device:
        """Where the assembled rollout's tensors go: the trainer's device."""

    @abstractmethod
    def start_turns(self, request: RolloutRequest, max_model_tokens: int) -> TurnSession:
        """A session on ``request``'s rows; ``request.params.max_new_tokens`` caps one turn,
        ``max_model_tokens`` the model tokens a row may sample over all its turns."""


def check_turn_rows(rows: list[int], live: list[int]) -> list[int]:
    """The positions of ``rows`` among the ``live`` rows; they must be an increasing subset."""
    where = {row: index for index, row in enumerate(live)}
    if any(row not in where for row in rows) or rows != sorted(set(rows)):
        raise ValueError(f"turn rows {rows} must be an increasing subset of the live rows {live}")
    return [where[row] for row in rows]


@dataclass
class Trajectory:
    """One row's multi-turn sequence as ids, built in the order the session saw them."""

    prompt_ids: list[int]
    ids: list[int] = field(default_factory=list)  # after the prompt: turns and insertions
    from_model: list[bool] = field(default_factory=list)  # per id: the model sampled it
    logprobs: list[float] = field(default_factory=list)  # per id: sampler log-prob (0: inserted)
    stopped: bool = False  # the last turn ended on EOS or a stop string
    # the engine's context differed from these ids (module docstring): no id trains
    prefix_broken: bool = False

    def add_turn(self, turn: TurnOutput) -> None:
        self.ids += turn.token_ids
        self.from_model += [True] * len(turn.token_ids)
        self.logprobs += turn.logprobs
        self.stopped = turn.stopped

    def add_inserted(self, ids: list[int]) -> None:
        self.ids += ids
        self.from_model += [False] * len(ids)
        self.logprobs += [0.0] * len(ids)

    @property
    def model_tokens(self) -> int:
        return sum(self.from_model)


def assemble_trajectories(
    trajectories: list[Trajectory], pad_token_id: int, device: torch.device
) -> Rollout:
    """Trajectories → a :class:`Rollout` on exactly their ids: prompts left-padded, the rest
    right-padded; ``completion_mask_BT`` 1 on model ids only (none of a prefix-broken
    trajectory's), ``attention_mask_BT`` on all."""
    prompt_ids_BP, prompt_mask_BP = left_pad([t.prompt_ids for t in trajectories], pad_token_id)
    width = max(1, max(len(t.ids) for t in trajectories))
    rows = len(trajectories)
    ids_BT = torch.full((rows, width), pad_token_id, dtype=torch.long)
    model_BT = torch.zeros((rows, width), dtype=torch.long)
    real_BT = torch.zeros((rows, width), dtype=torch.long)
    logp_BT = torch.zeros((rows, width), dtype=torch.float32)
    for row, trajectory in enumerate(trajectories):
        length = len(trajectory.ids)
        if length:
            ids_BT[row, :length] = torch.tensor(trajectory.ids, dtype=torch.long)
            if not trajectory.prefix_broken:
                model_BT[row, :length] = torch.tensor(trajectory.from_model, dtype=torch.long)
            real_BT[row, :length] = 1
            logp_BT[row, :length] = torch.tensor(trajectory.logprobs, dtype=torch.float32)
    return Rollout(
        prompt_ids_BP=prompt_ids_BP,
        prompt_mask_BP=prompt_mask_BP,
        completion_ids_BT=ids_BT,
        completion_mask_BT=model_BT,
        sampler_logp_BT=logp_BT,
        stopped_B=torch.tensor([t.stopped for t in trajectories], dtype=torch.bool),
        attention_mask_BT=real_BT,
    ).to(device)
