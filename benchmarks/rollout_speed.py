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

import torch


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
    from grpo.rollout.engine import SamplingParams
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
    params = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens)
    tokens = args.prompts * args.group_size * args.new_tokens

    def run_engine() -> float:
        started = time.perf_counter()
        engine.generate(prompts, args.group_size, params, torch.Generator().manual_seed(1))
        return time.perf_counter() - started

    @torch.no_grad()
    def run_generate() -> float:
        started = time.perf_counter()
        input_ids = torch.tensor(prompts).repeat_interleave(args.group_size, dim=0)
        out = model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=args.new_tokens,
            min_new_tokens=args.new_tokens,
            eos_token_id=None,
            pad_token_id=tokenizer.pad_token_id,
            output_logits=True,
            return_dict_in_generate=True,
        )
        logits = torch.stack(out.logits, dim=1).float()
        new_tokens = out.sequences[:, input_ids.shape[1] :]
        torch.log_softmax(logits, dim=-1).gather(-1, new_tokens[..., None])
        return time.perf_counter() - started

    run_engine(), run_generate()  # warm-up
    engine_times, generate_times = [], []
    for _ in range(args.repeats):
        engine_times.append(run_engine())
        generate_times.append(run_generate())
    engine_s, generate_s = statistics.median(engine_times), statistics.median(generate_times)
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
