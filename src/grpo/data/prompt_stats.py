"""Per-prompt statistics of a run: attempts and successes per dataset prompt, sample counts,
and drawing prompts by the curriculum's weights (:mod:`grpo.algo.curriculum`). All state is
plain numbers, so it rides in the sampler's ``state_dict`` into checkpoints.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from grpo.algo.curriculum import (
    completion_successes,
    curriculum_probabilities,
    group_outcomes,
    uncertainty_weights,
)
from grpo.algo.pooled_difficulty import forgetting_factor


@dataclass
class PromptStats:
    """What the run has seen of each prompt, and the run's sample totals.

    ``attempts[i]`` completions were generated for prompt i, ``successes[i]`` of them
    succeeded (fractional successes allowed), last at step ``last_step[i]`` (0 = never).
    ``recent_attempts``/``recent_successes`` are the same counts forgotten with
    ``half_life_steps`` (see :func:`~grpo.algo.pooled_difficulty.forgetting_factor`), as
    of each prompt's last step; :meth:`recent` ages them to a later step.
    """

    attempts: list[float] = field(default_factory=list)
    successes: list[float] = field(default_factory=list)
    last_step: list[int] = field(default_factory=list)
    generated: int = 0  # completions generated in the whole run
    zero_variance: int = 0  # of which in zero-variance groups (no gradient: wasted)
    recent_attempts: list[float] = field(default_factory=list)
    recent_successes: list[float] = field(default_factory=list)
    half_life_steps: float = 0.0  # 0: recent counts are the plain counts

    @classmethod
    def empty(cls, num_prompts: int, half_life_steps: float = 0.0) -> PromptStats:
        zeros = [0.0] * num_prompts
        return cls(
            list(zeros),
            list(zeros),
            [0] * num_prompts,
            0,
            0,
            list(zeros),
            list(zeros),
            half_life_steps,
        )

    def recent(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(attempts_D, successes_D) forgotten up to ``step`` (float64)."""
        age_D = (step - torch.tensor(self.last_step, dtype=torch.float64)).clamp(min=0)
        factor_D = forgetting_factor(age_D, self.half_life_steps)
        attempts_D = torch.tensor(self.recent_attempts, dtype=torch.float64) * factor_D
        return attempts_D, torch.tensor(self.recent_successes, dtype=torch.float64) * factor_D

    def record(
        self,
        indices: list[int],
        successes_NG: torch.Tensor,
        zero_variance_N: torch.Tensor,
        step: int,
    ) -> None:
        """Add one step's N groups: group n is G completions of prompt ``indices[n]``."""
        for index, row in zip(indices, successes_NG.tolist(), strict=True):
            age = torch.tensor([float(step - self.last_step[index])])
            keep = float(forgetting_factor(age, self.half_life_steps)[0])
            self.recent_attempts[index] = self.recent_attempts[index] * keep + len(row)
            self.recent_successes[index] = self.recent_successes[index] * keep + float(sum(row))
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
            "recent_attempts": list(self.recent_attempts),
            "recent_successes": list(self.recent_successes),
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
        # Checkpoints from before pooling lack the recent counts: the plain counts stand in.
        self.recent_attempts = [float(x) for x in state.get("recent_attempts", self.attempts)]
        self.recent_successes = [float(x) for x in state.get("recent_successes", self.successes)]


def write_prompt_stats(path: Path, prompts: list[str], stats: PromptStats) -> None:
    """One JSON line per prompt: the prompt, attempts, successes, success rate, last step."""
    with path.open("w") as handle:
        for prompt, attempts, successes, last_step in zip(
            prompts, stats.attempts, stats.successes, stats.last_step, strict=True
        ):
            rate = successes / attempts if attempts else None
            row = {"prompt": prompt, "attempts": attempts, "successes": successes}
            handle.write(json.dumps({**row, "success_rate": rate, "last_step": last_step}) + "\n")


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
    weights_D = uncertainty_weights(
        torch.tensor(stats.attempts),
        torch.tensor(stats.successes),
        prior_successes=prior_successes,
        prior_failures=prior_failures,
    )
    probabilities_D = curriculum_probabilities(weights_D, strength)
    replacement = count > len(stats.attempts)
    return torch.multinomial(
        probabilities_D, count, replacement=replacement, generator=generator
    ).tolist()
