"""What the update trains on: the kept rows as a :class:`TrainBatch`, and how this process's
rows fit into a step split across processes (:class:`Shard`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from grpo.rollout.engine import Rollout


@dataclass
class TrainBatch:
    """The rows that train: groups with variance only. B rows, P prompt and T completion columns."""

    prompt_ids_BP: torch.Tensor
    prompt_mask_BP: torch.Tensor
    completion_ids_BT: torch.Tensor
    completion_mask_BT: torch.Tensor
    advantages_BT: torch.Tensor  # GRPO: A_i expanded along T (a view); PPO: GAE's A_it
    sampler_logp_BT: torch.Tensor
    # Multi-turn: 1 on every real completion-column token (environment tokens included);
    # completion_mask_BT, the loss mask, is 1 on the model's tokens only. None: single turn.
    attention_mask_BT: torch.Tensor | None = None

    @classmethod
    def of(cls, rollout: Rollout, advantages_B: torch.Tensor, keep_B: torch.Tensor) -> TrainBatch:
        """Rows ``keep_B`` of ``rollout``, each with its completion's advantage A_i."""
        completion_ids_BT = rollout.completion_ids_BT[keep_B]
        return cls(
            prompt_ids_BP=rollout.prompt_ids_BP[keep_B],
            prompt_mask_BP=rollout.prompt_mask_BP[keep_B],
            completion_ids_BT=completion_ids_BT,
            completion_mask_BT=rollout.completion_mask_BT[keep_B],
            advantages_BT=advantages_B[keep_B][:, None].expand(-1, completion_ids_BT.shape[1]),
            sampler_logp_BT=rollout.sampler_logp_BT[keep_B],
            attention_mask_BT=None
            if rollout.attention_mask_BT is None
            else rollout.attention_mask_BT[keep_B],
        )

    @property
    def rows(self) -> int:
        return self.completion_ids_BT.shape[0]

    def micro_batch(self, rows: slice) -> TrainBatch:
        """Rows ``rows`` with padding columns that no row of them uses trimmed away."""
        prompt_mask = self.prompt_mask_BP[rows]
        completion_mask = self.completion_mask_BT[rows]
        first_prompt_column = (
            int((prompt_mask.sum(dim=0) > 0).nonzero().min()) if prompt_mask.any() else 0
        )
        attention = None if self.attention_mask_BT is None else self.attention_mask_BT[rows]
        # Real tokens are contiguous from column 0 (right padding): the widest row's count.
        real = completion_mask if attention is None else attention
        completion_width = max(int(real.sum(dim=1).max()), 1)
        prompt_cols = slice(first_prompt_column, None)
        completion_cols = slice(0, completion_width)
        return TrainBatch(
            prompt_ids_BP=self.prompt_ids_BP[rows, prompt_cols],
            prompt_mask_BP=prompt_mask[:, prompt_cols],
            completion_ids_BT=self.completion_ids_BT[rows, completion_cols],
            completion_mask_BT=completion_mask[:, completion_cols],
            advantages_BT=self.advantages_BT[rows, completion_cols],
            sampler_logp_BT=self.sampler_logp_BT[rows, completion_cols],
            attention_mask_BT=None if attention is None else attention[:, completion_cols],
        )


def micro_slices(rows: int, sequences_per_micro_batch: int) -> list[slice]:
    """Consecutive row blocks of at most ``sequences_per_micro_batch`` rows."""
    return [
        slice(i, min(i + sequences_per_micro_batch, rows))
        for i in range(0, rows, sequences_per_micro_batch)
    ]


ReferenceContext = Callable[[], contextlib.AbstractContextManager]


@dataclass(frozen=True)
class Reference:
    """π_ref: a frozen ``model``, or (LoRA) the policy itself inside ``context``, which
    disables its adapters, so no second copy of the weights is held."""

    model: nn.Module | None = None
    context: ReferenceContext | None = None
