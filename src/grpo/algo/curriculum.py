"""Success rates, group outcomes and the adaptive p(1 − p) curriculum's weights (pure).

A group of G completions teaches only when its rewards differ: all-correct and all-wrong
groups get advantage 0 everywhere, so their samples are wasted. With a binary reward and
success probability p, the expected squared advantage signal of a prompt grows with
p(1 − p), largest at p = ½ and zero at p ∈ {0, 1}. The curriculum therefore draws prompts
with probability proportional to E[p(1 − p)]^k under a Beta posterior per prompt, built
from the prompt's attempts and successes so far:

    p ~ Beta(α, β),  α = α₀ + successes,  β = β₀ + attempts − successes
    E[p(1 − p)] = αβ / ((α + β)(α + β + 1))

The posterior expectation explores by itself: an unseen prompt has the prior's weight
(α₀ = β₀ = 1: 1/6, two thirds of a perfectly uncertain prompt's 1/4) and a prompt with few
attempts keeps a sizeable weight, while one solved 8 times out of 8 drops to 9/110 ≈ 0.08.
"""

from __future__ import annotations

import torch

CORRECT_AT = 1.0  # an accuracy reward's value from which a completion is correct


def is_correct(accuracy_B: torch.Tensor) -> torch.Tensor:
    """Which completions an accuracy reward scores correct (bool): a value ≥ 1. Training's
    ``accuracy`` and curriculum, and ``grpo eval``'s pass@k, all count by this rule.

    Example:
        >>> is_correct(torch.tensor([1.0, 0.99, 2.0])).tolist()
        [True, False, True]
    """
    return accuracy_B >= CORRECT_AT


def completion_successes(rewards_B: torch.Tensor, accuracy_B: torch.Tensor | None) -> torch.Tensor:
    """Per completion, 1 for a success and 0 for a failure.

    With an accuracy reward: [accuracy ≥ 1]. Without one: the total reward clipped to
    [0, 1] (a fractional success, which a Beta posterior counts as such).
    """
    if accuracy_B is not None:
        return is_correct(accuracy_B).float()
    return rewards_B.float().clamp(0.0, 1.0)


def group_outcomes(successes_NG: torch.Tensor, zero_variance_N: torch.Tensor) -> dict[str, float]:
    """One step's group fractions and its samples in zero-variance groups.

    A group is all-correct when every completion succeeded, all-wrong when none did, mixed
    otherwise; ``samples/zero_variance`` counts the completions of groups whose *rewards*
    are all equal (those carry no gradient).
    """
    all_correct_N = (successes_NG >= 1.0).all(dim=1)
    all_wrong_N = (successes_NG <= 0.0).all(dim=1)
    mixed_N = ~(all_correct_N | all_wrong_N)
    return {
        "groups/all_correct_frac": all_correct_N.float().mean().item(),
        "groups/all_wrong_frac": all_wrong_N.float().mean().item(),
        "groups/mixed_frac": mixed_N.float().mean().item(),
        "samples/generated": float(successes_NG.numel()),
        "samples/zero_variance": float(int(zero_variance_N.sum()) * successes_NG.shape[1]),
    }


def uncertainty_weights(
    attempts_D: torch.Tensor,
    successes_D: torch.Tensor,
    *,
    prior_successes: float = 1.0,
    prior_failures: float = 1.0,
) -> torch.Tensor:
    """E[p(1 − p)] for each prompt under its Beta posterior.

    α = α₀ + s, β = β₀ + n − s;  E[p(1 − p)] = αβ / ((α + β)(α + β + 1)), float64.

    Example (unseen; 4 of 8; 8 of 8), α₀ = β₀ = 1:
        >>> uncertainty_weights(torch.tensor([0.0, 8, 8]), torch.tensor([0.0, 4, 8]))
        tensor([0.1667, 0.2273, 0.0818], dtype=torch.float64)
    """
    alpha_D = prior_successes + successes_D.double()
    beta_D = prior_failures + attempts_D.double() - successes_D.double()
    total_D = alpha_D + beta_D
    return alpha_D * beta_D / (total_D * (total_D + 1.0))


def curriculum_probabilities(weights_D: torch.Tensor, strength: float) -> torch.Tensor:
    """P(i) = w_i^k / Σ_j w_j^k with k = ``strength`` (0: uniform; larger: sharper)."""
    powered_D = weights_D.double() ** strength
    return powered_D / powered_D.sum()
