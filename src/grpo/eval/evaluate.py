"""Evaluation: greedy accuracy, and pass@k from sampled completions (``grpo eval``).

A completion is correct when the correctness reward (``eval.reward``, else the run's
accuracy reward: :func:`run_accuracy_reward`) scores it ≥ 1. With agent settings (the
``[agent]`` section) each completion is a multi-turn trajectory (:mod:`grpo.agents.trajectories`):
the model's turns are the completion, rewards also get the conversation, an environment's
own reward is scored as ``environment``, and the agent metrics (``agent/*``) are reported.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn

from grpo.agents.trajectories import ENVIRONMENT_REWARD, AgentSettings, run_trajectories
from grpo.algo.curriculum import is_correct
from grpo.algo.groups import rows_of
from grpo.config.errors import ConfigError
from grpo.config.sections import AgentConfig
from grpo.data.dataset import PromptDataset
from grpo.eval.report import EvalReport
from grpo.models.loading import eos_token_ids
from grpo.rewards.resolve import accuracy_reward, resolve_function
from grpo.rewards.runner import RewardFunction, score_completions
from grpo.rollout.engine import RolloutEngine, SamplingParams, decode_completions
from grpo.rollout.hf_engine import TransformersEngine
from grpo.rollout.turns import TurnEngine


def greedy_completions(
    model: nn.Module,
    tokenizer: Any,
    prompt_token_ids: list[list[int]],
    *,
    max_new_tokens: int,
    batch_size: int = 256,
    all_done: Callable[[bool], bool] | None = None,
) -> list[str]:
    """Greedy completions as text; ``all_done`` keeps FSDP processes decoding in lockstep."""
    engine = TransformersEngine(
        model,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids=eos_token_ids(model, tokenizer),
        max_sequences_per_batch=batch_size,
        all_done=all_done,
    )
    greedy = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    rollout = engine.generate(prompt_token_ids, 1, greedy)
    return decode_completions(tokenizer, rollout.completion_ids_BT, rollout.completion_mask_BT)


@torch.no_grad()
def greedy_accuracy(
    model: nn.Module,
    tokenizer: Any,
    dataset: PromptDataset,
    reward: RewardFunction,
    *,
    max_new_tokens: int,
    all_done: Callable[[bool], bool] | None = None,
    agent: AgentSettings | None = None,
    stop_strings: Sequence[str] = (),
) -> float:
    """Mean over prompts of [reward(greedy completion) ≥ 1]; with ``agent``, of greedy
    multi-turn trajectories (``max_new_tokens`` per turn, turns ended by ``stop_strings``).

    The held-out evaluation during training: under several processes each evaluates the
    whole set (same prompts, same result), so none waits for another; under FSDP
    ``all_done`` keeps them decoding in lockstep, since every forward pass gathers
    parameters from all of them."""
    if agent is not None:
        engine = _engine(model, tokenizer, 256)
        greedy = SamplingParams(
            0.0, max_new_tokens=max_new_tokens, stop_strings=tuple(stop_strings)
        )
        samples = _sample(engine, tokenizer, dataset, 1, greedy, None, agent)
        return _score([], reward, dataset, samples, 1)[1].float().mean().item()
    completions = greedy_completions(
        model, tokenizer, dataset.prompt_token_ids, max_new_tokens=max_new_tokens, all_done=all_done
    )
    scores = score_completions([reward], dataset.prompts, completions, dataset.columns)
    return is_correct(scores.per_function[reward.name]).float().mean().item()


def run_accuracy_reward(
    rewards: Sequence[RewardFunction], agent: AgentConfig
) -> RewardFunction | None:
    """What a run's accuracy is measured by (a value ≥ 1 is correct), in training and in
    ``grpo eval`` alike: the environment's reward (summed over its steps) when
    ``agent.environment_accuracy`` is set or when it is the only reward (no ``[[rewards]]``),
    else the accuracy reward (:func:`~grpo.rewards.resolve.accuracy_reward`), else None."""
    if agent.environment_accuracy and not agent.environment:
        raise ConfigError("agent.environment_accuracy needs an agent.environment")
    if agent.environment and (agent.environment_accuracy or not rewards):
        marked = [f.name for f in rewards if f.accuracy]
        if marked:
            raise ConfigError(
                f"agent.environment_accuracy: reward {marked[0]!r} already sets accuracy = true"
                " (one reward is the accuracy)"
            )
        return ENVIRONMENT_REWARD
    return accuracy_reward(rewards)


def correctness_reward(
    eval_reward: str,
    rewards: list[RewardFunction],
    agent: AgentConfig | None = None,
    import_dirs: Sequence[str] = (),
) -> RewardFunction:
    """``eval_reward`` ("module:function", looked for in ``import_dirs`` first) when set,
    else the run's accuracy reward (:func:`run_accuracy_reward`: with ``agent``, possibly
    the environment's reward)."""
    if eval_reward:
        fn = resolve_function(eval_reward, import_dirs, "eval.reward")
        return RewardFunction(name=eval_reward, fn=fn)
    reward = run_accuracy_reward(rewards, agent or AgentConfig())
    if reward is None:
        raise ConfigError(
            "no reward is an accuracy reward: set accuracy = true on one [[rewards]] table"
            " (or agent.environment_accuracy = true, or eval.reward = 'module:function')"
        )
    return reward


