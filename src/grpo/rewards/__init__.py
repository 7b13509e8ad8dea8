"""Reward functions: ``fn(prompts, completions, **columns) -> list[float]``.

Built-ins: :func:`numeric_answer` (fast numeric answers), :func:`math_equivalence`
(numbers, LaTeX and symbolic answers via math-verify), :func:`r1_format` (``<think>`` then
``<answer>``), :func:`code_reward` (the completion's code against the row's tests, in a
sandbox), :func:`proof_checker` (the completion's Coq proof of the row's theorem, checked
by ``coqc`` in the sandbox) and :func:`reward_model` (a local sequence-classification
model). The runner
(:func:`score_completions`) calls them concurrently and applies each one's ``on_error``.
"""

from grpo.rewards.code import code_reward, extract_code
from grpo.rewards.format import r1_format
from grpo.rewards.math import extract_answer, is_equivalent, math_equivalence, numeric_answer
from grpo.rewards.model import reward_model
from grpo.rewards.proof import proof_checker, proof_tasks
from grpo.rewards.resolve import resolve_reward_functions
from grpo.rewards.runner import RewardError, RewardFunction, RewardScores, score_completions
from grpo.sandbox import SandboxLimits, SandboxResult, run_program, run_python, sandbox_isolation

__all__ = [
    "RewardError",
    "RewardFunction",
    "RewardScores",
    "SandboxLimits",
    "SandboxResult",
    "code_reward",
    "extract_answer",
    "extract_code",
    "is_equivalent",
    "math_equivalence",
    "numeric_answer",
    "proof_checker",
    "proof_tasks",
    "r1_format",
    "resolve_reward_functions",
    "reward_model",
    "run_program",
    "run_python",
    "sandbox_isolation",
    "score_completions",
]
