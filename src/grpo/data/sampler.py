"""Which prompts each step trains on: :class:`PromptSampler`, resumable from a checkpoint."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from grpo.data.difficulty import DifficultyKeys, PoolSettings, draw_pooled, estimated_success
from grpo.data.prompt_stats import PromptStats, draw_prompts


@dataclass(frozen=True)
class CurriculumSettings:
    """The ``[curriculum]`` keys a draw reads, unpacked at the edge (same names, same
    defaults); ``enabled`` false keeps the epoch-wise order."""

    enabled: bool = False
    strength: float = 1.0  # exponent k on the weights
    prior_successes: float = 1.0  # α₀ of the Beta(α₀, β₀) prior
    prior_failures: float = 1.0  # β₀
    max_prior_weight: float = 20.0  # cap on a pooled key prior's pseudo-counts
    prescreen_threshold: float = 0.0  # skip prompts with P(mixed) below this
    exploration: float = 0.1  # share of a pooled draw taken uniformly
    half_life_steps: float = 0.0  # the statistics' half-life (0 = never forget), in every mode


@dataclass
class PromptSampler:
    """Epoch-wise shuffled indices with a resumable cursor (epoch, position), or, with a
    curriculum, draws weighted by each prompt's E[p(1 − p)] (see ``grpo.data.prompt_stats``).

    Per-prompt statistics (``stats``, filled by the trainer) are kept in every mode; all
    state, statistics included, is in :meth:`state_dict` and so in checkpoints. With
    difficulty ``keys`` (``curriculum.pool_by``) the curriculum draws by pooled estimates
    instead (see ``grpo.data.difficulty``); ``draw_metrics`` are the last draw's.
    """

    size: int
    seed: int
    shuffle: bool = True
    epoch: int = 0
    position: int = 0
    curriculum: CurriculumSettings = field(default_factory=CurriculumSettings)
    draws: int = 0  # curriculum draws so far: each seeds its own generator (resumable)
    keys: DifficultyKeys | None = None  # pooled difficulty keys (curriculum.pool_by)
    group_size: int = 8  # G, for the chance that a prompt's group is mixed
    stats: PromptStats = field(init=False)
    draw_metrics: dict[str, float] = field(default_factory=dict)
    _order: list[int] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self.stats = PromptStats.empty(self.size, self.curriculum.half_life_steps)

    def next_indices(self, count: int) -> list[int]:
        if self.curriculum.enabled and self.keys is not None:
            self.draws += 1
            curriculum = self.curriculum
            settings = PoolSettings(
                self.group_size,
                curriculum.strength,
                curriculum.max_prior_weight,
                curriculum.prescreen_threshold,
                curriculum.exploration,
            )
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.draws)
            picked, self.draw_metrics = draw_pooled(
                self.stats, self.keys, count, settings, generator
            )
            return picked
        if self.curriculum.enabled:
            self.draws += 1
            return draw_prompts(
                self.stats,
                count,
                strength=self.curriculum.strength,
                prior_successes=self.curriculum.prior_successes,
                prior_failures=self.curriculum.prior_failures,
                generator=torch.Generator().manual_seed(self.seed * 1_000_003 + self.draws),
            )
        picked = []
        while len(picked) < count:
            if not self._order:
                self._order = self._epoch_order()
            if self.position >= self.size:
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._epoch_order()
            take = min(count - len(picked), self.size - self.position)
            picked.extend(self._order[self.position : self.position + take])
            self.position += take
        return picked

    def estimated_success(self, indices: list[int]) -> list[float]:
        """The prompts' posterior-mean success rates from what the run has seen so far."""
        curriculum = self.curriculum
        return estimated_success(
            self.stats,
            self.keys,
            indices,
            (curriculum.prior_successes, curriculum.prior_failures),
            curriculum.max_prior_weight,
        )

    def _epoch_order(self) -> list[int]:
        if not self.shuffle:
            return list(range(self.size))
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return torch.randperm(self.size, generator=generator).tolist()

    def state_dict(self) -> dict[str, Any]:
        """The data cursor and per-prompt statistics; a checkpoint saves whatever this
        returns (nested dicts and lists of numbers, strings and tensors) and hands it back
        to ``load_state_dict``."""
        return {
            "epoch": self.epoch,
            "position": self.position,
            "draws": self.draws,
            "stats": self.stats.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.position = state["epoch"], state["position"]
        self.draws = state.get("draws", 0)  # checkpoints from before the curriculum lack these
        if "stats" in state:
            self.stats.load_state_dict(state["stats"])
        self._order = self._epoch_order()
