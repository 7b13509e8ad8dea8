"""Rollout throughput: grpo's TransformersEngine vs transformers' `generate`, side by side.

Both sample G completions for each prompt from the same model at the same temperature and
return the sampled tokens' log-probs (which GRPO needs). The engine prefills each prompt
once and shares its KV cache across the group; `generate` sees G copies of every prompt.
Runs alternate (A, B, A, B, …) so machine noise hits both; the median is reported.
``--compile`` adds the engine with its decode step compiled (``rollout.compile = true``)
beside the eager one: its first rollout pays the compilation, reported apart.
``--model trl`` samples from trl_compare's model (58M Llama, vocabulary 32000) instead of
the tiny one.

    python benchmarks/rollout_speed.py [--prompt-tokens 128] [--new-tokens 32] [--repeats 3]
    python benchmarks/rollout_speed.py --compile --model trl --prompt-tokens 32 --new-tokens 64
"""

from __future__ import annotations

import argparse
import functools
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


def alternating_medians(runs: list[Callable[[], float]], repeats: int) -> list[float]:
    """One warm-up each, then A, B, …, A, B, …: the median seconds of each."""
    for run in runs:
        run()
    times: list[list[float]] = [[] for _ in runs]
    for _ in range(repeats):
        for run, seconds in zip(runs, times, strict=True):
            seconds.append(run())
    return [statistics.median(seconds) for seconds in times]


def _model(which: str, hidden: int, layers: int) -> tuple[torch.nn.Module, int, int]:
    """(model, vocabulary size, pad id): the tiny demo-style Llama or trl_compare's."""
    if which == "trl":
        import sys
        import tempfile
        from pathlib import Path

        from transformers import AutoModelForCausalLM

        sys.path.insert(0, str(Path(__file__).parent))
        from trl_compare import build_model_dir

        with tempfile.TemporaryDirectory() as directory:
            build_model_dir(Path(directory), vocab=32000, max_positions=1024)
            return AutoModelForCausalLM.from_pretrained(directory).eval(), 32000, 0
    from grpo.demo.model import build_tiny_llama
    from grpo.demo.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    model = build_tiny_llama(tokenizer, hidden_size=hidden, layers=layers, max_positions=1024)
    return model.eval(), len(tokenizer), tokenizer.pad_token_id


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compile", action="store_true", help="add the compiled decode step")
    parser.add_argument("--model", choices=["tiny", "trl"], default="tiny")
    args = parser.parse_args()

    import transformers

    from grpo.rollout.hf_engine import TransformersEngine

    transformers.utils.logging.set_verbosity_error()
    model, vocab, pad_id = _model(args.model, args.hidden, args.layers)
    generator = torch.Generator().manual_seed(0)
    prompts = [
        torch.randint(3, vocab, (args.prompt_tokens,), generator=generator).tolist()
        for _ in range(args.prompts)
    ]
    never_stop = -1  # every side runs the full length, so the token counts are equal
    engines = {
        "grpo TransformersEngine": TransformersEngine(
            model, pad_token_id=pad_id, eos_token_ids={never_stop}
        )
    }
    if args.compile:
        engines["grpo, compiled decode step"] = TransformersEngine(
            model, pad_token_id=pad_id, eos_token_ids={never_stop}, compile=True
        )
    runs = {
        name: functools.partial(engine_seconds, engine, prompts, args.group_size, args.new_tokens)
        for name, engine in engines.items()
    }
    runs["transformers generate"] = functools.partial(
        generate_seconds, model, prompts, args.group_size, args.new_tokens, pad_id
    )
    tokens = args.prompts * args.group_size * args.new_tokens
    medians = dict(zip(runs, alternating_medians(list(runs.values()), args.repeats), strict=True))
    print(
        f"model: {args.model}; {args.prompts} prompts × G={args.group_size}, "
        f"{args.prompt_tokens}-token prompts, {args.new_tokens} new tokens; "
        f"{torch.get_num_threads()} threads; median of {args.repeats}"
    )
    print("| engine | tokens/s | seconds | compile s | vs generate |")
    print("|---|---:|---:|---:|---:|")
    for name, seconds in medians.items():
        engine = engines.get(name)
        compile_s = f"{engine.compile_seconds:.1f}" if engine is not None else "—"
        print(
            f"| {name} | {tokens / seconds:.0f} | {seconds:.2f} | {compile_s} | "
            f"{medians['transformers generate'] / seconds:.2f}× |"
        )


if __name__ == "__main__":
    main()
