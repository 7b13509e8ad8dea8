"""One micro-batch's policy objective: the clipped surrogate at the configured ratio level
(token, or GSPO's sequence), weighted by the sampler correction, minus the entropy bonus.

The KL penalty is added by the caller (:mod:`grpo.training.update.policy`). Every mean uses the
completion mask (1 = a token the model wrote), and the normalizers are the step's, so
micro-batch gradients still add up to the one-batch gradient.
"""

from __future__ import annotations

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
