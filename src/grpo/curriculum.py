"""Per-prompt statistics, group-outcome metrics and the adaptive p(1 − p) curriculum.

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
All state is plain numbers, so it rides in the sampler's ``state_dict`` into checkpoints.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch


@dataclass
class PromptStats:
    """What the run has seen of each prompt, and the run's sample totals.

    ``attempts[i]`` completions were generated for prompt i, ``successes[i]`` of them
    succeeded (fractional successes allowed), last at step ``last_step[i]`` (0 = never).
    """

    attempts: list[float] = field(default_factory=list)
    successes: list[float] = field(default_factory=list)
    last_step: list[int] = field(default_factory=list)
    generated: int = 0  # completions generated in the whole run
    zero_variance: int = 0  # of which in zero-variance groups (no gradient: wasted)

    @classmethod
    def empty(cls, num_prompts: int) -> PromptStats:
        return cls([0.0] * num_prompts, [0.0] * num_prompts, [0] * num_prompts)

    def record(
        self,
        indices: list[int],
        successes_NG: torch.Tensor,
        zero_variance_N: torch.Tensor,
        step: int,
    ) -> None:
        """Add one step's N groups: group n is G completions of prompt ``indices[n]``."""
        for index, row in zip(indices, successes_NG.tolist(), strict=True):
            self.attempts[index] += len(row)
            self.successes[index] += float(sum(row))
            self.last_step[index] = step
        self.generated += successes_NG.numel()
        self.zero_variance += int(zero_variance_N.sum()) * successes_NG.shape[1]

    def state_dict(self) -> dict[str, Any]:
        return {
            "attempts": list(self.attempts),
            "successes": list(self.successes),
            "last_step": list(self.last_step),
            "generated": self.generated,
            "zero_variance": self.zero_variance,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["attempts"]) != len(self.attempts):
            raise ValueError(
                f"checkpoint has statistics for {len(state['attempts'])} prompts, "
                f"the dataset has {len(self.attempts)}"
            )
        self.attempts = [float(x) for x in state["attempts"]]
        self.successes = [float(x) for x in state["successes"]]
        self.last_step = [int(x) for x in state["last_step"]]
        self.generated, self.zero_variance = int(state["generated"]), int(state["zero_variance"])


def write_prompt_stats(path: Path, prompts: list[str], stats: PromptStats) -> None:
    """One JSON line per prompt: the prompt, attempts, successes, success rate, last step."""
    with path.open("w") as handle:
        for prompt, attempts, successes, last_step in zip(
            prompts, stats.attempts, stats.successes, stats.last_step, strict=True
        ):
            rate = successes / attempts if attempts else None
            row = {"prompt": prompt, "attempts": attempts, "successes": successes}
            handle.write(json.dumps({**row, "success_rate": rate, "last_step": last_step}) + "\n")


def completion_successes(rewards_B: torch.Tensor, accuracy_B: torch.Tensor | None) -> torch.Tensor:
    """Per completion, 1 for a success and 0 for a failure.

    With an accuracy reward: [accuracy ≥ 1]. Without one: the total reward clipped to
    [0, 1] (a fractional success, which a Beta posterior counts as such).
    """
    if accuracy_B is not None:
        return (accuracy_B >= 1.0).float()
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


def run_totals(stats: PromptStats) -> dict[str, float]:
    """The run's cumulative sample counts (they survive a resume with the sampler state)."""
    return {
        "samples/generated_total": float(stats.generated),
        "samples/zero_variance_total": float(stats.zero_variance),
        "samples/wasted_frac_total": stats.zero_variance / max(stats.generated, 1),
    }


def record_step(
    stats: PromptStats,
    indices: list[int],
    rewards_NG: torch.Tensor,
    accuracy_B: torch.Tensor | None,
    zero_variance_N: torch.Tensor,
    step: int,
) -> dict[str, float]:
    """Add a step's groups to ``stats``; return the step's group and sample metrics."""
    successes_NG = completion_successes(rewards_NG.reshape(-1), accuracy_B).view_as(rewards_NG)
    stats.record(indices, successes_NG, zero_variance_N, step)
    return {**group_outcomes(successes_NG, zero_variance_N), **run_totals(stats)}


def uncertainty_weights(
    attempts_P: torch.Tensor,
    successes_P: torch.Tensor,
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
    alpha_P = prior_successes + successes_P.double()
    beta_P = prior_failures + attempts_P.double() - successes_P.double()
    total_P = alpha_P + beta_P
    return alpha_P * beta_P / (total_P * (total_P + 1.0))


def curriculum_probabilities(weights_P: torch.Tensor, strength: float) -> torch.Tensor:
    """P(i) = w_i^k / Σ_j w_j^k with k = ``strength`` (0: uniform; larger: sharper)."""
    powered_P = weights_P.double() ** strength
    return powered_P / powered_P.sum()


def draw_prompts(
    stats: PromptStats,
    count: int,
    *,
    strength: float,
    prior_successes: float,
    prior_failures: float,
    generator: torch.Generator,
) -> list[int]:
    """``count`` distinct prompts drawn by :func:`curriculum_probabilities` (repeats only
    when ``count`` exceeds the number of prompts)."""
    weights_P = uncertainty_weights(
        torch.tensor(stats.attempts),
        torch.tensor(stats.successes),
        prior_successes=prior_successes,
        prior_failures=prior_failures,
    )
    probabilities_P = curriculum_probabilities(weights_P, strength)
    replacement = count > len(stats.attempts)
    return torch.multinomial(
        probabilities_P, count, replacement=replacement, generator=generator
    ).tolist()