# --- pass@k ----------------------------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass@k from ``n`` samples of which ``c`` are correct.

    pass@k = 1 − C(n − c, k) / C(n, k): the probability that k samples drawn without
    replacement from the n include a correct one (Chen et al. 2021, "Evaluating Large
    Language Models Trained on Code"). Exact integer binomials; C(n − c, k) = 0 when
    n − c < k, so then pass@k = 1.

    >>> pass_at_k(4, 1, 2)  # 1 − C(3, 2)/C(4, 2) = 1 − 3/6
    0.5
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 ≤ c ≤ n, got n = {n}, c = {c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs 1 ≤ k ≤ n samples per prompt, got n = {n}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _engine(model: nn.Module, tokenizer: Any, batch_size: int) -> TransformersEngine:
    """The built-in engine on ``model``, able to end turns on stop strings."""
    return TransformersEngine(
        model,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids=eos_token_ids(model, tokenizer),
        decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
        max_sequences_per_batch=batch_size,
    )


@dataclass
class _Samples:
    """``per_prompt`` completions of every prompt, in prompt order."""

    completions: list[str]
    columns: dict[str, list[Any]] = field(default_factory=dict)  # multi-turn: conversation, …
    metrics: dict[str, float] = field(default_factory=dict)  # multi-turn: agent/*
    failed: list[bool] = field(default_factory=list)  # multi-turn: the environment failed


def _sample(
    engine: RolloutEngine | TurnEngine,
    tokenizer: Any,
    dataset: PromptDataset,
    per_prompt: int,
    params: SamplingParams,
    generator: torch.Generator | None,
    agent: AgentSettings | None,
) -> _Samples:
    """Single-turn completions, or multi-turn trajectories when ``agent`` is set."""
    if agent is None:
        if not isinstance(engine, RolloutEngine):
            raise TypeError(f"{type(engine).__name__} samples turns only; eval without [agent]")
        rollout = engine.generate(dataset.prompt_token_ids, per_prompt, params, generator)
        ids_BT, mask_BT = rollout.completion_ids_BT, rollout.completion_mask_BT
        return _Samples(decode_completions(tokenizer, ids_BT, mask_BT))
    records = [
        {"prompt": prompt, **{name: values[i] for name, values in dataset.columns.items()}}
        for i, prompt in enumerate(dataset.prompts)
    ]
    rows = range(len(records) * per_prompt)
    if not isinstance(engine, TurnEngine):
        raise TypeError(f"{type(engine).__name__} cannot sample turn by turn for [agent]")
    names = [dataset.where(i) for i in range(len(records))]
    result = run_trajectories(engine, records, per_prompt, params, generator, rows, agent, names)
    return _Samples(result.completions, result.columns, result.metrics, result.failed)


def _score(
    rewards: Sequence[RewardFunction],
    correct: RewardFunction,
    dataset: PromptDataset,
    samples: _Samples,
    per_prompt: int,
) -> tuple[dict[str, float], torch.Tensor]:
    """Per-reward means and the correct flags of ``per_prompt`` completions per prompt."""
    functions = list(rewards) + ([] if correct in rewards else [correct])
    columns = {name: rows_of(values, per_prompt) for name, values in dataset.columns.items()}
    prompts = rows_of(dataset.prompts, per_prompt)
    scores = score_completions(functions, prompts, samples.completions, columns | samples.columns)
    means = {f.name: scores.per_function[f.name].mean().item() for f in rewards}
    correct_B = is_correct(scores.per_function[correct.name])
    if samples.failed:  # a trajectory whose environment failed is never correct
        correct_B &= ~torch.tensor(samples.failed, dtype=torch.bool)
    return means, correct_B


@torch.no_grad()
def evaluate_model(
    model: nn.Module | None,
    tokenizer: Any,
    dataset: PromptDataset,
    rewards: Sequence[RewardFunction],
    correct: RewardFunction,
    *,
    max_new_tokens: int,
    samples: int = 0,
    ks: Sequence[int] = (),
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    seed: int = 0,
    batch_size: int = 256,
    agent: AgentSettings | None = None,
    stop_strings: Sequence[str] = (),
    engine: RolloutEngine | TurnEngine | None = None,
) -> EvalReport:
    """Greedy pass@1 and per-reward means; with ``samples`` = n > 0, also n sampled
    completions per prompt, the unbiased pass@k for each k in ``ks`` and their means.
    With ``agent``, multi-turn trajectories (``max_new_tokens`` per turn) and their
    agent metrics. ``engine``: what samples (default: the built-in engine on ``model``)."""
    for k in ks if samples > 0 else ():
        if not 1 <= k <= samples:
            raise ValueError(f"pass@{k} needs 1 ≤ k ≤ samples = {samples}")
    engine = engine or _engine(model, tokenizer, batch_size)
    if agent is not None and agent.environment is not None:
        rewards = [*rewards, ENVIRONMENT_REWARD]
    greedy = SamplingParams(0.0, max_new_tokens=max_new_tokens, stop_strings=tuple(stop_strings))
    greedy_samples = _sample(engine, tokenizer, dataset, 1, greedy, None, agent)
    greedy_means, greedy_correct = _score(rewards, correct, dataset, greedy_samples, 1)
    report = EvalReport(
        source=dataset.source,
        correct_reward=correct.name,
        greedy_correct=greedy_correct.tolist(),
        greedy_reward_means=greedy_means,
        samples=samples,
        temperature=temperature,
        greedy_agent_metrics=greedy_samples.metrics,
    )
    if samples <= 0:
        return report
    params = replace(greedy, temperature=temperature, top_p=top_p, top_k=top_k)
    device = next(model.parameters()).device if model is not None else "cpu"
    generator = torch.Generator(device=device).manual_seed(seed)
    sampled = _sample(engine, tokenizer, dataset, samples, params, generator, agent)
    report.sampled_reward_means, correct_B = _score(rewards, correct, dataset, sampled, samples)
    report.sampled_agent_metrics = sampled.metrics
    report.sample_correct_counts = correct_B.view(-1, samples).sum(dim=1).tolist()
    for k in ks:
        per_prompt = [pass_at_k(samples, c, k) for c in report.sample_correct_counts]
        report.pass_at[k] = sum(per_prompt) / len(per_prompt)
    return report
