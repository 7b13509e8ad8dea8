"""The rollout side built from the config, one builder for everyone who samples: training,
the asynchronous rollout workers and ``grpo eval``. The engine, how it samples, the producer
(single- or multi-turn) and what scores its rows, from the ``[rollout]``, ``[agent]`` and
reward keys."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch
from torch import nn

from grpo.agents.chat import ChatFormat
from grpo.agents.environment import resolve_environment
from grpo.agents.parser import get_parser
from grpo.agents.tools import resolve_tools, tool_schema
from grpo.agents.trajectories import AgentSettings
from grpo.config import AgentConfig, Config, DataConfig
from grpo.data.dataset import PromptDataset
from grpo.data.files import DataError
from grpo.eval.evaluate import run_accuracy_reward
from grpo.rewards.runner import RewardFunction
from grpo.rollout.engine import SamplingParams, decode_completions
from grpo.rollout.turns import TurnEngine
from grpo.rounds.engines import rollout_engine
from grpo.rounds.source import MultiTurn, Producer, RoundMaker, SingleTurn
from grpo.text.reasoning import phrase_pattern


def build_round_maker(
    config: Config,
    policy: nn.Module,
    tokenizer: Any,
    dataset: PromptDataset,
    rewards: list[RewardFunction],
    device: torch.device,
    all_agree: Callable[[bool], bool] | None = None,
) -> RoundMaker:
    """The producer on ``policy``, its engine and noise generator, and the rewards and
    shaping its rows are scored with. ``all_agree``: FSDP's lockstep (see
    :func:`~grpo.rounds.engines.rollout_engine`)."""
    rollout_cfg = config.rollout
    sampling = SamplingParams(
        temperature=rollout_cfg.temperature,
        top_p=rollout_cfg.top_p,
        top_k=rollout_cfg.top_k,
        max_new_tokens=rollout_cfg.max_new_tokens,
        stop_strings=tuple(rollout_cfg.stop_strings),
    )
    engine = rollout_engine(config, policy, tokenizer, all_agree)
    # The same seed in every process: the sampling noise is drawn for the whole step.
    generator = torch.Generator(device=device).manual_seed(config.train.seed)
    producer: Producer
    if config.agent.enabled:
        assert isinstance(engine, TurnEngine)  # both built-in engines sample turn by turn
        dirs = config.train.import_dirs
        settings = agent_settings(config.agent, tokenizer, config.data, import_dirs=dirs)
        producer = MultiTurn(engine, sampling, generator, dataset, settings)
    else:
        decode = partial(decode_completions, tokenizer)
        producer = SingleTurn(engine, sampling, generator, dataset, decode)
    accuracy = run_accuracy_reward(rewards, config.agent)  # maybe the environment's reward
    return RoundMaker(
        producer=producer,
        engine=engine,
        generator=generator,
        rewards=rewards,
        accuracy_reward=accuracy.name if accuracy is not None else None,
        pad_token_id=tokenizer.pad_token_id,
        max_new_tokens=rollout_cfg.max_new_tokens,
        overlong_buffer=config.algorithm.overlong_buffer,
        overlong_penalty=config.algorithm.overlong_penalty,
        self_correction=phrase_pattern(config.train.self_correction_phrases),
    )


def agent_settings(
    agent: AgentConfig,
    tokenizer: Any,
    data: DataConfig | None = None,
    *,
    import_dirs: Sequence[str],  # train.import_dirs: where tool and environment modules are
) -> AgentSettings:
    """The ``[agent]`` section resolved: tools imported and checked, the environment class.

    The conversation is rendered with the tokenizer's chat template when it has one. With
    ``data.chat_template`` it must have one (as for single-turn prompts), and
    ``data.system_prompt`` opens the conversation as a system message."""
    templated = data is not None and data.chat_template
    if templated and not getattr(tokenizer, "chat_template", None):
        raise DataError("data.chat_template is true but the tokenizer has no chat template")
    tools = resolve_tools(agent.tools, import_dirs)
    return AgentSettings(
        chat=ChatFormat(tokenizer, [tool_schema(fn) for fn in tools.values()]),
        tools=tools,
        parser=get_parser(agent.parser),
        environment=(
            resolve_environment(agent.environment, import_dirs) if agent.environment else None
        ),
        max_turns=agent.max_turns,
        max_tool_response_tokens=agent.max_tool_response_tokens,
        tool_timeout_s=agent.tool_timeout_s,
        env_timeout_s=agent.env_timeout_s,
        env_on_error=agent.env_on_error,
        tool_workers=agent.tool_workers,
        tool_isolation=agent.tool_isolation,
        system_prompt=data.system_prompt if data is not None and templated else "",
    )
