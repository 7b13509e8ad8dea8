"""The PPO clipped surrogate on token-level ratios, with GRPO's aggregation modes (pure)."""

from __future__ import annotations

from typing import Literal

import torch

Aggregation = Literal["sequence", "token", "constant"]
RatioLevel = Literal["token", "sequence"]


def aggregate(
    values_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    aggregation: Aggregation = "sequence",
    *,
    num_sequences: int | None = None,
    num_tokens: int | None = None,
    max_length: int | None = None,
) -> torch.Tensor:
    """Reduce per-token values to one scalar; ``mask_BT`` is 1 for tokens to keep.

    - ``"sequence"`` (GRPO's 1/|y_i|, Shao et al. 2024): (1/B) Σ_i (1/|y_i|) Σ_t v_it.
    - ``"token"`` (DAPO, Yu et al. 2025): Σ_it v_it / Σ_it m_it.
    - ``"constant"`` (Dr. GRPO, Liu et al. 2025): Σ_it v_it / (B · T), T the max length.

    For gradient accumulation pass the whole step's normalizers (``num_sequences`` = B,
    ``num_tokens`` = Σ m, ``max_length`` = T over every micro-batch of the step): the
    micro-batch sums then add up to exactly the full batch's value, and so does the gradient.

    Example (sequence: ((1 + 3)/2 + 2/1) / 2 = 2; token: (1 + 3 + 2)/3 = 2 as well):
        >>> aggregate(torch.tensor([[1.0, 3.0], [2.0, 0.0]]), torch.tensor([[1, 1], [1, 0]]))
        tensor(2.)
    """
    mask_BT = mask_BT.to(values_BT.dtype)
    masked_BT = values_BT * mask_BT
    if aggregation == "sequence":
        lengths_B = mask_BT.sum(dim=1).clamp(min=1.0)
        denominator = num_sequences if num_sequences is not None else values_BT.shape[0]
        return (masked_BT.sum(dim=1) / lengths_B).sum() / max(denominator, 1)
    if aggregation == "token":
        denominator = num_tokens if num_tokens is not None else mask_BT.sum()
        return masked_BT.sum() / max(denominator, 1)
    if aggregation == "constant":
        sequences = num_sequences if num_sequences is not None else values_BT.shape[0]
        length = max_length if max_length is not None else values_BT.shape[1]
        return masked_BT.sum() / max(sequences * length, 1)
    raise ValueError(f"aggregation must be 'sequence', 'token' or 'constant', got {aggregation!r}")


def sequence_ratio(
    logp_BT: torch.Tensor, old_logp_BT: torch.Tensor, mask_BT: torch.Tensor
) -> torch.Tensor:
    """GSPO's sequence ratio (Zheng et al. 2025, "Group Sequence Policy Optimization"):
    s_i = (π_θ(y_i)/π_old(y_i))^(1/|y_i|) = exp(Σ_t m_it (logp − old_logp) / Σ_t m_it), (B,).

    The mean runs over the completion's own tokens (the mask: padding and tokens the model
    did not write never count); an empty row reads 1. Its gradient is
    ∂s_i/∂logp_it = s_i · m_it / |y_i|.

    Example (log-ratios 0.2 and 0.4, the third token masked out: s = exp(0.3)):
        >>> logp, mask = torch.tensor([[0.2, 0.4, 9.0]]), torch.tensor([[1, 1, 0]])
        >>> sequence_ratio(logp, torch.zeros(1, 3), mask)
        tensor([1.3499])
    """
    mask_BT = mask_BT.to(logp_BT.dtype)
    lengths_B = mask_BT.sum(dim=1).clamp(min=1.0)
    return torch.exp(((logp_BT - old_logp_BT) * mask_BT).sum(dim=1) / lengths_B)


