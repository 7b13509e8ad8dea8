"""The off-policy objective for stale samples (pure tensor functions).

With asynchronous rollouts a completion is sampled by a worker whose weights may be up to k
optimizer steps older than the learner's: the behaviour policy π_behav, whose log-probs of
the sampled tokens arrive as ``sampler_logp_BT``. The learner's own log-probs of the same
tokens, taken before its first optimizer step on the batch, are the proximal policy π_prox
(the update's ``old_logp``). The mode says which of the two the clipped surrogate's ratio is
taken against and which weight (no gradient) multiplies each token's surrogate:

- ``"none"``: ρ = π_θ/π_prox, weight 1 (the sampler correction, if any, as when synchronous).
- ``"sampler"`` (prime-rl, which never recomputes old log-probs: ``grpo_loss_clip`` in
  src/prime_rl/trainer/rl/loss.py at e819f8a, Aug 2025, and the token/sequence/geometric
  masks of its ``compute_loss`` at 5f47740, Dec 2025): ρ = π_θ/π_behav, clipped to
  [1 − ε_low, 1 + ε_high]; no proximal policy and no weight.
- ``"decoupled"`` (AReaL, Fu et al. 2025, "AReaL: A Large-Scale Asynchronous Reinforcement
  Learning System", its decoupled PPO objective; from Hilton et al. 2021, "Batch
  size-invariance for policy optimization"; ``ppo_actor_loss_fn`` in AReaL's
  areal/utils/functional/functional.py at 4aef98d, May 2026, whose ``proximal_logprobs``
  are recomputed and ``old_logprobs`` the inference engine's): ρ = π_θ/π_prox, clipped,
  and each token weighted by min(π_prox/π_behav, C), C = ``sampler_is_cap`` (AReaL's
  ``behave_imp_weight`` under ``rejection_sampling.action = "clamp"``, formerly
  ``token_truncate``).

    sampler:   J = Σ_t 1_keep · min(ρ_t A_t, clip(ρ_t) A_t),           ρ_t = π_θ/π_behav
    decoupled: J = Σ_t min(r_t, C) · 1_keep · min(ρ_t A_t, clip(ρ_t) A_t),
               ρ_t = π_θ/π_prox, r_t = π_prox/π_behav      (1_keep = 1 with no correction)

With either mode on, the sampler correction of :mod:`grpo.algo.corrections` contributes only
its rejection 1_keep, evaluated on the mode's ratio (``sampler``: the current ρ_t, detached,
recomputed at every inner iteration, as prime-rl's masks; ``decoupled``: r_t): the tokens or
sequences it would weight 0 are dropped, never a second importance weight on top of the
mode's own. ``tis`` then drops the tokens whose ratio exceeds C: under ``sampler`` that has
the gradient of prime-rl's ``coef_1 = clamp(ratio, 0, clip_ratio)`` (a term held at C is
constant), under ``decoupled`` it is AReaL-lite's ``behav_imp_weight_cap`` mask,
r_t · 1[r_t ≤ C] (areal/utils/functional.py at 094adbb, Aug 2025).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from grpo.algo.corrections import Correction, CorrectionSettings, sampler_correction, token_ratio

OffPolicy = Literal["none", "sampler", "decoupled"]
OFF_POLICY_MODES: tuple[OffPolicy, ...] = ("none", "sampler", "decoupled")


def resolve_off_policy(requested: str, rollout_mode: str, max_staleness: int) -> OffPolicy:
    """``"auto"`` is ``"decoupled"`` when samples can be stale (asynchronous rollouts with
    ``max_staleness`` ≥ 1) and ``"none"`` otherwise, so that asynchronous rollouts at k = 0
    train exactly as synchronous ones; any other value is returned as it is.

    Example:
        >>> resolve_off_policy("auto", "async", 2), resolve_off_policy("auto", "async", 0)
        ('decoupled', 'none')
    """
    if requested == "auto":
        return "decoupled" if rollout_mode == "async" and max_staleness >= 1 else "none"
    if requested not in OFF_POLICY_MODES:
        raise ValueError(f"off_policy must be auto, none, sampler or decoupled, got {requested!r}")
    return requested  # type: ignore[return-value]


def behaviour_weights(
    prox_logp_BT: torch.Tensor, behav_logp_BT: torch.Tensor, mask_BT: torch.Tensor, cap: float
) -> torch.Tensor:
    """The decoupled objective's truncated behaviour weight min(π_prox/π_behav, C), 0 on
    padding, detached (AReaL ``behave_imp_weight`` under ``action = "clamp"``).

    Example (ratios e^0.5, e^-1 and e^2 capped at 2; the last token is padding):
        >>> prox, behav = torch.tensor([[0.5, -1.0, 2.0, 9.0]]), torch.zeros(1, 4)
        >>> behaviour_weights(prox, behav, torch.tensor([[1, 1, 1, 0]]), cap=2.0)
        tensor([[1.6487, 0.3679, 2.0000, 0.0000]])
    """
    ratio_BT = token_ratio(prox_logp_BT.detach(), behav_logp_BT.to(prox_logp_BT), mask_BT)
    return ratio_BT.clamp(max=cap) * mask_BT.to(ratio_BT.dtype)


def rejection_mask(correction: Correction, settings: CorrectionSettings) -> torch.Tensor:
    """1_keep of a sampler correction: 0 where it rejects, 1 elsewhere (padding included).

    ``tis`` rejects a ratio above C; ``mis``, ``seq_mis`` and ``geo_mask`` reject what they
    weight 0 (ratios are positive, so a weight of 0 is always a rejection); ``none`` keeps all.

    Example (TIS at C = 2 keeps ratios up to 2, mis keeps [0.5, 2]):
        >>> ratio = torch.tensor([[0.4, 1.0, 2.5]])
        >>> rejection_mask(Correction(ratio.clamp(max=2.0), ratio), CorrectionSettings("tis"))
        tensor([[1., 1., 0.]])
        >>> mis = Correction(torch.tensor([[0.0, 1.0, 0.0]]), ratio)
        >>> rejection_mask(mis, CorrectionSettings("mis"))
        tensor([[0., 1., 0.]])
    """
    if settings.mode == "tis":
        keep_BT = correction.ratio_BT <= settings.is_cap
    elif settings.mode == "none":
        keep_BT = torch.ones_like(correction.ratio_BT, dtype=torch.bool)
    else:
        keep_BT = correction.weights_BT != 0
    return keep_BT.to(correction.ratio_BT.dtype)


@dataclass(frozen=True)
class OffPolicyTerms:
    """What the clipped surrogate needs from the off-policy mode (B rows, T positions)."""

    anchor_logp_BT: torch.Tensor  # the log-probs ρ is taken against: π_prox, or π_behav
    weights_BT: torch.Tensor | None  # per-token weight on the surrogate, detached; None: 1
    correction: Correction | None  # for the sampler/* metrics; None when no correction is on


def off_policy_terms(
    logp_BT: torch.Tensor,
    prox_logp_BT: torch.Tensor,
    behav_logp_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    mode: OffPolicy,
    settings: CorrectionSettings,
) -> OffPolicyTerms:
    """The ratio's anchor and the token weights of ``mode`` (see the module docstring),
    combined with the sampler correction ``settings``.

    ``logp_BT`` is π_θ (only its detached value is read, by ``sampler``'s rejection),
    ``prox_logp_BT`` π_prox (the update's old_logp), ``behav_logp_BT`` π_behav. The weights
    are 0 on padding. ``"none"`` is exactly the synchronous objective: ratio against π_prox,
    the sampler correction's weights (on π_prox/π_behav) or none.
    """
    if mode == "none":
        if settings.mode == "none":
            return OffPolicyTerms(prox_logp_BT, None, None)
        correction = sampler_correction(prox_logp_BT, behav_logp_BT, mask_BT, settings)
        return OffPolicyTerms(prox_logp_BT, correction.weights_BT, correction)
    if mode == "sampler":
        anchor_BT, weights_BT = behav_logp_BT, None
        ratio_source_BT = logp_BT.detach()  # prime-rl masks on the current π_θ/π_behav
    elif mode == "decoupled":
        anchor_BT = prox_logp_BT
        weights_BT = behaviour_weights(prox_logp_BT, behav_logp_BT, mask_BT, settings.is_cap)
        ratio_source_BT = prox_logp_BT
    else:
        raise ValueError(f"off_policy must be one of none, sampler, decoupled, got {mode!r}")
    if settings.mode == "none":
        return OffPolicyTerms(anchor_BT, weights_BT, None)
    rejection = sampler_correction(ratio_source_BT, behav_logp_BT, mask_BT, settings)
    keep_BT = rejection_mask(rejection, settings) * mask_BT.to(rejection.ratio_BT.dtype)
    combined_BT = keep_BT if weights_BT is None else weights_BT * keep_BT
    return OffPolicyTerms(anchor_BT, combined_BT, Correction(combined_BT, rejection.ratio_BT))
