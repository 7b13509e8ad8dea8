"""The step's ``reasoning/*`` metrics: completion length by the prompt's estimated
difficulty, ``<think>`` length and the self-correction rate (counting in
:mod:`grpo.eval.reasoning`), over the whole step's rows (gathered from every process)."""

from __future__ import annotations

from grpo.eval.reasoning import reasoning_summary
from grpo.training.rounds import Generation


def reasoning_metrics(
    generation: Generation, estimated_success_N: list[float], group_size: int
) -> dict[str, float]:
    """``estimated_success_N``: each generated group's prompt's success rate as estimated
    before this step (the sampler's posterior mean), in generation order; row b belongs to
    group b // G."""
    results = generation.results
    success_B = [p for p in estimated_success_N for _ in range(group_size)]
    think_B = None if results.think_chars_B is None else results.think_chars_B.tolist()
    correction_B = [] if results.self_correction_B is None else results.self_correction_B.tolist()
    return reasoning_summary(
        results.length_B.tolist(),
        success_B,
        [None if chars < 0 else chars for chars in think_B] if think_B is not None else [],
        correction_B,
    )
