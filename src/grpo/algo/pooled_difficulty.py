"""Pooled difficulty: a prompt's success rate estimated from the prompts that share its
difficulty key, the chance its next group is mixed, and the pre-screen (pure).

The per-prompt Beta posterior of :mod:`grpo.algo.curriculum` barely moves when each prompt
is seen two or three times in a run. Pooling fixes that with an empirical-Bayes
(hierarchical) prior: prompts with the same key (a dataset column such as ``level``, or a
prompt-length bucket) share a Beta(a_k, b_k) fitted to all of them, and each prompt's own
counts update it:

    p_i ~ Beta(a_k + s_i, b_k + n_i − s_i)

so a prompt never seen borrows its bucket's estimate, and one seen often follows its own.

Prior per key (method of moments over the key's seen prompts, Robbins 1956; the
beta-binomial fit of Kleinman 1973): with r_i = s_i / n_i,

    m  = Σ s_i / Σ n_i                              (pooled mean)
    v  = Σ n_i (r_i − m)² / Σ n_i                   (observed spread of the rates)
    h  = mean(1 / n_i)                              (binomial noise share)
    σ² = (v − m(1 − m) h) / (1 − h)                 (spread of the true rates)
    c  = m(1 − m) / σ² − 1,  clipped to [c_min, max_prior_weight]
    a_k = m c,  b_k = (1 − m) c

σ² ≤ 0 (all prompts alike within the noise) or fewer than two seen prompts give
c = max_prior_weight; a key with nothing seen gets Beta(1, 1).

Counts forget exponentially (a policy that learns makes old outcomes stale): counts
recorded Δ steps ago weigh 0.5^(Δ / half_life_steps) (0: never forget).

A group of G completions teaches only when mixed. Under Beta(α, β) the group's number of
successes is beta-binomial, so

    P(all right) = Π_{j<G} (α + j) / (α + β + j),  P(all wrong) = Π_{j<G} (β + j) / (α + β + j)
    P(mixed)     = 1 − P(all right) − P(all wrong)

The pre-screen skips prompts whose P(mixed) is below a threshold (predicted all-correct or
all-wrong with high confidence), except for an exploration share of each step's prompts
drawn uniformly, so that skipped buckets are re-measured as the policy changes.
"""

from __future__ import annotations

import torch

MIN_PRIOR_WEIGHT = 0.5  # c_min: a key whose rates spread widely still keeps some pull


def forgetting_factor(age_D: torch.Tensor, half_life_steps: float) -> torch.Tensor:
    """0.5^(age / half_life) per prompt; all ones when ``half_life_steps`` is 0.

    Example: ages 0, 10, 20 with half-life 10 → 1, 0.5, 0.25.
        >>> forgetting_factor(torch.tensor([0.0, 10, 20]), 10.0)
        tensor([1.0000, 0.5000, 0.2500], dtype=torch.float64)
    """
    if half_life_steps <= 0:
        return torch.ones_like(age_D, dtype=torch.float64)
    return torch.pow(0.5, age_D.double() / half_life_steps)


def key_priors(
    attempts_D: torch.Tensor,
    successes_D: torch.Tensor,
    keys_D: torch.Tensor,
    num_keys: int,
    max_prior_weight: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(a_K, b_K): each key's Beta prior by the method of moments (module docstring).

    ``keys_D`` holds each prompt's key in [0, num_keys); counts may be fractional
    (forgotten). float64.
    """
    alpha_K = torch.ones(num_keys, dtype=torch.float64)
    beta_K = torch.ones(num_keys, dtype=torch.float64)
    n_D, s_D = attempts_D.double(), successes_D.double()
    for key in range(num_keys):
        seen = (keys_D == key) & (n_D > 0)
        if not seen.any():
            continue
        n, s = n_D[seen], s_D[seen]
        m = (s.sum() / n.sum()).clamp(1e-3, 1 - 1e-3)
        weight = max_prior_weight
        if int(seen.sum()) >= 2:
            v = (n * (s / n - m) ** 2).sum() / n.sum()
            h = (1.0 / n).mean().clamp(max=0.999)
            spread = (v - m * (1 - m) * h) / (1 - h)
            if spread > 0:
                weight = float((m * (1 - m) / spread - 1).clamp(MIN_PRIOR_WEIGHT, max_prior_weight))
        alpha_K[key], beta_K[key] = m * weight, (1 - m) * weight
    return alpha_K, beta_K


def pooled_posteriors(
    priors_K: tuple[torch.Tensor, torch.Tensor],
    keys_D: torch.Tensor,
    attempts_D: torch.Tensor,
    successes_D: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(α_D, β_D) = (a_k + s_i, b_k + n_i − s_i) with k = key of prompt i and
    ``priors_K`` = (a_K, b_K) of :func:`key_priors`."""
    alpha_K, beta_K = priors_K
    n_D, s_D = attempts_D.double(), successes_D.double()
    return alpha_K[keys_D] + s_D, beta_K[keys_D] + n_D - s_D


def mixed_probability(alpha_D: torch.Tensor, beta_D: torch.Tensor, group_size: int) -> torch.Tensor:
    """P(a group of G is neither all right nor all wrong) under Beta(α, β), beta-binomial.

    Example: Beta(1, 1), G = 2: P(all right) = 1/2 · 2/3 = 1/3, the same all wrong → 1/3.
        >>> mixed_probability(torch.tensor([1.0]), torch.tensor([1.0]), 2)
        tensor([0.3333], dtype=torch.float64)
    """
    alpha_D, beta_D = alpha_D.double(), beta_D.double()
    j_G = torch.arange(group_size, dtype=torch.float64)
    total_DG = alpha_D[:, None] + beta_D[:, None] + j_G
    all_right_D = ((alpha_D[:, None] + j_G) / total_DG).prod(dim=1)
    all_wrong_D = ((beta_D[:, None] + j_G) / total_DG).prod(dim=1)
    return (1.0 - all_right_D - all_wrong_D).clamp(min=0.0)


def prescreened_probabilities(
    mixed_D: torch.Tensor, threshold: float, strength: float
) -> torch.Tensor:
    """P(i) ∝ P_mixed(i)^k over prompts with P_mixed ≥ threshold (all of them when none
    pass, so a step never lacks prompts).

    Example: P_mixed 0.05, 0.5, 0.25 with threshold 0.1, k = 1 → 0, 2/3, 1/3.
        >>> prescreened_probabilities(torch.tensor([0.05, 0.5, 0.25]), 0.1, 1.0)
        tensor([0.0000, 0.6667, 0.3333], dtype=torch.float64)
    """
    mixed_D = mixed_D.double()
    passes_D = mixed_D >= threshold
    if not passes_D.any():
        passes_D = torch.ones_like(passes_D)
    # A tiny floor keeps a passing prompt drawable when P_mixed ≈ 0 at threshold 0.
    weights_D = torch.where(passes_D, mixed_D.clamp(min=1e-12) ** strength, 0.0)
    return weights_D / weights_D.sum()


def exploration_count(count: int, exploration: float) -> int:
    """How many of a step's ``count`` prompts are drawn uniformly: round(count · ε), at
    least 1 when ε > 0 (so a small batch still explores)."""
    if exploration <= 0:
        return 0
    return min(count, max(1, round(count * exploration)))
