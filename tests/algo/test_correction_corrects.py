"""The sampler correction corrects: on a tiny vocabulary, where the exact on-policy policy
gradient is a sum over every sequence, completions sampled from a *different* distribution
(a perturbed copy of the policy) give a gradient closer to the exact one when corrected.

The policy is tabular and autoregressive: T tokens, vocabulary V, logits θ[t, y_{t−1}]
(V^T sequences). With a fixed advantage A(y) = r(y) − E_π[r], the exact gradient is
g* = Σ_y π(y) A(y) ∇log π(y). At θ = θ_old the GRPO surrogate with ``"sequence"``
aggregation has ∇loss = −(1/(B·T)) Σ_i A_i Σ_t w_it ∇log π(y_it), so −T·∇loss estimates g*
when the y_i come from π (w = 1). Sampled from q ≠ π, the uncorrected estimate is biased.
The sequence-level IS weight Π_t π/q removes the bias exactly. A token-level weight
π(y_t)/q(y_t) corrects each token's own distribution but not that of the prefix it
follows: for one-token completions it is exact (TIS: up to the cap), for longer ones it is
not, and on this problem it helps on some seeds and hurts on others (measured, 8 seeds at
T = 3: 0.56-1.32× the uncorrected error), which is why no assertion is made for it there.
"""

from __future__ import annotations

import itertools

import torch

from grpo.algo.corrections import CorrectionSettings, sampler_correction
from grpo.algo.losses import policy_loss

BATCHES, ROWS = 100, 256  # 25,600 sampled completions per estimator


def _token_logps(theta_TVV: torch.Tensor, y_BT: torch.Tensor) -> torch.Tensor:
    length = theta_TVV.shape[0]
    previous_BT = torch.cat([torch.zeros_like(y_BT[:, :1]), y_BT[:, :-1]], dim=1)
    logits_BTV = theta_TVV[torch.arange(length)[None, :], previous_BT]
    return torch.log_softmax(logits_BTV, dim=-1).gather(-1, y_BT[..., None]).squeeze(-1)


def _sample(theta_TVV: torch.Tensor, rows: int, generator: torch.Generator) -> torch.Tensor:
    length = theta_TVV.shape[0]
    y_BT = torch.zeros(rows, length, dtype=torch.long)
    previous_B = torch.zeros(rows, dtype=torch.long)
    for t in range(length):
        probs_BV = theta_TVV[t, previous_B].softmax(dim=-1)
        y_BT[:, t] = torch.multinomial(probs_BV, 1, generator=generator).squeeze(1)
        previous_B = y_BT[:, t]
    return y_BT


def _problem(length: int, vocab: int, perturbation: float) -> dict[str, torch.Tensor]:
    """π, r(y) for every sequence, the sampler q (π's logits plus Gaussian noise) and g*."""
    generator = torch.Generator().manual_seed(0)
    theta = torch.randn(length, vocab, vocab, generator=generator)
    rewards = torch.randn(*(vocab,) * length, generator=generator)
    sampler_theta = theta + perturbation * torch.randn(length, vocab, vocab, generator=generator)
    every_y = torch.tensor(list(itertools.product(range(vocab), repeat=length)))
    trained = theta.clone().requires_grad_(True)
    logp_Y = _token_logps(trained, every_y).sum(dim=1)
    prob_Y = logp_Y.exp().detach()
    reward_Y = rewards[tuple(every_y.T)]
    baseline = (prob_Y * reward_Y).sum()
    (exact,) = torch.autograd.grad((prob_Y * (reward_Y - baseline) * logp_Y).sum(), trained)
    return {
        "theta": theta,
        "rewards": rewards,
        "sampler_theta": sampler_theta,
        "baseline": baseline,
        "exact": exact,
    }


