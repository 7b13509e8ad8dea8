"""Rollouts: G sampled completions per prompt, as token ids, masks and sampler log-probs.

The interface (:class:`RolloutEngine`) works on token ids so that engines are swappable
(the built-in transformers engine in ``grpo.rollout.hf_engine``; vLLM in
``grpo.rollout.vllm_engine``). Rows are grouped:
row b belongs to prompt b // G. An engine may be asked for a contiguous block of the rows
only (``rows``): that is how several processes split one step, a group possibly spanning two.

The built-in engine samples by inverse CDF from uniforms drawn up front for the *whole*
step, ``u[b, t]`` for every row b and position t, and uses its own rows' slice: a row's
tokens then depend on its global index only, not on how the rows are split across
processes or generation chunks, so 1 process and N processes roll out the same tokens.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    max_new_tokens: int = 256
    stop_strings: tuple[str, ...] = ()


@dataclass
class Rollout:
    """One step's completions. B = num_prompts · G rows, P prompt columns, T completion columns."""

    prompt_ids_BP: torch.Tensor  # left-padded
    prompt_mask_BP: torch.Tensor  # 1 = real prompt token
    completion_ids_BT: torch.Tensor  # right-padded
    completion_mask_BT: torch.Tensor  # 1 = real completion token, the EOS token included
    sampler_logp_BT: torch.Tensor  # log π_sampler(token): after τ and top-k/top-p; 0 on padding
    stopped_B: torch.Tensor  # True where the completion ended on EOS or a stop string
    # Multi-turn rollouts (grpo.agents): 1 on every real token of the completion columns,
    # the environment's inserted tokens included, while completion_mask_BT is 1 on the
    # model's own tokens only. None: the same as completion_mask_BT (single turn).
    attention_mask_BT: torch.Tensor | None = None

    @property
    def real_mask_BT(self) -> torch.Tensor:
        """1 on every real completion-column token: what the model attends to."""
        return self.completion_mask_BT if self.attention_mask_BT is None else self.attention_mask_BT

    @property
    def truncated_B(self) -> torch.Tensor:
        return ~self.stopped_B

    def to(self, device: torch.device | str) -> Rollout:
        """The same rows with every tensor on ``device`` (a rollout assembled on the host,
        moved to where the trainer's tensors live)."""
        tensors = {field.name: getattr(self, field.name) for field in fields(self)}
        return Rollout(**{k: None if v is None else v.to(device) for k, v in tensors.items()})


@dataclass(frozen=True)
class RolloutRequest:
    """Rows [start, stop) of a step's len(prompt_token_ids)·G rows; row b samples a
    completion of prompt b // G."""

    prompt_token_ids: list[list[int]]
    group_size: int
    params: SamplingParams
    generator: torch.Generator | None
    start: int
    stop: int

    @property
    def total_rows(self) -> int:
        return len(self.prompt_token_ids) * self.group_size

    @classmethod
    def block(
        cls,
        prompt_token_ids: list[list[int]],
        group_size: int,
        params: SamplingParams,
        generator: torch.Generator | None = None,
        rows: slice | None = None,
    ) -> RolloutRequest:
        """The rows ``rows`` of the len(prompts)·G (all if None); a ``ValueError`` unless
        they are a non-empty contiguous block."""
        start, stop = step_rows(len(prompt_token_ids), group_size, rows)
        return cls(prompt_token_ids, group_size, params, generator, start, stop)


class RolloutEngine(ABC):
    """Generates grouped completions on token ids; engines implement :meth:`generate_rows`."""

    def generate(
        self,
        prompt_token_ids: list[list[int]],
        group_size: int,
        params: SamplingParams,
        generator: torch.Generator | None = None,
        rows: slice | None = None,
    ) -> Rollout:
        """G completions for each prompt: the rows ``rows`` of the len(prompts)·G (all if None)."""
        request = RolloutRequest.block(prompt_token_ids, group_size, params, generator, rows)
        return self.generate_rows(request)

    @abstractmethod
    def generate_rows(self, request: RolloutRequest) -> Rollout:
        """The request's rows, as one :class:`Rollout`."""

    def sync_weights(self, model: nn.Module) -> None:  # noqa: B027 (optional to override)
        """Make the engine sample from ``model``'s current weights (no-op when it is the model)."""


def decode_completions(
    tokenizer: PreTrainedTokenizerBase, ids_BT: torch.Tensor, mask_BT: torch.Tensor
) -> list[str]:
    """Each row's completion tokens (its mask's count) as text, special tokens dropped."""
    lengths = mask_BT.sum(dim=1).tolist()
    rows = [row[:length] for row, length in zip(ids_BT.tolist(), lengths, strict=True)]
    return tokenizer.batch_decode(rows, skip_special_tokens=True)


