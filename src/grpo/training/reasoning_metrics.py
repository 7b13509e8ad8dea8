"""The step's ``reasoning/*`` metrics: completion length by the prompt's estimated
difficulty, ``<think>`` length and the self-correction rate (counting in
:mod:`grpo.text.reasoning`), over the whole step's rows (gathered from every process)."""

from __future__ import annotations

from grpo.text.reasoning import reasoning_summary
from grpo.training.rounds import Generation


def reasoning_metrics(
    generation: Generation, estimated_success_N: list[float], group_size: int
) -> dict[str, float]:
    """``estimated_success_N``: each generated group's prompt's success rate as estimated
    before this step (the sampler's posterior mean), in generation order; row b belongs to
    group b // G."""
    results = generation.results
    success_B = [p for p in estimated_success_N for _ in range(group_size)]
    think_B: list[int | None] = []
    if results.think_chars_B is not None and results.has_think_B is not None:
        think_B = [
            chars if has else None
            for chars, has in zip(
                results.think_chars_B.tolist(), results.has_think_B.tolist(), strict=True
            )
        ]
    correction_B = [] if results.self_correction_B is None else results.self_correction_B.tolist()
    return reasoning_summary(results.length_B.tolist(), success_B, think_B, correction_B)
