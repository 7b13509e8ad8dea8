"""Group-relative advantages: the critic-free baseline of GRPO (pure tensor functions)."""

from __future__ import annotations

from typing import Literal

import torch

from grpo.algo.groups import zero_variance_groups

AdvantageScale = Literal["group", "batch", "none", "rloo"]


def leave_one_out_advantages(rewards_NG: torch.Tensor) -> torch.Tensor:
    """RLOO advantages: each completion's reward minus the mean of the *other* G − 1.

    A_i = r_i − 1/(G−1) · Σ_{j≠i} r_j = G/(G−1) · (r_i − r̄)   (Ahmadian et al. 2024,
    "Back to Basics", after Kool et al. 2019). The baseline excludes the sample itself,
    so it is unbiased; no σ scaling, no ε. Needs G ≥ 2. A constant group gets exactly 0.

    Example:
        >>> leave_one_out_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
        tensor([[ 1.0000, -0.3333, -0.3333, -0.3333]])
    """
    if rewards_NG.dim() != 2 or rewards_NG.shape[1] < 2:
        raise ValueError(
            f"rewards must have shape (num_groups, G ≥ 2), got {tuple(rewards_NG.shape)}"
        )
    rewards_NG = rewards_NG.to(torch.float32)
    group_size = rewards_NG.shape[1]
    others_mean_NG = (rewards_NG.sum(dim=1, keepdim=True) - rewards_NG) / (group_size - 1)
    advantages_NG = rewards_NG - others_mean_NG
    return torch.where(zero_variance_groups(rewards_NG)[:, None], 0.0, advantages_NG)


def group_advantages(
    rewards_NG: torch.Tensor,
    *,
    scale: AdvantageScale = "group",
    eps: float = 1e-4,
    zero_variance_N: torch.Tensor | None = None,
) -> torch.Tensor:
    """Advantage of each completion relative to its own group (GRPO, Shao et al. 2024).

    ``rewards_NG`` holds N groups of G completions' rewards; the result has the same shape.

    - ``"group"`` (GRPO, Shao et al. 2024, DeepSeekMath): A_i = (r_i − r̄) / (σ + eps), with
      r̄ the group mean and σ = sqrt(1/G · Σ_j (r_j − r̄)²) the *population* standard
      deviation (ddof = 0, dividing by G as Shao et al. write it; TRL uses ddof = 1).
    - ``"none"`` (Dr. GRPO, Liu et al. 2025): A_i = r_i − r̄, centred only.
    - ``"batch"``: A_i = (r_i − r̄) / (σ_batch + eps), the group mean with σ taken over all
      N·G rewards of the batch (population σ).
    - ``"rloo"``: the leave-one-out baseline, A_i = G/(G−1) · (r_i − r̄), unscaled; see
      :func:`leave_one_out_advantages`.

    A group whose rewards are all equal gets advantage exactly 0 in every mode;
    ``zero_variance_N`` passes in :func:`~grpo.algo.groups.zero_variance_groups` when the
    caller already has it.

    Example (binary rewards, G = 8 and 4 correct):
        >>> group_advantages(torch.tensor([[1.0, 1, 1, 1, 0, 0, 0, 0]]))  # ±0.5 / (0.5 + 1e-4)
        tensor([[ 0.9998,  0.9998,  0.9998,  0.9998, -0.9998, -0.9998, -0.9998, -0.9998]])
    """
    if rewards_NG.dim() != 2:
        raise ValueError(f"rewards must have shape (num_groups, G), got {tuple(rewards_NG.shape)}")
    rewards_NG = rewards_NG.to(torch.float32)
    centered_NG = rewards_NG - rewards_NG.mean(dim=1, keepdim=True)
    # Exact zeros for constant groups: the mean of equal floats can differ from them by
    # rounding, and a 1e-9 residual divided by eps would become a spurious signal.
    if zero_variance_N is None:
        zero_variance_N = zero_variance_groups(rewards_NG)
    centered_NG = torch.where(zero_variance_N[:, None], 0.0, centered_NG)
    if scale == "none":
        return centered_NG
    if scale == "group":
        std_N1 = rewards_NG.std(dim=1, unbiased=False, keepdim=True)
        return centered_NG / (std_N1 + eps)
    if scale == "batch":
        return centered_NG / (rewards_NG.std(unbiased=False) + eps)
    if scale == "rloo":
        return leave_one_out_advantages(rewards_NG)
    raise ValueError(f"scale must be 'group', 'batch', 'none' or 'rloo', got {scale!r}")
