"""The settings of the objective the update minimises, as one small value of the algorithm
layer: the clipped surrogate (:func:`~grpo.algo.losses.policy_loss`), its aggregation, the
KL penalty (:func:`~grpo.algo.kl.kl_penalty`) and μ, the optimizer steps per rollout batch.

    loss = −aggregate(min(ρ_it·A_it, clip(ρ_it, 1 − ε_low, 1 + ε_high)·A_it))
           + β · aggregate(KL_t(π_θ ‖ π_ref))
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo.algo.kl import KLKind
from grpo.algo.losses import Aggregation


@dataclass(frozen=True)
class Objective:
    """``temperature`` is the sampler's τ: log-probs are those of softmax(logits / τ), the
    distribution the completions were drawn from. ``max_completion_length`` is the constant
    normalizer of ``aggregation = "constant"`` (Dr. GRPO)."""

    clip_low: float = 0.2
    clip_high: float = 0.2
    aggregation: Aggregation = "sequence"
    beta: float = 0.0
    kl_kind: KLKind = "k3"
    inner_iterations: int = 1
    temperature: float = 1.0
    max_completion_length: int = 0
