"""Per-token estimators of KL(π_θ ‖ π_ref) from sampled tokens (pure tensor functions)."""

from __future__ import annotations

from typing import Literal

import torch

KLKind = Literal["k1", "k2", "k3"]


def kl_penalty(
    logp_BT: torch.Tensor, ref_logp_BT: torch.Tensor, kind: KLKind = "k3"
) -> torch.Tensor:
    """Per-token KL estimate for tokens sampled from π_θ (Schulman, "Approximating KL", 2020).

    With d = log π_ref(y_t) − log π_θ(y_t):

    - ``"k1"``: −d, unbiased, can be negative.
    - ``"k2"``: d² / 2, always ≥ 0, biased.
    - ``"k3"``: exp(d) − d − 1, always ≥ 0, unbiased (the estimator of DeepSeekMath and TRL).

    The trainer aggregates the result exactly like the policy term and adds β·KL to the loss.
    k3's gradient is not the gradient of the true KL (verl notes this too); it is the
    estimator Shao et al. (2024, DeepSeekMath, eq. 4) use.

    Example:
        >>> kl_penalty(torch.zeros(1, 2), torch.zeros(1, 2))
        tensor([[0., 0.]])
    """
    log_ratio_BT = ref_logp_BT - logp_BT
    if kind == "k3":
        # Clamp only the exponent so one wild token cannot turn the loss into inf.
        return torch.exp(log_ratio_BT.clamp(max=20.0)) - log_ratio_BT - 1.0
    if kind == "k2":
        return 0.5 * log_ratio_BT.square()
    if kind == "k1":
        return -log_ratio_BT
    raise ValueError(f"kind must be 'k1', 'k2' or 'k3', got {kind!r}")
