"""What a run holds for its whole length: typed containers only, built by
:func:`~grpo.training.setup.set_up` and read by the loop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from grpo.algo.advantages import AdvantageScale
from grpo.algo.objective import Objective
from grpo.data.dataset import PromptDataset
from grpo.data.sampler import PromptSampler
from grpo.log.metrics import MetricsLog
from grpo.log.progress import StepProgress
from grpo.rounds.source import RoundMaker, RoundSource
from grpo.runtime.optim import Optimization
from grpo.training.update.critic import Critic
from grpo.training.update.policy import Reference


@dataclass
class Learner:
    """What the update trains and reads."""

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


@dataclass
class Run:
    """A run's long-lived parts, built once by :func:`~grpo.training.setup.set_up`."""

    settings: LoopSettings
    run_dir: Path
    config_dict: dict[str, Any]  # the resolved config, saved with every checkpoint
    tokenizer: Any
    dataset: PromptDataset
    sampler: PromptSampler
    maker: RoundMaker  # what the rounds are made with (its engine, its noise generator)
    learner: Learner
    evaluate: Callable[[nn.Module], float] | None  # held-out greedy accuracy
    log: MetricsLog
    open_progress: Callable[[], StepProgress]  # the console display, opened as the loop starts
    start_step: int  # the checkpoint's step when resuming, else 0
    say: Callable[[str], None]  # a console line, on rank 0 when verbose
    source: RoundSource  # each step's scored rounds: SyncRounds, or AsyncRounds' workers
