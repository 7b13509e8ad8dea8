"""Rollout throughput: grpo's TransformersEngine vs transformers' `generate`, side by side.

Both sample G completions for each prompt from the same model at the same temperature and
return the sampled tokens' log-probs (which GRPO needs). The engine prefills each prompt
once and shares its KV cache across the group; `generate` sees G copies of every prompt.
Runs alternate (A, B, A, B, …) so machine noise hits both; the median is reported.

    python benchmarks/rollout_speed.py [--prompt-tokens 128] [--new-tokens 32] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch


def _synchronized_clock(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # kernels run asynchronously: wait before reading
    return time.perf_counter()


def engine_seconds(engine, prompts: list[list[int]], group_size: int, new_tokens: int) -> float:
    """Seconds for grpo's engine to sample ``group_size`` completions of each prompt."""
    from grpo.rollout.engine import SamplingParams

    device = next(engine.model.parameters()).device
    params = SamplingParams(temperature=1.0, max_new_tokens=new_tokens)
    started = _synchronized_clock(device)
    engine.generate(prompts, group_size, params, torch.Generator().manual_seed(1))
    return _synchronized_clock(device) - started


@torch.no_grad()
def generate_seconds(
    model, prompts: list[list[int]], group_size: int, new_tokens: int, pad_token_id: int
) -> float:
    """Seconds for ``model.generate`` to do the same, with the sampled tokens' log-probs."""
    device = next(model.parameters()).device
    started = _synchronized_clock(device)
    input_ids = torch.tensor(prompts, device=device).repeat_interleave(group_size, dim=0)
    out = model.generate(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        eos_token_id=None,
        pad_token_id=pad_token_id,
        output_logits=True,
        return_dict_in_generate=True,
    )
    logits = torch.stack(out.logits, dim=1).float()
    new_ids = out.sequences[:, input_ids.shape[1] :]
    torch.log_softmax(logits, dim=-1).gather(-1, new_ids[..., None])
    return _synchronized_clock(device) - started


def alternating_medians(
    run_a: Callable[[], float], run_b: Callable[[], float], repeats: int
) -> tuple[float, float]:
    """One warm-up each, then A, B, A, B, …: the median seconds of each."""
    run_a(), run_b()
    times_a, times_b = [], []
    for _ in range(repeats):
        times_a.append(run_a())
        times_b.append(run_b())
    return statistics.median(times_a), statistics.median(times_b)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import transformers

    from grpo.demo.model import build_tiny_llama
    from grpo.demo.tokenizer import build_char_tokenizer
    from grpo.rollout.hf_engine import TransformersEngine

    transformers.utils.logging.set_verbosity_error()
    tokenizer = build_char_tokenizer()
    model = build_tiny_llama(
        tokenizer, hidden_size=args.hidden, layers=args.layers, max_positions=1024
    ).eval()
    generator = torch.Generator().manual_seed(0)
    vocab = len(tokenizer)
    prompts = [
        torch.randint(3, vocab, (args.prompt_tokens,), generator=generator).tolist()
        for _ in range(args.prompts)
    ]
    never_stop = -1  # both sides run the full length, so the token counts are equal
    engine = TransformersEngine(
        model, pad_token_id=tokenizer.pad_token_id, eos_token_ids={never_stop}
    )
    tokens = args.prompts * args.group_size * args.new_tokens

    def run_engine() -> float:
        return engine_seconds(engine, prompts, args.group_size, args.new_tokens)

    def run_generate() -> float:
        return generate_seconds(
            model, prompts, args.group_size, args.new_tokens, tokenizer.pad_token_id
        )

    engine_s, generate_s = alternating_medians(run_engine, run_generate, args.repeats)
    print(
        f"model: Llama {args.layers} layers × {args.hidden} hidden; {args.prompts} prompts × "
        f"G={args.group_size}, {args.prompt_tokens}-token prompts, {args.new_tokens} new tokens; "
        f"{torch.get_num_threads()} threads"
    )
    print(f"grpo TransformersEngine : {tokens / engine_s:8.0f} tokens/s  ({engine_s:.2f} s)")
    print(f"transformers generate   : {tokens / generate_s:8.0f} tokens/s  ({generate_s:.2f} s)")
    print(f"speed-up                : {generate_s / engine_s:.2f}×")


if __name__ == "__main__":
    main()
