"""A rollout worker's own state and what it does, whatever runs it (a local process or a
Ray actor): build its engine, producer and rewards from the config, load the weights the
learner syncs, and answer requests with scored rows tagged with its policy version.

Weights change only between requests (a worker handles its messages one at a time), so
every row of a result was sampled by one version.
"""

from __future__ import annotations

import dataclasses
import traceback
from dataclasses import dataclass

import torch
from torch import nn

from grpo.config import Config
from grpo.config.errors import UserCodeError, user_traceback
from grpo.data.dataset import load_dataset_for
from grpo.models.loading import load_policy, load_tokenizer, pick_device, trainable_spec
from grpo.models.weight_sync import load_synced
from grpo.rewards.resolve import resolve_reward_functions
from grpo.rewards.runner import RewardFunction
from grpo.rounds.build import build_round_maker
from grpo.rounds.source import RoundMaker, ScoredRows, produce_and_score
from grpo.rounds.workers.chunks import ChunkRequest, ChunkResult
from grpo.runtime.distributed import Dist


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker builds itself from (it travels to another process or machine).

    The config travels without ``train.run_dir``: a worker has no path into the run
    directory, whose one writer is the learner (it writes what the workers produce)."""

    config: Config
    reward_functions: list[RewardFunction] | None  # the Python API's, else the config's
    threads: int  # torch threads

    def __post_init__(self) -> None:
        train = dataclasses.replace(self.config.train, run_dir="")
        object.__setattr__(self, "config", dataclasses.replace(self.config, train=train))


@dataclass
class WorkerState:
    index: int
    maker: RoundMaker
    policy: nn.Module
    version: int = -1  # no weights from the learner yet


def build_worker(spec: WorkerSpec, index: int) -> WorkerState:
    """The worker's copy of the policy (the learner's weights arrive with the first sync),
    its engine, producer and rewards, as the learner would build them."""
    torch.set_num_threads(spec.threads)
    _quiet()
    config = spec.config
    device = pick_device(config.model.device)
    tokenizer = load_tokenizer(config.model.path, tokenizer_path=config.model.tokenizer_path)
    policy = load_policy(config.model.path, device, trainable_spec(config.model))
    rewards = spec.reward_functions
    if rewards is None:
        rewards = resolve_reward_functions(config.rewards, config.train.import_dirs)
    dataset = load_dataset_for(
        config.data.train_path, tokenizer, config.data, agent=config.agent.enabled
    )
    maker = build_round_maker(config, policy, tokenizer, dataset, rewards, device)
    return WorkerState(index, maker, policy)


def _quiet() -> None:
    """No progress bars or warnings from transformers in a worker: the learner's console is
    the run's; errors still reach the learner with their tracebacks."""
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def load_weights(state: WorkerState, weights: dict[str, torch.Tensor], version: int) -> None:
    """Take the learner's weights (all of them, or its trainable ones) as ``version``."""
    load_synced(state.policy, weights)
    state.maker.engine.sync_weights(state.policy)
    state.version = version


def serve(state: WorkerState, request: ChunkRequest) -> ChunkResult:
    """The request's rows, produced and scored, on CPU tensors ready to travel."""
    if state.version < 0:
        raise RuntimeError(f"rollout worker {state.index} got a request before any weights")
    generator = state.maker.generator
    if isinstance(request.noise, int):
        generator.manual_seed(request.noise)
    else:
        generator.set_state(request.noise)
    seconds = {"rollout": 0.0, "reward": 0.0}
    try:
        rows = produce_and_score(
            state.maker, request.indices, request.group_size, request.rows, Dist(), seconds
        )
    except UserCodeError as error:  # its traceback stays here: the learner gets its text
        error.frames, error.full_traceback = user_traceback(error), traceback.format_exc()
        raise
    return ChunkResult(
        request=request,
        rows=_on_cpu(rows),
        version=state.version,
        generator_state=generator.get_state(),
        worker=state.index,
        seconds=seconds,
    )


def _on_cpu(rows: ScoredRows) -> ScoredRows:
    rows.local_rollout = rows.local_rollout.to(torch.device("cpu"))
    return rows
