"""The settings of the objective the update minimises, as one small value of the algorithm
layer: the clipped surrogate (:func:`~grpo.algo.losses.policy_loss`), its aggregation, the
KL penalty (:func:`~grpo.algo.kl.kl_penalty`) and μ, the optimizer steps per rollout batch;
the sampler correction (:mod:`~grpo.algo.corrections`), the off-policy objective for stale
samples (:mod:`~grpo.algo.off_policy`), GSPO's sequence-level ratio and the entropy bonus.

    loss = −aggregate(w_it · min(ρ_it·A_it, clip(ρ_it, 1 − ε_low, 1 + ε_high)·A_it))
           + β · aggregate(KL_t(π_θ ‖ π_ref)) − c_H · token_mean(H_t)

ρ_it = π_θ/π_old with π_old the learner's log-probs before the update (π_prox), or the
sampler's π_behav under ``off_policy = "sampler"``; w_it combines the sampler correction and
the off-policy weight.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grpo.algo.corrections import CorrectionSettings
from grpo.algo.kl import KLKind
from grpo.algo.losses import Aggregation, RatioLevel
from grpo.algo.off_policy import OffPolicy


@dataclass(frozen=True)
class Objective:
    """``temperature`` is the sampler's τ: log-probs are those of softmax(logits / τ), the
    distribution the completions were drawn from. ``max_completion_length`` is the constant
    normalizer of ``aggregation = "constant"`` (Dr. GRPO). With ``ratio_level = "sequence"``
    (GSPO) the clip range is ``sequence_clip_low``/``sequence_clip_high`` instead of
    ``clip_low``/``clip_high``. ``entropy_coef`` c_H rewards the masked token mean of the
    policy's entropy (0: off). ``off_policy`` is the objective for samples drawn by older
    weights (:mod:`~grpo.algo.off_policy`): ``"none"`` treats them as on-policy (the
    synchronous objective, exactly), ``"sampler"`` clips π_θ against the sampler's π_behav
    (prime-rl), ``"decoupled"`` clips π_θ against π_prox and weights each token by
    min(π_prox/π_behav, ``correction.is_cap``) (AReaL). Never ``"auto"``: the config's auto
    is resolved when the objective is built."""

    clip_low: float = 0.2
    clip_high: float = 0.2
    aggregation: Aggregation = "sequence"
    beta: float = 0.0
    kl_kind: KLKind = "k3"
    inner_iterations: int = 1
    temperature: float = 1.0
    max_completion_length: int = 0
    ratio_level: RatioLevel = "token"
    sequence_clip_low: float = 3e-4
    sequence_clip_high: float = 4e-4
    entropy_coef: float = 0.0
    correction: CorrectionSettings = field(default_factory=CorrectionSettings)
    off_policy: OffPolicy = "none"

    @property
    def clip_range(self) -> tuple[float, float]:
        """(ε_low, ε_high) of the ratio level in use."""
        if self.ratio_level == "sequence":
            return self.sequence_clip_low, self.sequence_clip_high
        return self.clip_low, self.clip_high
