"""The multi-turn rollout: turns of the model, tool results and environment observations,
on exact token ids.

Per step block (rows [start, stop) of N prompts × G): each prompt's conversation opens
with its environment's ``reset()`` messages (or the prompt as a user message), rendered
with the tools offered (:mod:`grpo.agents.chat`). Then, turn after turn, the engine's
:class:`~grpo.rollout.turns.TurnSession` samples one assistant turn for every live row;
a turn's tool calls are executed (:mod:`grpo.agents.calls`) and their results inserted as
tool messages; a turn without a call goes to the environment's ``step`` (no environment:
the row is done). A turn's calls and steps over all rows run side by side
(:mod:`grpo.agents.replies`); a process opens only the prompts of its own rows. A row
ends when it is done, its turn was cut at the token budget, it broke the prefix
property (below), or ``max_turns`` turns were sampled (counted:
``agent/cut_at_max_turns_frac``). A turn that ended on a stop string, not on the
end-of-turn token, gets that token inserted before what answers it.

What is trained on is exactly the sampled ids plus the inserted ids
(:func:`~grpo.rollout.turns.assemble_trajectories`): ``completion_mask_BT`` is 1 on the
model's ids only, so the loss, KL, entropy and every normalizer skip inserted tokens.
After every turn each row's ids are checked against what the engine conditioned on (the
prefix property, :mod:`grpo.rollout.turns`); a row that breaks it ends, is masked and is
counted (``agent/prefix_breaks``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from grpo.agents.replies import Opening, TurnState, open_prompts, reply_to_turn
from grpo.agents.settings import AgentSettings
from grpo.algo.groups import group_of
from grpo.rewards.runner import RewardFunction
from grpo.rollout.engine import Rollout, RolloutRequest, SamplingParams
from grpo.rollout.turns import Trajectory, TurnEngine, assemble_trajectories

ERROR_KINDS = (
    "malformed_json",
    "bad_arguments",
    "unknown_tool",
    "wrong_arguments",
    "raised",
    "timeout",
    "tool_result_type",
    "too_long",
    "environment",
)

__all__ = ["ENVIRONMENT_REWARD", "AgentSettings", "TrajectoryBlock", "run_trajectories"]


@dataclass
class TrajectoryBlock:
    """A block's trajectories and what the rewards, metrics and logs need of them."""

    rollout: Rollout
    completions: list[str]  # the model's turns, joined by newlines
    conversations: list[list[dict[str, Any]]]  # every message (role, content, author)
    rendered_prompts: list[str]  # the prompt as the model read it (special tokens kept)
    turn_tokens: list[list[list[int]]]  # per turn: [model tokens, tokens inserted after it]
    env_reward: list[float]  # the environment's rewards, summed (0.0 without any)
    env_rewarded: bool  # some environment gave a reward
    failed: list[bool]  # the row's environment failed (env_on_error zero or skip_group)
    skip: list[bool]  # … under env_on_error = "skip_group"
    block_metrics: dict[str, float]  # what reduces over blocks by the metric table
    inserted_tokens: int  # over the block's rows
    model_tokens: int

    @property
    def metrics(self) -> dict[str, float]:
        """The block's metrics, with its share of inserted tokens (a ratio of sums, so a
        step's share is computed from every block's counts, not from these shares)."""
        share = env_token_frac(self.inserted_tokens, self.model_tokens)
        return {**self.block_metrics, "agent/env_token_frac": share}

    @property
    def columns(self) -> dict[str, list[Any]]:
        """What reward functions get beside the dataset's columns, one value per row."""
        return {
            "conversation": self.conversations,
            "env_reward": self.env_reward,
            "rendered_prompt": self.rendered_prompts,
            "turn_tokens": self.turn_tokens,
        }


def run_trajectories(
    engine: TurnEngine,
    records: list[dict[str, Any]],
    group_size: int,
    params: SamplingParams,
    generator: torch.Generator | None,
    rows: range,
    settings: AgentSettings,
    names: list[str] | None = None,
) -> TrajectoryBlock:
    """Rows ``rows`` of the step's len(records)·G multi-turn trajectories. Only the prompts
    of these rows are opened (their environments created and reset); ``names[i]`` is how
    an error names record i (its dataset file and row)."""
    names = names or [f"prompt {index}" for index in range(len(records))]
    needed: dict[int, int] = {}
    for row in rows:
        prompt = group_of(row, group_size)
        needed[prompt] = needed.get(prompt, 0) + 1
    openings = open_prompts(records, needed, names, settings)
    prompt_ids = {i: settings.chat.prompt_ids(o.messages) for i, o in openings.items()}
    # Other processes' prompts are never read by the engine: their ids are left empty.
    prompts = [prompt_ids.get(index, []) for index in range(len(records))]
    request = RolloutRequest(prompts, group_size, params, generator, rows.start, rows.stop)
    counts = dict.fromkeys(ERROR_KINDS, 0.0) | {"seconds": 0.0, "cut": 0.0, "prefix_breaks": 0.0}
    states = _rows(openings, prompt_ids, rows, group_size, names, counts)
    live = [index for index, state in enumerate(states) if state.failure is None]
    session = engine.start_turns(request, params.max_new_tokens * settings.max_turns)
    try:
        inserted: list[list[int]] = [[] for _ in live]
        for turn in range(settings.max_turns):
            if not live:
                break
            outputs = session.generate(live, inserted, [params.max_new_tokens] * len(live))
            asking = []
            for index, output in zip(live, outputs, strict=True):
                state = states[index]
                state.trajectory.add_turn(output)
                text = settings.chat.decode(output.token_ids)
                state.turns.append(text)
                state.turn_tokens.append([len(output.token_ids), 0])
                state.messages.append({"role": "assistant", "content": text})
                state.authors.append("model")
                if _breaks_prefix(session.context(index), state.trajectory):
                    state.trajectory.prefix_broken = True  # masked, and the row ends
                    counts["prefix_breaks"] += 1
                elif output.stopped:  # else cut at the token budget: the row ends here
                    asking.append(index)
            replies = reply_to_turn(
                [states[i] for i in asking], [states[i].turns[-1] for i in asking], settings, counts
            )
            live, inserted = [], []
            for index, new in zip(asking, replies, strict=True):
                if new is None:
                    continue
                if turn == settings.max_turns - 1:
                    counts["cut"] += 1
                    continue
                ids = _insert(states[index], new, settings)
                live.append(index)
                inserted.append(ids)
    finally:
        session.close()
    return _result(states, counts, engine, settings)