def _estimate(
    problem: dict[str, torch.Tensor], settings: CorrectionSettings | None
) -> tuple[float, float, float]:
    """Over BATCHES sampled batches: the relative error ‖ḡ − g*‖/‖g*‖ of the mean of
    −T·∇loss, the largest weight used and the largest token ratio π/q seen."""
    generator = torch.Generator().manual_seed(1)
    theta, sampler_theta = problem["theta"], problem["sampler_theta"]
    total, largest_weight, largest_ratio = torch.zeros_like(theta), 0.0, 0.0
    for _ in range(BATCHES):
        y_BT = _sample(sampler_theta, ROWS, generator)
        trained = theta.clone().requires_grad_(True)
        logp_BT = _token_logps(trained, y_BT)
        mask_BT = torch.ones_like(logp_BT)
        sampler_logp_BT = _token_logps(sampler_theta, y_BT)
        largest_ratio = max(largest_ratio, float((logp_BT.detach() - sampler_logp_BT).exp().max()))
        weights_BT = None
        if settings is not None:
            correction = sampler_correction(logp_BT, sampler_logp_BT, mask_BT, settings)
            weights_BT = correction.weights_BT
            largest_weight = max(largest_weight, float(weights_BT.max()))
        advantages_B = problem["rewards"][tuple(y_BT.T)] - problem["baseline"]
        loss, _ = policy_loss(
            logp_BT, logp_BT.detach(), advantages_B, mask_BT, weights_BT=weights_BT
        )
        total -= theta.shape[0] * torch.autograd.grad(loss, trained)[0]
    mean = total / BATCHES
    error = float((mean - problem["exact"]).norm() / problem["exact"].norm())
    return error, largest_weight, largest_ratio


def test_tis_corrects_one_token_completions_with_a_bounded_weight() -> None:
    problem = _problem(length=1, vocab=6, perturbation=0.4)
    error_none, _, largest_ratio = _estimate(problem, None)
    error_tis, largest_weight, _ = _estimate(problem, CorrectionSettings("tis", is_cap=2.0))
    exact_is, _, _ = _estimate(problem, CorrectionSettings("tis", is_cap=1e9))
    assert largest_ratio > 2.0 and largest_weight <= 2.0  # the cap binds, and bounds
    assert exact_is < error_none / 10  # the plain token ratio is the exact weight here
    # Measured: uncorrected 0.31 of ‖g*‖ off, TIS(C = 2) 0.15, untruncated 0.005.
    assert error_tis < error_none / 1.5  # truncated, it still removes half of the bias


def test_sequence_level_is_corrects_longer_completions() -> None:
    problem = _problem(length=3, vocab=3, perturbation=0.5)
    error_none, _, _ = _estimate(problem, None)
    error_is, _, _ = _estimate(problem, CorrectionSettings("seq_mis", mask_high=1e9, mask_low=0.0))
    error_mis, largest, _ = _estimate(problem, CorrectionSettings("seq_mis", 0.0, 0.2, 5.0))
    # Measured: uncorrected 0.49 of ‖g*‖ off, sequence IS 0.025, masked to [0.2, 5] 0.068.
    assert error_none > 0.3  # the sampler's mismatch biases the plain estimate
    assert error_is < error_none / 5  # the exact weight removes the bias (noise is left)
    assert error_mis < error_none / 3 and largest <= 5.0  # masked outside [0.2, 5]


def test_the_truncated_variants_bound_the_weight() -> None:
    problem = _problem(length=3, vocab=3, perturbation=0.5)
    _, untruncated, _ = _estimate(problem, CorrectionSettings("seq_mis", 0.0, 0.0, 1e9))
    assert untruncated > 2.0  # the plain sequence weight is unbounded
    for settings in (
        CorrectionSettings("tis", is_cap=1.5),
        CorrectionSettings("mis", mask_low=0.5, mask_high=1.5),
        CorrectionSettings("seq_mis", mask_low=0.5, mask_high=1.5),
        CorrectionSettings("geo_mask", geo_low=0.9, geo_high=1.1),
    ):
        _, largest, _ = _estimate(problem, settings)
        assert 0.0 < largest <= 1.5, settings.mode
