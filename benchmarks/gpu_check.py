"""The GPU check: one script for the day a GPU is lent, in under 8 minutes on one GPU.

    bash scripts/gpu_check.sh [--out gpu_check] [--steps 3]
    bash scripts/gpu_check.sh --dry --out DIR      # CPU, tiny model, 1 step (the test suite)

On a Qwen2.5-0.5B-shaped model (hidden 896, intermediate 4864, 24 layers, 14 heads, 2 KV
heads, vocabulary 151936, tied embeddings) with random weights, built here, in bf16. It is
a ``LlamaForCausalLM`` of that shape (Qwen2 adds only q/k/v biases): under a ``qwen2``
config transformers loads its own Qwen2 tokenizer class, which does not read the local
word-level tokenizer this script builds.

1. **Rollout tokens/s**: grpo's engine, eager and with its decode step compiled
   (``rollout.compile = true``: CUDA graphs; its compile seconds apart), against
   ``transformers.generate``, the same prompts, G, length and temperature, all returning
   the sampled tokens' log-probs (:mod:`rollout_speed`'s functions, alternating runs,
   medians). ``--dry`` leaves the compiled engine out (its own test covers it on the CPU).
2. **Training steps**: grpo against TRL's ``GRPOTrainer`` with HF generation, each in its
   own process (:mod:`trl_compare`'s child), the median step and its phases.
3. **Peak GPU memory** of each (``torch.cuda.max_memory_allocated``).
4. **The real model**: 1 and 2 again on SmolLM2-135M-Instruct in bf16 (the GGUF file of
   ``grpo demo --task smollm2``, from the grpo cache: a GPU machine that cannot reach the
   package registry needs it there already, else this part is skipped and says why), with
   64 of the real-model demo's questions in its chat template and the share of digits as the
   reward (:mod:`smollm2_bench`). ``--dry`` skips it: its functions are those of 1 and 2.

It writes ``results.json`` and ``results.md`` to ``--out``. vLLM is not needed. TRL comes
from the ``bench`` extra; without it the TRL run is skipped and the results say so.
``--dry`` runs every part on the CPU in float32 with a 2-layer model and 1 step, so the
script is exercised by the test suite and cannot rot unnoticed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from rollout_speed import alternating_medians, engine_seconds, generate_seconds
from trl_compare import build_model_dir, run_child, write_prompts

QWEN_05B = {"hidden": 896, "intermediate": 4864, "layers": 24, "heads": 14, "kv_heads": 2}
DRY = {"hidden": 64, "intermediate": 128, "layers": 2, "heads": 4, "kv_heads": 2}


def rollout_check(model_dir: Path, args: argparse.Namespace, device: str) -> dict[str, Any]:
    """Tokens/s of grpo's engine and of ``transformers.generate``, side by side."""
    from transformers import AutoModelForCausalLM

    from grpo.rollout.hf_engine import TransformersEngine

    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).to(device).eval()
    generator = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    prompts = [
        torch.randint(3, vocab, (args.prompt_tokens,), generator=generator).tolist()
        for _ in range(args.prompts)
    ]
    pad = model.config.pad_token_id
    engine = TransformersEngine(model, pad_token_id=pad, eos_token_ids={-1})  # never stops
    runs = [
        lambda: engine_seconds(engine, prompts, args.group, args.new_tokens),
        lambda: generate_seconds(model, prompts, args.group, args.new_tokens, pad),
    ]
    compiled = None
    if not args.dry:  # the compiled step: CUDA graphs on a GPU (its test runs on the CPU)
        compiled = TransformersEngine(model, pad_token_id=pad, eos_token_ids={-1}, compile=True)
        runs.append(lambda: engine_seconds(compiled, prompts, args.group, args.new_tokens))
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    medians = alternating_medians(runs, args.repeats)
    tokens = args.prompts * args.group * args.new_tokens
    return {
        "engine_tokens_per_s": tokens / medians[0],
        "generate_tokens_per_s": tokens / medians[1],
        "engine_s": medians[0],
        "generate_s": medians[1],
        "compiled_tokens_per_s": tokens / medians[2] if compiled else None,
        "compiled_s": medians[2] if compiled else None,
        "compile_s": compiled.compile_seconds if compiled else None,
        "peak_gpu_bytes": torch.cuda.max_memory_allocated() if device == "cuda" else None,
    }


def training_check(
    model_dir: Path,
    prompts: Path,
    args: argparse.Namespace,
    device: str,
    reward: str = "even_share",
) -> dict:
    """Median GRPO steps of grpo and of TRL (skipped, and said, without TRL)."""
    work = prompts.parent
    settings = SimpleNamespace(threads=torch.get_num_threads(), micro_batch=args.micro_batch)
    settings.cap_gb, settings.child_timeout = 1e6, 0
    settings.trl_micro_batch = 64  # TRL trains its 64 completions in one pass on a GPU
    trainers = ["grpo", "trl"] if importlib.util.find_spec("trl") else ["grpo"]
    results: dict[str, Any] = {}
    for trainer in trainers:
        results[trainer] = run_child(
            trainer,
            model_dir,
            prompts,
            settings,
            work / f"{trainer}.json",
            steps=args.steps,
            max_new_tokens=args.new_tokens,
            device=device,
            dtype=args.dtype,
            reward=reward,
        )
        results[trainer].pop("per_step", None)
        results[trainer].pop("rewards", None)
    if "trl" not in results:
        results["trl"] = {"skipped": "TRL is not installed (pip install -e '.[bench]')"}
    return results


