"""Rollout throughput on one GPU: vLLM (``grpo.rollout.vllm_engine``) vs the built-in engine.

Both engines roll out G completions for each of the same prompts from the same local model
directory at the same temperature, returning the sampled tokens' log-probs; tokens/s counts
the completion tokens each actually generated (EOS ends a row early). vLLM runs as the
trainer runs it: colocated, asleep between rollouts (the wake-up is in its time).

It also checks what the trainer relies on:

* the sampler-vs-trainer log-prob gap, mean |log π_vLLM − log π_trainer| over tokens, at
  temperature 1 (kernels and precision only; small);
* the weight push: after the policy's weights move, vLLM's log-probs follow them only
  once ``sync_weights`` ran (the gap to the moved policy is large before, small after).

    python benchmarks/vllm_rollout.py [--model DIR] [--prompts 32] [--group-size 8]

Without ``--model`` a random Llama (~90 M parameters, character tokenizer) is built in a
temporary folder: nothing is downloaded. Needs a CUDA GPU and ``pip install 'grpo[vllm]'``
(exits 2 saying so otherwise); a few minutes on one GPU. Exit 1 if a check fails.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="local Hugging Face model directory (default: build one)")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.4)
    args = parser.parse_args()

    try:
        from grpo.rollout.vllm_engine import import_vllm

        import_vllm()
    except (ImportError, RuntimeError) as error:
        print(f"vllm_rollout: cannot run here: {error}", file=sys.stderr)
        return 2

    import transformers

    from grpo.models.loading import DTYPES
    from grpo.models.logprobs import completion_logprobs
    from grpo.rollout.engine import SamplingParams
    from grpo.rollout.hf_engine import TransformersEngine
    from grpo.rollout.vllm_engine import VLLMEngine

    transformers.utils.logging.set_verbosity_error()
    model_dir = Path(args.model) if args.model else _build_model(Path(tempfile.mkdtemp()))
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    eos_ids = {tokenizer.eos_token_id}
    dtype = DTYPES[args.dtype]
    policy = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    policy = policy.cuda().eval()
    generator = torch.Generator().manual_seed(0)
    special = set(tokenizer.all_special_ids)
    vocabulary = [i for i in range(len(tokenizer)) if i not in special]
    prompts = [
        [
            vocabulary[int(i)]
            for i in torch.randint(len(vocabulary), (args.prompt_tokens,), generator=generator)
        ]
        for _ in range(args.prompts)
    ]
    params = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens)
    builtin = TransformersEngine(
        policy,
        pad_token_id=pad_id,
        eos_token_ids=eos_ids,
        max_sequences_per_batch=args.prompts * args.group_size,
    )
    started = time.perf_counter()
    vllm_engine = VLLMEngine(
        str(model_dir),
        tokenizer_path=str(model_dir),
        pad_token_id=pad_id,
        eos_token_ids=eos_ids,
        device=torch.device("cuda"),
        dtype=args.dtype,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_len=args.prompt_tokens + args.new_tokens,
        sleep=True,
    )
    print(f"vLLM engine ready in {time.perf_counter() - started:.0f} s")

    def timed(engine, seed: int) -> tuple[float, int, object]:
        torch.cuda.synchronize()
        began = time.perf_counter()
        rollout = engine.generate(
            prompts, args.group_size, params, torch.Generator("cuda").manual_seed(seed)
        )
        torch.cuda.synchronize()
        return time.perf_counter() - began, int(rollout.completion_mask_BT.sum()), rollout

    for engine in (builtin, vllm_engine):  # warm-up: kernels, allocator, CUDA graphs
        timed(engine, 0)
    results: dict[str, list[tuple[float, int]]] = {"builtin": [], "vllm": []}
    for repeat in range(args.repeats):  # alternating, so machine noise hits both
        for name, engine in (("builtin", builtin), ("vllm", vllm_engine)):
            seconds, tokens, _ = timed(engine, repeat + 1)
            results[name].append((seconds, tokens))
    rates = {
        name: statistics.median(tokens / seconds for seconds, tokens in runs)
        for name, runs in results.items()
    }
    print(
        f"\n{args.prompts} prompts × G = {args.group_size}, {args.prompt_tokens}-token prompts, "
        f"≤ {args.new_tokens} new tokens, temperature 1, {args.dtype}; median of {args.repeats}"
    )
    print("| engine | tokens/s | seconds |\n|---|---:|---:|")
    for name, label in (("builtin", "grpo TransformersEngine"), ("vllm", "vLLM (sleeps between)")):
        seconds = statistics.median(s for s, _ in results[name])
        print(f"| {label} | {rates[name]:.0f} | {seconds:.2f} |")
    print(f"speed-up {rates['vllm'] / rates['builtin']:.2f}×")

    def gap(rollout, model) -> float:
        total, count = 0.0, 0
        with torch.no_grad():
            for rows in torch.arange(rollout.completion_ids_BT.shape[0]).split(16):
                mask = rollout.completion_mask_BT[rows]
                logp, _ = completion_logprobs(
                    model,
                    rollout.prompt_ids_BP[rows],
                    rollout.prompt_mask_BP[rows],
                    rollout.completion_ids_BT[rows],
                    mask,
                )
                total += float(((logp - rollout.sampler_logp_BT[rows]).abs() * mask).sum())
                count += int(mask.sum())
        return total / max(count, 1)

    baseline = gap(timed(vllm_engine, 7)[2], policy)
    with torch.no_grad():  # move the policy as an optimizer step would
        for parameter in policy.parameters():
            parameter.add_(torch.randn_like(parameter) * parameter.float().std().to(dtype) * 0.1)
    stale = gap(timed(vllm_engine, 8)[2], policy)
    vllm_engine.sync_weights(policy)
    synced = gap(timed(vllm_engine, 9)[2], policy)
    print(
        f"\nsampler-vs-trainer log-prob gap (mean |Δ| per token): {baseline:.4f} before the "
        f"update; after it {stale:.4f} without the push, {synced:.4f} with it"
    )
    passed = synced < 0.5 * stale and synced < max(2 * baseline, 0.05)
    print("weight push:", "PASS" if passed else "FAIL")
    return 0 if passed else 1


def _build_model(directory: Path) -> Path:
    from grpo.demo.model import build_tiny_llama
    from grpo.demo.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer(directory)
    build_tiny_llama(
        tokenizer, hidden_size=768, layers=12, heads=12, max_positions=1024, directory=directory
    )
    return directory


if __name__ == "__main__":
    raise SystemExit(main())
