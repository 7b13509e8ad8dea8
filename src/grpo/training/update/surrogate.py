"""One micro-batch's policy objective: the clipped surrogate at the configured ratio level
(token, or GSPO's sequence), weighted by the sampler correction, minus the entropy bonus.

The KL penalty is added by the caller (:mod:`grpo.training.update.policy`). Every mean uses the
completion mask (1 = a token the model wrote), and the normalizers are the step's, so
micro-batch gradients still add up to the one-batch gradient.
"""

from __future__ import annotations

import math

import torch

from grpo.algo.corrections import correction_sums, sampler_correction
from grpo.algo.losses import aggregate, policy_loss
from grpo.algo.objective import Objective
from grpo.training.update.batch import TrainBatch


def surrogate_loss(
    logp_BT: torch.Tensor,
    old_logp_BT: torch.Tensor,
    entropy_BT: torch.Tensor | None,
    micro: TrainBatch,
    objective: Objective,
    normalizers: dict[str, int],
    *,
    with_metrics: bool,
) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, float]]:
    """(loss, the surrogate's stats, the sampler correction's sums when ``with_metrics``).

    With the defaults (no correction, token ratios, no entropy bonus) this is exactly
    :func:`~grpo.algo.losses.policy_loss`.
    """
    mask_BT, settings = micro.completion_mask_BT, objective.correction
    weights_BT, sums = None, {}
    if settings.mode != "none":
        sampler_logp_BT = micro.sampler_logp_BT.to(logp_BT.device)
        correction = sampler_correction(old_logp_BT, sampler_logp_BT, mask_BT, settings)
        weights_BT = correction.weights_BT
        if with_metrics:
            sums = correction_sums(correction, old_logp_BT, sampler_logp_BT, mask_BT, settings)
    clip_low, clip_high = objective.clip_range
    loss, stats = policy_loss(
        logp_BT,
        old_logp_BT,
        micro.advantages_BT,
        mask_BT,
        clip_low=clip_low,
        clip_high=clip_high,
        aggregation=objective.aggregation,
        ratio_level=objective.ratio_level,
        weights_BT=weights_BT,
        **normalizers,
    )
    if objective.entropy_coef > 0:
        if entropy_BT is None:
            raise ValueError("the entropy bonus needs the policy's entropy (with_entropy=True)")
        # The masked token mean over the whole step (step-wide token count).
        bonus = aggregate(entropy_BT, mask_BT, "token", num_tokens=normalizers["num_tokens"])
        loss = loss - objective.entropy_coef * bonus
    return loss, stats, sums


def correction_totals(objective: Objective) -> dict[str, float]:
    """The correction's metric keys with neutral starting values ({} with no correction, so
    a run without one logs exactly the keys it always did)."""
    if objective.correction.mode == "none":
        return {}
    keys = ("kl_k3", "is_ratio_mean", "is_weight_mean", "masked_frac", "capped_frac")
    totals = {f"sampler/{key}": 0.0 for key in keys}
    for name in ("is_ratio", "is_weight"):
        totals[f"sampler/{name}_min"] = math.inf
        totals[f"sampler/{name}_max"] = -math.inf
    return totals


def add_correction_sums(totals: dict[str, float], metrics: dict[str, float], tokens: int) -> None:
    """Fold one micro-batch's ``sampler/…`` sums into ``totals``: extremes by min/max, the
    rest as shares of the step's ``tokens`` (so processes' parts add up)."""
    for key, value in metrics.items():
        if not key.startswith("sampler/"):
            continue
        if key.endswith("_min"):
            totals[key] = min(totals[key], value)
        elif key.endswith("_max"):
            totals[key] = max(totals[key], value)
        else:
            totals[key] += value / max(tokens, 1)
