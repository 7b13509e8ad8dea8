"""Corrections for the sampler/trainer mismatch (pure tensor functions).

The completions are drawn from the sampler π_s (vLLM's kernels and precision, a top-p/top-k
truncated distribution), while the loss is written for π_old, the trainer's own log-probs
of the same weights. The per-token ratio r_t = π_old(y_t) / π_s(y_t) measures the gap; each
correction turns it into a weight w (no gradient) that multiplies the per-token surrogate:

- ``"tis"``, truncated IS (Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You
  Off-Policy RL Training"; TRL ``vllm_importance_sampling_mode = "token_truncate"``, verl
  ``rollout_is = "token"``): w_t = min(r_t, C).
- ``"mis"``, masked IS (IcePop, Ling Team 2025; verl ``rollout_rs = "token"``):
  w_t = r_t · 1[lo ≤ r_t ≤ hi].
- ``"seq_mis"``, sequence-level masked IS (TRL ``"sequence_mask"``; verl
  ``rollout_rs = "sequence"``): R_i = Π_t r_t, w_it = R_i · 1[lo ≤ R_i ≤ hi] for every t.
- ``"geo_mask"``, the geometric-mean sequence mask (SkyRL; verl ``rollout_rs =
  "geometric"``): g_i = exp(mean_t log r_t), w_it = 1[lo ≤ g_i ≤ hi] (a rejection, no weight).

Masked tokens contribute 0 but still count in the loss's normalizer (as in TRL), so the
step-wide normalizers, and with them gradient accumulation, are unchanged. Means over a
completion use its mask: tokens the model did not write (padding, tool output) never count.
Log-ratios are clamped to ±20 before ``exp`` so one wild token cannot overflow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

SamplerCorrection = Literal["none", "tis", "mis", "seq_mis", "geo_mask"]
LOG_RATIO_CLAMP = 20.0


@dataclass(frozen=True)
class CorrectionSettings:
    """Which correction, and its thresholds (defaults: verl's TIS threshold 2, verl's token
    rejection band [0.5, 2], SkyRL's geometric band [0.99, 1.01])."""

    mode: SamplerCorrection = "none"
    is_cap: float = 2.0  # C of TIS
    mask_low: float = 0.5  # [lo, hi] of mis / seq_mis
    mask_high: float = 2.0
    geo_low: float = 0.99  # [lo, hi] of geo_mask
    geo_high: float = 1.01


@dataclass(frozen=True)
class Correction:
    """The weights to apply and the ratio they came from (B rows, T completion positions)."""

    weights_BT: torch.Tensor  # w_it, 0 on padding
    ratio_BT: torch.Tensor  # the ratio the mode acts on (token r_t, or R_i / g_i along T)


def token_ratio(
    old_logp_BT: torch.Tensor, sampler_logp_BT: torch.Tensor, mask_BT: torch.Tensor
) -> torch.Tensor:
    """r_t = π_old(y_t) / π_s(y_t) = exp(old_logp − sampler_logp); 1 where the mask is 0.

    Example:
        >>> token_ratio(torch.tensor([[0.0, -1.0]]), torch.tensor([[0.0, -2.0]]), torch.ones(1, 2))
        tensor([[1.0000, 2.7183]])
    """
    log_ratio_BT = (old_logp_BT - sampler_logp_BT).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return torch.where(mask_BT.bool(), log_ratio_BT.exp(), torch.ones_like(log_ratio_BT))


def truncated_is_weights(ratio_BT: torch.Tensor, cap: float) -> torch.Tensor:
    """TIS (Yao et al. 2025): w_t = min(r_t, C); the weight is bounded by C.

    Example:
        >>> truncated_is_weights(torch.tensor([0.5, 1.0, 2.0, 7.0]), cap=2.0)
        tensor([0.5000, 1.0000, 2.0000, 2.0000])
    """
    return ratio_BT.clamp(max=cap)


def masked_is_weights(ratio: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Masked IS (IcePop, Ling Team 2025): w = r · 1[lo ≤ r ≤ hi], both ends kept.

    Works per token (r_t) and per sequence (R_i). Example:
        >>> masked_is_weights(torch.tensor([0.49, 0.5, 1.2, 2.0, 2.01]), 0.5, 2.0)
        tensor([0.0000, 0.5000, 1.2000, 2.0000, 0.0000])
    """
    inside = (ratio >= low) & (ratio <= high)
    return torch.where(inside, ratio, torch.zeros_like(ratio))


def sequence_log_ratio(
    old_logp_BT: torch.Tensor, sampler_logp_BT: torch.Tensor, mask_BT: torch.Tensor
) -> torch.Tensor:
    """log R_i = Σ_t m_it (old_logp − sampler_logp): the whole completion's log-ratio (B,)."""
    return ((old_logp_BT - sampler_logp_BT) * mask_BT.to(old_logp_BT.dtype)).sum(dim=1)


def geometric_mean_ratio(
    old_logp_BT: torch.Tensor, sampler_logp_BT: torch.Tensor, mask_BT: torch.Tensor
) -> torch.Tensor:
    """g_i = exp(Σ_t m_it log r_it / Σ_t m_it), the per-token geometric mean (B,); 1 when empty.

    Example (log-ratios 0.2 and 0, the third token masked out: g = exp(0.1)):
        >>> old, sampler = torch.tensor([[0.2, 0.0, 5.0]]), torch.zeros(1, 3)
        >>> geometric_mean_ratio(old, sampler, torch.tensor([[1, 1, 0]]))
        tensor([1.1052])
    """
    mask = mask_BT.to(old_logp_BT.dtype)
    mean_log_B = sequence_log_ratio(old_logp_BT, sampler_logp_BT, mask_BT) / mask.sum(1).clamp(
        min=1.0
    )
    return mean_log_B.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()


def geometric_sequence_mask(geo_ratio_B: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """SkyRL's geometric mask: 1[lo ≤ g_i ≤ hi] (float, B), a rejection with no IS weight.

    Example:
        >>> geometric_sequence_mask(torch.tensor([0.98, 0.99, 1.0, 1.01, 1.02]), 0.99, 1.01)
        tensor([0., 1., 1., 1., 0.])
    """
    return ((geo_ratio_B >= low) & (geo_ratio_B <= high)).to(geo_ratio_B.dtype)


def sampler_kl_k3(ratio_BT: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(π_s ‖ π_old) from tokens sampled by π_s (Schulman 2020):
    with r = π_old/π_s, k3 = r − 1 − log r ≥ 0 (0 where the two agree).

    Example:
        >>> sampler_kl_k3(torch.tensor([1.0, math.e]))
        tensor([0.0000, 0.7183])
    """
    return ratio_BT - 1.0 - ratio_BT.log()


def sampler_correction(
    old_logp_BT: torch.Tensor,
    sampler_logp_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    settings: CorrectionSettings,
) -> Correction:
    """The weights of ``settings.mode`` (see the module docstring), detached, 0 on padding."""
    old_logp_BT, sampler_logp_BT = old_logp_BT.detach(), sampler_logp_BT.to(old_logp_BT)
    keep_BT = mask_BT.to(old_logp_BT.dtype)
    mode = settings.mode
    if mode in ("none", "tis", "mis"):
        ratio_BT = token_ratio(old_logp_BT, sampler_logp_BT, mask_BT)
        if mode == "tis":
            weights_BT = truncated_is_weights(ratio_BT, settings.is_cap)
        elif mode == "mis":
            weights_BT = masked_is_weights(ratio_BT, settings.mask_low, settings.mask_high)
        else:
            weights_BT = torch.ones_like(ratio_BT)
    elif mode == "seq_mis":
        log_ratio_B = sequence_log_ratio(old_logp_BT, sampler_logp_BT, mask_BT)
        ratio_B = log_ratio_B.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()
        # The band is tested on the unclamped log-ratio, so clamping never lets a sequence in.
        low, high = math.log(max(settings.mask_low, 1e-300)), math.log(settings.mask_high)
        inside_B = (log_ratio_B >= low) & (log_ratio_B <= high)
        ratio_BT = ratio_B[:, None].expand_as(old_logp_BT)
        weights_BT = torch.where(inside_B, ratio_B, torch.zeros_like(ratio_B))[:, None]
        weights_BT = weights_BT.expand_as(old_logp_BT)
    elif mode == "geo_mask":
        geo_B = geometric_mean_ratio(old_logp_BT, sampler_logp_BT, mask_BT)
        ratio_BT = geo_B[:, None].expand_as(old_logp_BT)
        weights_BT = geometric_sequence_mask(geo_B, settings.geo_low, settings.geo_high)[:, None]
        weights_BT = weights_BT.expand_as(old_logp_BT)
    else:
        raise ValueError(
            f"sampler correction must be one of none, tis, mis, seq_mis, geo_mask, got {mode!r}"
        )
    return Correction(weights_BT=weights_BT * keep_BT, ratio_BT=ratio_BT)


def correction_sums(
    correction: Correction,
    old_logp_BT: torch.Tensor,
    sampler_logp_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    settings: CorrectionSettings,
) -> dict[str, float]:
    """Statistics over the kept tokens, as sums (divide by the step's token count) and
    extremes, so they add up over micro-batches and processes: the sampler-vs-trainer k3 KL,
    the ratio before and the weight after truncation/masking, the tokens masked (w = 0) and
    capped (TIS: r > C)."""
    keep_BT = mask_BT.bool()
    if not keep_BT.any():
        return {}
    token_ratio_BT = token_ratio(old_logp_BT.detach(), sampler_logp_BT.to(old_logp_BT), mask_BT)
    ratio_K, weight_K = correction.ratio_BT[keep_BT], correction.weights_BT[keep_BT]
    return {
        "sampler/kl_k3": float(sampler_kl_k3(token_ratio_BT[keep_BT]).sum()),
        "sampler/is_ratio_mean": float(ratio_K.sum()),
        "sampler/is_ratio_min": float(ratio_K.min()),
        "sampler/is_ratio_max": float(ratio_K.max()),
        "sampler/is_weight_mean": float(weight_K.sum()),
        "sampler/is_weight_min": float(weight_K.min()),
        "sampler/is_weight_max": float(weight_K.max()),
        "sampler/masked_frac": float((weight_K == 0).sum()),
        "sampler/capped_frac": (
            float((ratio_K > settings.is_cap).sum()) if settings.mode == "tis" else 0.0
        ),
    }
