"""One micro-batch's policy objective: the clipped surrogate at the configured ratio level
(token, or GSPO's sequence), its ratio taken against the anchor of the off-policy mode
(π_prox, or the sampler's π_behav) and weighted by the off-policy weight and the sampler
correction (:func:`~grpo.algo.off_policy.off_policy_terms`), minus the entropy bonus.

The KL penalty is added by the caller (:mod:`grpo.training.update.policy`). Every mean uses the
completion mask (1 = a token the model wrote), and the normalizers are the step's, so
micro-batch gradients still add up to the one-batch gradient.
"""

from __future__ import annotations

import torch

from grpo.algo.corrections import correction_sums
from grpo.algo.losses import aggregate, policy_loss
from grpo.algo.objective import Objective
from grpo.algo.off_policy import off_policy_terms
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

    ``old_logp_BT`` is π_prox, the learner's log-probs before the update. With the defaults
    (no correction, ``off_policy = "none"``, token ratios, no entropy bonus) this is exactly
    :func:`~grpo.algo.losses.policy_loss`. The ``sampler/*`` sums, with a correction on,
    describe the weight the loss used: under ``decoupled`` the behaviour weight times the
    correction's rejection, under ``sampler`` the rejection alone.
    """
    mask_BT, settings = micro.completion_mask_BT, objective.correction
    sums: dict[str, float] = {}
    sampler_logp_BT = micro.sampler_logp_BT.to(logp_BT.device)  # π_behav
    terms = off_policy_terms(
        logp_BT, old_logp_BT, sampler_logp_BT, mask_BT, objective.off_policy, settings
    )
    if with_metrics and terms.correction is not None:
        sums = correction_sums(terms.correction, old_logp_BT, sampler_logp_BT, mask_BT, settings)
    clip_low, clip_high = objective.clip_range
    loss, stats = policy_loss(
        logp_BT,
        terms.anchor_logp_BT,
        micro.advantages_BT,
        mask_BT,
        clip_low=clip_low,
        clip_high=clip_high,
        aggregation=objective.aggregation,
        ratio_level=objective.ratio_level,
        weights_BT=terms.weights_BT,
        **normalizers,
    )
    if objective.entropy_coef > 0:
        if entropy_BT is None:
            raise ValueError("the entropy bonus needs the policy's entropy (with_entropy=True)")
        # The masked token mean over the whole step (step-wide token count).
        bonus = aggregate(entropy_BT, mask_BT, "token", num_tokens=normalizers["num_tokens"])
        loss = loss - objective.entropy_coef * bonus
    return loss, stats, sums
