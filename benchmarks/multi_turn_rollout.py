"""Multi-turn rollout: continuing from the KV cache vs recomputing each turn from scratch.

A 3-turn rollout on the built-in engine's turn sessions (:mod:`grpo.rollout.hf_turns`):
each turn samples ``--new-tokens`` tokens per row, then ``--inserted-tokens`` tool-result
tokens are inserted. With the cache (the default) a turn prefills only its new tokens; the
baseline (``reuse_cache=False``) prefills every row's whole history again at each turn.
Both draw the same noise, so they must sample the same tokens (checked). Runs alternate
(A, B, A, B, …) so machine noise hits both; the medians are reported.

    python benchmarks/multi_turn_rollout.py [--prompt-tokens 128] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--inserted-tokens", type=int, default=64)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import transformers

    from grpo.demo.model import build_tiny_llama
    from grpo.demo.tokenizer import build_char_tokenizer
    from grpo.rollout.engine import RolloutRequest, SamplingParams
    from grpo.rollout.hf_engine import TransformersEngine
    from grpo.rollout.hf_turns import HFTurnSession

    transformers.utils.logging.set_verbosity_error()
    tokenizer = build_char_tokenizer()
    model = build_tiny_llama(
        tokenizer, hidden_size=args.hidden, layers=args.layers, max_positions=2048
    ).eval()
    generator = torch.Generator().manual_seed(0)
    vocab = len(tokenizer)
    prompts = [
        torch.randint(3, vocab, (args.prompt_tokens,), generator=generator).tolist()
        for _ in range(args.prompts)
    ]
    rows = args.prompts * args.group_size
    inserted = torch.randint(3, vocab, (args.inserted_tokens,), generator=generator).tolist()
    engine = TransformersEngine(model, pad_token_id=tokenizer.pad_token_id, eos_token_ids={-1})
    params = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens)

    def rollout(reuse_cache: bool) -> tuple[float, list[list[int]]]:
        request = RolloutRequest(
            prompts, args.group_size, params, torch.Generator().manual_seed(1), 0, rows
        )
        session = HFTurnSession(engine, request, args.new_tokens * args.turns, reuse_cache)
        sampled: list[list[int]] = [[] for _ in range(rows)]
        started = time.perf_counter()
        for turn in range(args.turns):
            insert = [[] if turn == 0 else inserted for _ in range(rows)]
            outputs = session.generate(list(range(rows)), insert, [args.new_tokens] * rows)
            for row, output in enumerate(outputs):
                sampled[row] += output.token_ids
        return time.perf_counter() - started, sampled

    cached, recomputed = [], []
    for _ in range(args.repeats):
        seconds, tokens_a = rollout(True)
        cached.append(seconds)
        seconds, tokens_b = rollout(False)
        recomputed.append(seconds)
        if tokens_a != tokens_b:
            raise SystemExit("the cached and recomputed rollouts sampled different tokens")
    a, b = statistics.median(cached), statistics.median(recomputed)
    print(
        f"{args.turns} turns, {rows} rows, prompt {args.prompt_tokens}, "
        f"{args.new_tokens} sampled + {args.inserted_tokens} inserted tokens per turn"
    )
    print(f"KV cache reused: {a:.2f} s (runs {[round(s, 2) for s in cached]})")
    print(f"recomputed each turn: {b:.2f} s (runs {[round(s, 2) for s in recomputed]})")
    print(f"speed-up {b / a:.2f}x; the same tokens sampled")


if __name__ == "__main__":
    main()
