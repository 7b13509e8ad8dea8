"""How the real-model demo's task was chosen: SmolLM2-135M-Instruct's greedy accuracy on kinds
of arithmetic question, asked bare and with the start of the answer already written.

    python benchmarks/smollm2_kinds.py [--per-kind 30] [--threads N]

For each kind, ``--per-kind`` random questions (seeded) go to the base model in its chat
template. "bare": the model answers the question (at most 48 tokens), scored by the
numeric-answer reward. "prefilled": the assistant turn already holds the start of the
answer ("7 times 4 is"); the model writes at most 6 more tokens, and the first number in
them is compared. The gap between the two is what GRPO can bring out quickly: the model
knows the fact but does not say it when asked. A kind with a low prefilled score has little
to bring out in 20 steps. ``grpo.demo.smollm2_task`` keeps the four kinds with the widest
gaps; addition and subtraction stay out.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

Question = tuple[str, str, int]  # (question, start of the answer, answer)
KINDS: dict[str, Callable[[random.Random], Question]] = {
    "multiply (tables to 12)": lambda r: (
        lambda a, b: (f"What is {a} times {b}?", f"{a} times {b} is", a * b)
    )(r.randint(2, 12), r.randint(2, 12)),
    "divide (exact)": lambda r: (
        lambda b, q: (f"What is {b * q} divided by {b}?", f"{b * q} divided by {b} is", q)
    )(r.randint(2, 12), r.randint(2, 12)),
    "next number": lambda r: (
        lambda n: (f"What number comes after {n}?", f"The number after {n} is", n + 1)
    )(r.randint(10, 998)),
    "multiply 2-digit by 1-digit": lambda r: (
        lambda a, b: (f"What is {a} times {b}?", f"{a} times {b} is", a * b)
    )(r.randint(13, 49), r.randint(2, 9)),
    "add 2-digit": lambda r: (lambda a, b: (f"What is {a} plus {b}?", f"{a} plus {b} is", a + b))(
        r.randint(10, 99), r.randint(10, 99)
    ),
    "subtract 2-digit": lambda r: (
        lambda a, b: (f"What is {a} minus {b}?", f"{a} minus {b} is", a - b)
    )(*sorted((r.randint(10, 99), r.randint(10, 99)), reverse=True)),
}


def greedy(model, tokenizer, texts: list[str], max_new_tokens: int) -> list[str]:
    from grpo.eval.evaluate import greedy_completions

    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    with torch.no_grad():
        return greedy_completions(model, tokenizer, ids, max_new_tokens=max_new_tokens)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-kind", type=int, default=30)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from grpo.demo.smollm2 import fetch_smollm2_gguf
    from grpo.models.loading import load_reference, load_tokenizer
    from grpo.rewards.math import numeric_answer

    gguf = str(fetch_smollm2_gguf())
    tokenizer = load_tokenizer(gguf)
    model = load_reference(gguf, torch.device("cpu"), dtype="float32")
    rng = random.Random(0)
    print("| kind | questions | bare question | answer prefilled |\n|---|---:|---:|---:|")
    for kind, draw in KINDS.items():
        questions = [draw(rng) for _ in range(args.per_kind)]
        heads = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False
            )
            for q, _, _ in questions
        ]
        answers = [str(a) for _, _, a in questions]
        bare = numeric_answer([], greedy(model, tokenizer, heads, 48), answers)
        starts = [head + start for head, (_, start, _) in zip(heads, questions, strict=True)]
        rest = greedy(model, tokenizer, starts, 6)
        firsts = [re.search(r"-?\d+", text) for text in rest]
        prefilled = [bool(m and m.group() == a) for m, a in zip(firsts, answers, strict=True)]
        print(
            f"| {kind} | {args.per_kind} | {sum(bare) / len(bare):.0%} | "
            f"{sum(prefilled) / len(prefilled):.0%} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