def policy_loss(
    logp_BT: torch.Tensor,
    old_logp_BT: torch.Tensor,
    advantages_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    aggregation: Aggregation = "sequence",
    num_sequences: int | None = None,
    num_tokens: int | None = None,
    max_length: int | None = None,
    ratio_level: RatioLevel = "token",
    weights_BT: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Negative GRPO clipped surrogate (Shao et al. 2024; PPO, Schulman et al. 2017).

    ρ_it = exp(logp_it − old_logp_it); the objective per token is
    min(ρ_it·A_it, clip(ρ_it, 1 − clip_low, 1 + clip_high)·A_it). ``advantages_BT`` holds
    per-token advantages (PPO's GAE makes them); GRPO's A_i, shared by every token of
    completion i, is that tensor expanded along T (a (B,) tensor is taken as such).
    loss = −aggregate(objective) (see :func:`aggregate` for the modes and the step-wide
    normalizers used under gradient accumulation).
    ``clip_high > clip_low`` gives DAPO's asymmetric "clip-higher".

    ``ratio_level = "sequence"`` is GSPO (Zheng et al. 2025): ρ_it is replaced by the
    sequence ratio s_i of :func:`sequence_ratio` for every token of completion i and
    clipped at the sequence level (pass GSPO's own clip range; the paper uses 3e-4 / 4e-4).
    Broadcast along T and aggregated as above, ``"sequence"`` aggregation gives the paper's
    (1/G) Σ_i min(s_i A_i, clip(s_i) A_i) exactly (TRL's ``importance_sampling_level``).
    ``weights_BT`` (no gradient), when given, multiplies the per-token objective before
    aggregation: the sampler corrections of :mod:`grpo.algo.corrections`.

    Returns ``(loss, stats)``; stats (detached, over kept tokens): ``clip_frac_low`` (A < 0
    and ρ < 1 − clip_low, the clip is active), ``clip_frac_high`` (A > 0 and ρ > 1 + clip_high),
    ``ratio_mean``, ``ratio_min``, ``ratio_max``.

    Example:
        >>> zeros, ones = torch.zeros(1, 2), torch.ones(1, 2)
        >>> loss, _ = policy_loss(zeros, zeros, torch.ones(1), ones)
        >>> loss  # ρ = 1 everywhere → objective = A = 1
        tensor(-1.)
    """
    ratio_BT = importance_ratio(logp_BT, old_logp_BT, mask_BT, ratio_level)
    advantages_BT = advantages_BT.to(ratio_BT.dtype)
    if advantages_BT.dim() == 1:
        advantages_BT = advantages_BT[:, None].expand_as(ratio_BT)
    unclipped_BT = ratio_BT * advantages_BT
    clipped_BT = ratio_BT.clamp(1.0 - clip_low, 1.0 + clip_high) * advantages_BT
    objective_BT = torch.minimum(unclipped_BT, clipped_BT)
    if weights_BT is not None:
        objective_BT = objective_BT * weights_BT.detach().to(objective_BT.dtype)
    loss = -aggregate(
        objective_BT,
        mask_BT,
        aggregation,
        num_sequences=num_sequences,
        num_tokens=num_tokens,
        max_length=max_length,
    )
    stats = clip_stats(ratio_BT, advantages_BT, mask_BT, clip_low, clip_high)
    return loss, stats


def importance_ratio(
    logp_BT: torch.Tensor, old_logp_BT: torch.Tensor, mask_BT: torch.Tensor, level: RatioLevel
) -> torch.Tensor:
    """ρ per token: ``"token"``, ρ_it = exp(logp_it − old_logp_it); ``"sequence"`` (GSPO),
    every token of completion i gets s_i of :func:`sequence_ratio`."""
    if level == "sequence":
        return sequence_ratio(logp_BT, old_logp_BT, mask_BT)[:, None].expand_as(logp_BT)
    if level == "token":
        return torch.exp(logp_BT - old_logp_BT)
    raise ValueError(f"ratio_level must be 'token' or 'sequence', got {level!r}")


@torch.no_grad()
def clip_stats(
    ratio_BT: torch.Tensor,
    advantages_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    clip_low: float,
    clip_high: float,
) -> dict[str, torch.Tensor]:
    """Where the clip is active, over the kept tokens (``mask_BT`` = 1), detached.

    ``clip_frac_low`` = #{A < 0 and ρ < 1 − clip_low} / #kept, ``clip_frac_high`` =
    #{A > 0 and ρ > 1 + clip_high} / #kept; ``ratio_mean``, ``ratio_min``, ``ratio_max`` of
    ρ over the kept tokens (1 when none is kept).

        >>> ratio, advantage = torch.tensor([[0.5, 1.5, 1.0]]), torch.tensor([[-1.0, 1.0, 1.0]])
        >>> stats = clip_stats(ratio, advantage, torch.ones(1, 3), 0.2, 0.2)
        >>> [round(float(stats[k]), 4) for k in ("clip_frac_low", "clip_frac_high", "ratio_mean")]
        [0.3333, 0.3333, 1.0]
    """
    keep_BT = mask_BT.bool()
    kept_tokens = keep_BT.sum().clamp(min=1)
    low_BT = (ratio_BT < 1.0 - clip_low) & (advantages_BT < 0) & keep_BT
    high_BT = (ratio_BT > 1.0 + clip_high) & (advantages_BT > 0) & keep_BT
    kept_ratios = ratio_BT[keep_BT]
    empty = kept_ratios.numel() == 0
    return {
        "clip_frac_low": low_BT.sum() / kept_tokens,
        "clip_frac_high": high_BT.sum() / kept_tokens,
        "ratio_mean": kept_ratios.mean() if not empty else ratio_BT.new_tensor(1.0),
        "ratio_min": kept_ratios.min() if not empty else ratio_BT.new_tensor(1.0),
        "ratio_max": kept_ratios.max() if not empty else ratio_BT.new_tensor(1.0),
    }