def _rows(
    openings: dict[int, Opening],
    prompt_ids: dict[int, list[int]],
    rows: range,
    group_size: int,
    names: list[str],
    counts: dict[str, float],
) -> list[TurnState]:
    """One :class:`TurnState` per row of the block, each with its own copy of the environment."""
    taken = dict.fromkeys(openings, 0)
    states = []
    for row in rows:
        index = group_of(row, group_size)
        opening = openings[index]
        environment = None
        if opening.failure is None and opening.environments:
            environment = opening.environments[taken[index]]
        taken[index] += 1
        name = f"{names[index]}, trajectory {row % group_size + 1} of {group_size}"
        state = TurnState(
            Trajectory(prompt_ids[index]), list(opening.messages), list(opening.authors),
            environment, name,
        )  # fmt: skip
        if opening.failure is not None:
            state.fail(opening.failure)
            counts["environment"] += 1
        states.append(state)
    return states


def _breaks_prefix(context: list[int] | None, trajectory: Trajectory) -> bool:
    """Whether the engine's ids for the row (None: not recorded) differ from the
    trajectory's: the prompt, then every id sampled or inserted, in order."""
    if context is None:
        return False
    prompt = trajectory.prompt_ids
    return context[: len(prompt)] != prompt or context[len(prompt) :] != trajectory.ids


def _insert(state: TurnState, new: list[dict[str, Any]], settings: AgentSettings) -> list[int]:
    """Append the answering messages to the row; their ids, as the model will read them
    (after the end-of-turn token, inserted first when the model's turn lacks it)."""
    authors = ["tool" if m["role"] == "tool" else "environment" for m in new]
    state.messages += new
    state.authors += authors
    chat = settings.chat
    ids = chat.turn_closing(state.trajectory.ids) + chat.insertion_ids(new)
    state.trajectory.add_inserted(ids)
    state.turn_tokens[-1][1] = len(ids)
    return ids


def _result(
    states: list[TurnState], counts: dict[str, float], engine: TurnEngine, settings: AgentSettings
) -> TrajectoryBlock:
    trajectories = [state.trajectory for state in states]
    rollout = assemble_trajectories(trajectories, engine.pad_token_id, engine.device)
    model_tokens = sum(t.model_tokens for t in trajectories)
    inserted = sum(len(t.ids) for t in trajectories) - model_tokens
    rows = max(len(states), 1)
    metrics = {
        "agent/turns/mean": sum(len(s.turns) for s in states) / rows,
        "agent/tool_calls/mean": sum(s.tool_calls for s in states) / rows,
        "agent/tool_call_frac": sum(s.tool_calls > 0 for s in states) / rows,
        "agent/cut_at_max_turns_frac": counts["cut"] / rows,
        "agent/prefix_breaks": counts["prefix_breaks"],
        "agent/tool/seconds": counts["seconds"],
        **{f"agent/{kind}/errors": counts[kind] for kind in ERROR_KINDS},
    }
    return TrajectoryBlock(
        rollout=rollout,
        completions=["\n".join(s.turns) for s in states],
        conversations=[
            [{**m, "author": a} for m, a in zip(s.messages, s.authors, strict=True)] for s in states
        ],
        rendered_prompts=_rendered(trajectories, settings),
        turn_tokens=[s.turn_tokens for s in states],
        env_reward=[0.0 if s.failure else s.reward for s in states],
        env_rewarded=any(s.rewarded for s in states),
        failed=[s.failure is not None for s in states],
        skip=[s.failure is not None and settings.env_on_error == "skip_group" for s in states],
        block_metrics=metrics,
        inserted_tokens=inserted,
        model_tokens=model_tokens,
    )


def _rendered(trajectories: list[Trajectory], settings: AgentSettings) -> list[str]:
    """Each row's prompt as the model read it, special tokens kept; decoded once per prompt
    (a group's rows share their prompt's id list)."""
    texts: dict[int, str] = {}
    for t in trajectories:
        if id(t.prompt_ids) not in texts:
            texts[id(t.prompt_ids)] = settings.chat.tokenizer.decode(t.prompt_ids)
    return [texts[id(t.prompt_ids)] for t in trajectories]


def env_token_frac(inserted_tokens: float, model_tokens: float) -> float:
    """``agent/env_token_frac``: Σ inserted / Σ (inserted + model) tokens after the prompt."""
    return inserted_tokens / max(inserted_tokens + model_tokens, 1.0)


def _environment_reward(
    prompts: list[str], completions: list[str], env_reward: list[float], **_: Any
) -> list[float]:
    """The environment's own rewards, summed over the row's steps (0.0 without any)."""
    return env_reward


# Scored with the configured rewards when an environment is set (weight 1 in the total);
# logged as reward/environment/… like any reward. Its column: TrajectoryBlock.env_reward.
ENVIRONMENT_REWARD = RewardFunction(name="environment", fn=_environment_reward)