def real_model_check(work: Path, args: argparse.Namespace, device: str) -> dict[str, Any]:
    """Rollout tokens/s and GRPO steps on SmolLM2-135M-Instruct; skipped, saying why, where
    its GGUF cannot be had."""
    from smollm2_bench import smollm2_model_dir, write_smollm2_prompts

    from grpo.demo.smollm2 import FetchError

    try:
        model_dir = smollm2_model_dir(work / "smollm2", dtype=args.dtype)
    except FetchError as error:
        return {"skipped": f"SmolLM2-135M-Instruct cannot be had here: {error}"}
    prompts = work / "smollm2" / "prompts.jsonl"
    prompt_tokens = write_smollm2_prompts(prompts, model_dir, args.prompts * args.group)
    real_args = argparse.Namespace(**{**vars(args), "prompt_tokens": round(prompt_tokens)})
    rollout = rollout_check(model_dir, real_args, device)
    print(f"real model rollout: {rollout}", flush=True)
    training = training_check(model_dir, prompts, real_args, device, reward="digit_share")
    return {"rollout": rollout, "training": training, "prompt_tokens": prompt_tokens}


def markdown(report: dict[str, Any]) -> str:
    """The results as short Markdown tables: the Qwen-shaped model's, then the real model's."""
    lines = [
        f"GPU check ({report['model']}, {report['dtype']}, {report['device_name']}): "
        f"{report['prompts']} prompts × G = {report['group']}, {report['prompt_tokens']}-token "
        f"prompts, {report['new_tokens']} new tokens; {report['seconds']:.0f} s in all.",
        "",
        *_table(report["rollout"], report["training"]),
    ]
    real = report.get("real_model")
    if real is not None:
        lines += ["", f"SmolLM2-135M-Instruct ({report['dtype']}), the same settings:", ""]
        if "skipped" in real:
            lines.append(f"Skipped: {real['skipped']}.")
        else:
            lines += _table(real["rollout"], real["training"])
    return "\n".join(lines)


def _table(rollout: dict[str, Any], training: dict[str, Any]) -> list[str]:
    gib = 2**30

    def memory(value: int | None) -> str:
        return f"{value / gib:.1f} GiB" if value else "—"

    lines = [
        "| | grpo | reference | grpo / reference |",
        "|---|---:|---:|---:|",
        f"| rollout tokens/s (vs transformers.generate) | {rollout['engine_tokens_per_s']:.0f} "
        f"| {rollout['generate_tokens_per_s']:.0f} "
        f"| {rollout['engine_tokens_per_s'] / rollout['generate_tokens_per_s']:.2f}× |",
    ]
    if rollout["compiled_s"] is not None:
        lines.append(
            f"| rollout tokens/s, compiled decode step (vs eager engine; compiled in "
            f"{rollout['compile_s']:.0f} s) | {rollout['compiled_tokens_per_s']:.0f} "
            f"| {rollout['engine_tokens_per_s']:.0f} "
            f"| {rollout['compiled_tokens_per_s'] / rollout['engine_tokens_per_s']:.2f}× |"
        )
    ours, trl = training["grpo"], training["trl"]
    if "skipped" in trl:
        lines.append(f"| step time, median (s) | {ours['median']['step']:.2f} | skipped | — |")
        lines += ["", f"TRL: {trl['skipped']}."]
        return lines
    for key, label in (("step", "step time, median (s)"), ("rollout", "  rollout (s)")):
        ratio = ours["median"][key] / trl["median"][key]
        lines.append(
            f"| {label} vs TRL | {ours['median'][key]:.2f} | {trl['median'][key]:.2f} "
            f"| {ratio:.2f}× |"
        )
    lines.append(
        f"| peak GPU memory vs TRL | {memory(ours['peak_gpu_bytes'])} "
        f"| {memory(trl['peak_gpu_bytes'])} | — |"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry", action="store_true", help="CPU, tiny model, 1 step")
    parser.add_argument("--out", type=Path, default=Path("gpu_check"))
    parser.add_argument("--steps", type=int, default=3, help="per trainer, warm-up included")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--micro-batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.dry:
        device, shape, args.vocab, args.dtype = "cpu", DRY, 512, "float32"
        args.steps, args.repeats, args.new_tokens, args.prompt_tokens = 1, 1, 8, 16
    elif not torch.cuda.is_available():
        raise SystemExit("gpu_check: no CUDA device here; --dry runs the check on the CPU")
    else:
        device, shape, args.vocab, args.dtype = "cuda", QWEN_05B, 151936, "bfloat16"
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model_dir = work / "model"
        build_model_dir(model_dir, args.vocab, 2048, shape, tied=True, dtype=args.dtype)
        rollout = rollout_check(model_dir, args, device)
        print(f"rollout: {rollout}", flush=True)
        prompts = work / "prompts.jsonl"
        write_prompts(prompts, args.vocab, args.prompt_tokens)
        training = training_check(model_dir, prompts, args, device)
        real_model = None if args.dry else real_model_check(work, args, device)
    report = {
        "model": "dry tiny Llama" if args.dry else "Qwen2.5-0.5B-shaped (random)",
        "device_name": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "dtype": args.dtype,
        **{key: getattr(args, key) for key in ("prompts", "group", "prompt_tokens")},
        "new_tokens": args.new_tokens,
        "steps": args.steps,
        "rollout": rollout,
        "training": training,
        "real_model": real_model,
        "seconds": time.perf_counter() - started,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(report, indent=1))
    (args.out / "results.md").write_text(markdown(report) + "\n")
    print(markdown(report))


if __name__ == "__main__":
    main()
