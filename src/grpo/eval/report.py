"""What ``grpo eval`` reports: greedy pass@1, pass@k and mean rewards, as JSON
(:meth:`EvalReport.summary`) and as a table for the console (:meth:`EvalReport.table`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class EvalReport:
    """What ``grpo eval`` measures; :meth:`summary` is its JSON."""

    source: str
    correct_reward: str
    greedy_correct: list[bool]  # per prompt
    greedy_reward_means: dict[str, float]  # per reward function, over greedy completions
    samples: int = 0  # n sampled completions per prompt (0 = greedy only)
    temperature: float = 1.0
    sample_correct_counts: list[int] = field(default_factory=list)  # c per prompt
    sampled_reward_means: dict[str, float] = field(default_factory=dict)
    pass_at: dict[int, float] = field(default_factory=dict)  # k → mean over prompts
    greedy_agent_metrics: dict[str, float] = field(default_factory=dict)  # agent/* (multi-turn)
    sampled_agent_metrics: dict[str, float] = field(default_factory=dict)

    @property
    def greedy_accuracy(self) -> float:
        return sum(self.greedy_correct) / len(self.greedy_correct)

    def summary(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "data": self.source,
            "prompts": len(self.greedy_correct),
            "correct_reward": self.correct_reward,
            "pass@1_greedy": self.greedy_accuracy,
            "reward_means_greedy": self.greedy_reward_means,
        }
        if self.greedy_agent_metrics:
            result["agent_greedy"] = self.greedy_agent_metrics
        if self.samples:
            result |= {
                "samples": self.samples,
                "temperature": self.temperature,
                "pass@k": {str(k): value for k, value in self.pass_at.items()},
                "reward_means_sampled": self.sampled_reward_means,
            }
            if self.sampled_agent_metrics:
                result["agent_sampled"] = self.sampled_agent_metrics
        return result

    def table(self) -> str:
        rows = [("pass@1 (greedy)", f"{self.greedy_accuracy:.1%}")]
        sampled = f"{self.samples} samples, T = {self.temperature:g}"
        rows += [(f"pass@{k} ({sampled})", f"{value:.1%}") for k, value in self.pass_at.items()]
        for name, value in self.greedy_reward_means.items():
            rows.append((f"mean {name} (greedy)", f"{value:.4g}"))
        for name, value in self.sampled_reward_means.items():
            rows.append((f"mean {name} (sampled)", f"{value:.4g}"))
        for kind, metrics in (
            ("greedy", self.greedy_agent_metrics),
            ("sampled", self.sampled_agent_metrics),
        ):
            rows += [(f"{name} ({kind})", f"{value:.4g}") for name, value in metrics.items()]
        width = max(len(label) for label, _ in rows)
        lines = [
            f"{len(self.greedy_correct)} prompts of {self.source}; "
            f"correct = {self.correct_reward} ≥ 1",
            f"{'metric':<{width}}  value",
        ]
        lines += [f"{label:<{width}}  {value}" for label, value in rows]
        return "\n".join(lines)
