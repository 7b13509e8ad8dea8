"""What a run holds for its whole length: typed containers only, built by
:func:`~grpo.training.setup.set_up` and read by the stages (which import them from here,
never from one another)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from grpo.algo.advantages import AdvantageScale
from grpo.algo.objective import Objective
from grpo.data.dataset import PromptDataset
from grpo.data.sampler import PromptSampler
from grpo.log.metrics import MetricsLog
from grpo.log.progress import StepProgress
from grpo.rewards.runner import RewardFunction
from grpo.rollout.engine import RolloutEngine
from grpo.training.producers import Producer
from grpo.training.rounds import Generation
from grpo.training.runtime.optim import Optimization
from grpo.training.update.batch import Reference
from grpo.training.update.critic import Critic


@dataclass(frozen=True)
class Rollouts:
    """What a step generates and scores with: the producer, the rewards, the shaping."""

    producer: Producer
    engine: RolloutEngine  # the producer's; it gets the new weights after each update
    generator: torch.Generator  # the producer's sampling noise, saved with checkpoints
    rewards: list[RewardFunction]
    accuracy_reward: str | None  # the reward whose value ≥ 1 means a correct answer
    pad_token_id: int
    max_new_tokens: int
    overlong_buffer: int = 0  # DAPO's overlong shaping (algorithm.overlong_buffer); 0 = off
    overlong_penalty: float = 1.0
    self_correction: re.Pattern[str] | None = None  # train.self_correction_phrases


@dataclass
class Learner:
    """What the update stage trains and reads."""

    policy: nn.Module  # generation, evaluation and saving use it
    trained: nn.Module  # forward/backward run on it: DDP, FSDP2 or the policy itself
    optimization: Optimization
    objective: Objective
    reference: Reference
    critic: Critic | None  # PPO's value model; None for GRPO
    sequences_per_micro_batch: int
    lora: bool  # only adapters train; the final save also writes them alone
    share_prompt: bool = True  # groups run their prompt once in the policy/reference passes


@dataclass(frozen=True)
class LoopSettings:
    """The loop's own numbers, unpacked from the config once."""

    steps: int
    prompts_per_step: int
    group_size: int
    max_rounds: int  # generation rounds per step: 1 without dynamic sampling
    advantage_scale: AdvantageScale
    advantage_eps: float
    save_every: int  # 0: only the final save
    keep_checkpoints: int
    eval_every: int  # 0: held-out accuracy only before and after training
    max_consecutive_skips: int
    mask_truncated_completions: bool = False  # truncated rows stay out of the loss
    compile: bool = False  # train.compile: the training passes' decoders are compiled


class AsyncRollouts(Protocol):
    """Rollouts sampled by workers while the learner trains (rollout.mode = "async")."""

    def next_generation(self, step: int) -> tuple[Generation, dict[str, float]]: ...

    def after_update(self, step: int, policy: nn.Module) -> None: ...

    def take_metrics(self) -> dict[str, float]: ...

    def checkpoint_state(self) -> dict[str, object]: ...

    def close(self) -> None: ...


@dataclass
class Run:
    """A run's long-lived parts, built once by :func:`~grpo.training.setup.set_up`."""

    settings: LoopSettings
    run_dir: Path
    config_dict: dict[str, Any]  # the resolved config, saved with every checkpoint
    tokenizer: Any
    dataset: PromptDataset
    sampler: PromptSampler
    rollouts: Rollouts
    learner: Learner
    evaluate: Callable[[nn.Module], float] | None  # held-out greedy accuracy
    log: MetricsLog
    open_progress: Callable[[], StepProgress]  # the console display, opened as the loop starts
    start_step: int  # the checkpoint's step when resuming, else 0
    say: Callable[[str], None]  # a console line, on rank 0 when verbose
    feeder: AsyncRollouts | None = None  # rollout.mode = "async": the workers' rounds