def left_pad(sequences: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack token lists right-aligned: (ids_BP, mask_BP)."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        if seq:
            ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
            mask[row, width - len(seq) :] = 1
    return ids, mask


def step_rows(num_prompts: int, group_size: int, rows: slice | None) -> tuple[int, int]:
    """``rows`` as (start, stop) within the num_prompts·G rows of a step (all when None)."""
    total = num_prompts * group_size
    start, stop, stride = (rows or slice(None)).indices(total)
    if stride != 1 or start >= stop:
        raise ValueError(f"rows must be a non-empty contiguous block of the {total}, got {rows}")
    return start, stop


def sampling_noise(
    rows: int, positions: int, generator: torch.Generator | None, device: torch.device
) -> torch.Tensor:
    """Uniforms u[b, t] in [0, 1) for every row and position of a step, from ``generator``."""
    noise_device = generator.device if generator is not None else device
    return torch.rand((rows, positions), generator=generator, device=noise_device).to(device)


def sample_from_uniform(probs_BV: torch.Tensor, u_B: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling: the first token v with Σ_{w ≤ v} p_w > u · Σ_w p_w.

    Exact sampling from ``probs_BV`` (unnormalised, zeros allowed) given u ~ U[0, 1); a token
    of probability 0 (filtered out by top-k/top-p) is never picked.
    """
    cdf_BV = probs_BV.float().cumsum(dim=-1)
    total_B1 = cdf_BV[:, -1:]
    # Strictly below the total, so some cumulative value exceeds it even after rounding.
    target_B1 = torch.minimum(
        u_B[:, None] * total_B1, torch.nextafter(total_B1, torch.zeros_like(total_B1))
    )
    token_B = torch.searchsorted(cdf_BV, target_B1, right=True).squeeze(1)
    token_B = token_B.clamp(max=probs_BV.shape[-1] - 1)
    # The cumulative sum does not rise at a zero; a parallel scan's rounding could still
    # make it look so on a GPU: such a pick falls back to the most likely token.
    picked_B = probs_BV.gather(1, token_B[:, None]).squeeze(1)
    kept_B = picked_B > 0
    # On a CPU a look from the host is free, and a full-vocabulary argmax is not.
    if probs_BV.device.type == "cpu" and not torch.compiler.is_compiling() and bool(kept_B.all()):
        return token_B
    return torch.where(kept_B, token_B, probs_BV.argmax(dim=-1))


def filter_logits(logits_BV: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set logits outside the top-k and outside the top-p nucleus to −inf."""
    if top_k > 0 and top_k < logits_BV.shape[-1]:
        kth_BV = torch.topk(logits_BV, top_k, dim=-1).values[:, -1:]
        logits_BV = logits_BV.masked_fill(logits_BV < kth_BV, float("-inf"))
    if top_p < 1.0:
        sorted_BV, order_BV = torch.sort(logits_BV, dim=-1, descending=True)
        cumulative_BV = sorted_BV.softmax(dim=-1).cumsum(dim=-1)
        # Drop a token when the mass before it already reaches top_p; the first always stays.
        drop_sorted_BV = (cumulative_BV - sorted_BV.softmax(dim=-1)) >= top_p
        drop_BV = drop_sorted_BV.scatter(-1, order_BV, drop_sorted_BV)
        logits_BV = logits_BV.masked_fill(drop_BV, float("-inf"))
    return logits_BV


def _pad_columns(tensor_BX: torch.Tensor, width: int, value: float, left: bool) -> torch.Tensor:
    missing = width - tensor_BX.shape[1]
    if missing == 0:
        return tensor_BX
    padding = (missing, 0) if left else (0, missing)
    return torch.nn.functional.pad(tensor_BX, padding, value=value)


def concat_rollouts(rollouts: list[Rollout], pad_token_id: int) -> Rollout:
    """Stack rollouts row-wise; prompts stay left-padded and completions right-padded."""
    if len(rollouts) == 1:
        return rollouts[0]
    prompt_width = max(r.prompt_ids_BP.shape[1] for r in rollouts)
    completion_width = max(r.completion_ids_BT.shape[1] for r in rollouts)

    def stack(name: str, width: int, value: float, left: bool) -> torch.Tensor:
        return torch.cat([_pad_columns(getattr(r, name), width, value, left) for r in rollouts])

    multi_turn = any(r.attention_mask_BT is not None for r in rollouts)
    attention_mask_BT = (
        torch.cat([_pad_columns(r.real_mask_BT, completion_width, 0, False) for r in rollouts])
        if multi_turn
        else None
    )

    return Rollout(
        prompt_ids_BP=stack("prompt_ids_BP", prompt_width, pad_token_id, True),
        prompt_mask_BP=stack("prompt_mask_BP", prompt_width, 0, True),
        completion_ids_BT=stack("completion_ids_BT", completion_width, pad_token_id, False),
        completion_mask_BT=stack("completion_mask_BT", completion_width, 0, False),
        sampler_logp_BT=stack("sampler_logp_BT", completion_width, 0.0, False),
        stopped_B=torch.cat([r.stopped_B for r in rollouts]),
        attention_mask_BT=attention_mask_BT,
    )


def next_token(
    logits_BV: torch.Tensor, noise_B: torch.Tensor | None, params: SamplingParams
) -> tuple[torch.Tensor, torch.Tensor]:
    """(token_B, logp_B): greedy without noise (evaluation), else inverse-CDF sampling at
    temperature τ under top-k/top-p. logp_B is the token's log-probability under the
    distribution actually sampled from, log softmax of the filtered logits / τ (renormalised
    over the kept tokens, as vLLM's processed log-probs): with top-p/top-k it differs from
    the trainer's log softmax(logits / τ), the mismatch ``algorithm.sampler_correction`` sees.

    It is ``z_token − logsumexp(z)``: no full-vocabulary log-softmax is materialised beside
    the softmax sampling needs (equal to ``log_softmax(z)[token]`` up to reassociation)."""
    if noise_B is None:
        scores_BV = logits_BV.float()
        token_B = scores_BV.argmax(dim=-1)
    else:
        scaled_BV = logits_BV.float()
        if params.temperature != 1.0:  # z / 1 is z, bit for bit: one pass over V saved
            scaled_BV = scaled_BV / params.temperature
        scores_BV = filter_logits(scaled_BV, params.top_k, params.top_p)  # scaled_BV when off
        token_B = sample_from_uniform(scores_BV.softmax(dim=-1), noise_B)
    picked_B = scores_BV.gather(1, token_B[:, None]).squeeze(1)
    return token_B, picked_B - torch.logsumexp(scores_BV, dim=-1)
