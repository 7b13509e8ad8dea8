"""grpo vs TRL's GRPOTrainer: step time, its split, tokens/s, peak RSS, the machine's ceiling.

    pip install -e ".[bench]"            # TRL 1.16, for this benchmark only
    python benchmarks/trl_compare.py [--steps 4] [--threads N] [--scaling] [--cap-gb 14]
    python benchmarks/trl_compare.py --prompt-tokens 256   # the long-prompt setting
    python benchmarks/trl_compare.py --model smollm2       # the real pretrained model

Builds, locally and with random weights, a Llama (hidden 512, intermediate 1376, 8 layers,
8 heads, untied embeddings; ~58M parameters at vocabulary 32000), a word-level tokenizer of
that vocabulary, and 64 prompts of ``--prompt-tokens`` tokens (32; the long-prompt setting is
256, where processing each prompt once per group matters most). Each trainer then runs
``--steps`` steps (the first is a warm-up, left out) in its own subprocess
(``trl_compare_child.py``) with the same settings: 8 prompts × G = 8, T = 64 completion
tokens without early EOS, temperature 1, β = 0.04 (a reference model), μ = 1, lr 1e-6,
seed 0, the same thread count.

``--model smollm2`` runs the same comparison on the real pretrained model instead:
SmolLM2-135M-Instruct (134.5M parameters, 30 layers, vocabulary 49152, tied embeddings) from
the GGUF file the demo fetches, dequantized by grpo's loader and saved as one folder that both
trainers load; 64 of the real-model demo's questions in its chat template (about 34 tokens
each); T = 48 completion tokens (``--max-new-tokens``); the reward is the share of digits in
the completion (:func:`smollm2_bench.digit_share`), which differs within every group. TRL
then trains its 64 completions in passes of ``--micro-batch`` sequences, as grpo does (one
pass of 64 took TRL past 14 GB on this model's 49152-token vocabulary; ``--trl-micro-batch``
sets it).

The ceiling is fp32 ``torch.mm`` FLOP/s measured in this run (best of a few shapes, before
and after the trainers); each phase's FLOPs are counted from the model's shapes (matmuls
only; the minimum the algorithm needs, the same count for both trainers: each prompt once
per group in every pass, the G completions attending to it). ``--unshared`` adds a grpo run
with ``train.share_prompt = false`` (each prompt G times in the training passes);
``--compiled`` one with ``train.compile`` and ``rollout.compile`` on (its warm-up step
pays the compilation, reported apart).

``--scaling`` adds peak RSS against vocabulary (8k → 128k at T = 64) and completion length
(64 → 512 at 32k), one step per point; a child whose RSS passes ``--cap-gb`` is killed and
reported as "> cap", so no point can swap the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

CHILD = Path(__file__).with_name("trl_compare_child.py")
PROMPTS, GROUP, PROMPTS_PER_STEP = 64, 8, 8
ROWS = PROMPTS_PER_STEP * GROUP  # completions per step
MODEL = {"hidden": 512, "intermediate": 1376, "layers": 8, "heads": 8}
sys.path.insert(0, str(Path(__file__).parent))


def build_tokenizer(directory: Path, vocab: int) -> Any:
    """A word-level tokenizer of ``vocab`` words ``t<n>``, saved in ``directory``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<eos>", "<unk>"]
    words = {token: i for i, token in enumerate(specials)}
    words.update({f"t{n}": len(specials) + n for n in range(vocab - len(specials))})
    backend = Tokenizer(models.WordLevel(vocab=words, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    tokenizer.save_pretrained(str(directory))
    return tokenizer


def build_model_dir(
    directory: Path,
    vocab: int,
    max_positions: int,
    shape: dict[str, int] | None = None,
    tied: bool = False,
    dtype: str = "float32",
) -> None:
    """:func:`build_tokenizer` and a random Llama of ``shape`` (:data:`MODEL`'s by default;
    ``kv_heads`` defaults to ``heads``), saved in ``dtype``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    shape = shape or MODEL
    tokenizer = build_tokenizer(directory, vocab)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=shape["hidden"],
        intermediate_size=shape["intermediate"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape.get("kv_heads", shape["heads"]),
        max_position_embeddings=max_positions,
        tie_word_embeddings=tied,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config).to(getattr(torch, dtype))
    model.save_pretrained(str(directory), safe_serialization=True)


def write_prompts(path: Path, vocab: int, prompt_tokens: int) -> None:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab - 3, (PROMPTS, prompt_tokens), generator=generator)
    rows = [{"prompt": " ".join(f"t{n}" for n in row)} for row in ids.tolist()]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def matmul_ceiling(threads: int) -> float:
    """Best fp32 torch.mm FLOP/s over square and this model's shapes (median of repeats)."""
    torch.set_num_threads(threads)
    shapes = [(2048, 2048, 2048), (4096, 512, 1376), (4096, 1376, 512), (2048, 512, 32000)]
    best = 0.0
    for m, k, n in shapes:
        a, b = torch.randn(m, k), torch.randn(k, n)
        torch.mm(a, b)
        times = []
        for _ in range(5):
            started = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - started)
        best = max(best, 2 * m * k * n / statistics.median(times))
    return best


def step_flops(
    vocab: int, completion: int, prompt_tokens: float, shape: dict[str, int] | None = None
) -> dict[str, float]:
    """Matmul FLOPs of one step's phases (2·m·n·k), counted from the shapes (:data:`MODEL`'s
    by default; ``kv_heads`` for grouped-query attention): each prompt once per group, each
    row's completion attending to its prompt and itself."""
    shape = shape or MODEL
    d, inner, layers = shape["hidden"], shape["intermediate"], shape["layers"]
    kv_width = d * shape.get("kv_heads", shape["heads"]) // shape["heads"]
    prompt_tokens = round(prompt_tokens)
    # projections (q and o: d×d; k and v: d×kv_width) + MLP (three d×inner)
    per_token = layers * (2 * (2 * d * d + 2 * d * kv_width) + 2 * 3 * d * inner)
    head = 2 * d * vocab

    def attention(context: int) -> float:  # QKᵀ and AV for one token attending to `context`
        return layers * 4 * context * d

    def forward(tokens: int, scored: int, before: int = 0) -> float:
        attended = sum(attention(before + c) for c in range(1, tokens + 1))
        return tokens * per_token + attended + scored * head

    # Rollout: each prompt's prefill once (one logit), then T − 1 decode steps for every row.
    prefill = PROMPTS_PER_STEP * forward(prompt_tokens, 1)
    decode = sum(
        ROWS * (per_token + attention(prompt_tokens + t) + head) for t in range(1, completion)
    )
    # Training passes: the prompts once (the last one's logit scores the first token), then
    # every row's completion after its prompt.
    full = PROMPTS_PER_STEP * forward(prompt_tokens, 1) + ROWS * forward(
        completion, completion - 1, before=prompt_tokens
    )
    return {"rollout": prefill + decode, "reference": full, "policy": 3 * full, "optimizer": 0.0}


def run_child(trainer: str, model_dir: Path, prompts: Path, args, out: Path, **extra) -> dict:
    """Run one trainer in a subprocess, killing it when its RSS passes the cap."""
    command = [
        sys.executable,
        str(CHILD),
        trainer,
        f"--model-dir={model_dir}",
        f"--prompts={prompts}",
        f"--threads={args.threads}",
        f"--micro-batch={args.micro_batch}",
        f"--trl-micro-batch={args.trl_micro_batch}",
        f"--out={out}",
        *[f"--{key.replace('_', '-')}={value}" for key, value in extra.items()],
    ]
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    cap, peak = args.cap_gb * 2**30, 0
    stopped = None
    while child.poll() is None:
        peak = max(peak, _rss_bytes(child.pid))
        if peak > cap:
            stopped = {"exceeded_gb": args.cap_gb}
        elif args.child_timeout and time.perf_counter() - started > args.child_timeout:
            stopped = {"timed_out_s": args.child_timeout}
        if stopped:
            os.kill(child.pid, signal.SIGKILL)
            break
        time.sleep(0.1)
    output, _ = child.communicate()
    seconds = time.perf_counter() - started
    if stopped:
        return {"trainer": trainer, **stopped, "peak_rss_seen_bytes": peak, "wall_s": seconds}
    if child.returncode != 0:
        raise RuntimeError(f"{trainer} child failed ({child.returncode}):\n{output[-4000:]}")
    return {**json.loads(out.read_text()), "wall_s": seconds}


def _rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def headline_table(results: dict[str, dict], flops: dict[str, float], ceiling: float) -> str:
    tokens = ROWS * results["grpo"]["max_new_tokens"]
    lines = [
        "| | grpo | TRL 1.16 | grpo / TRL |",
        "|---|---:|---:|---:|",
    ]

    def row(label: str, ours: float, theirs: float, fmt: str = "{:.2f}") -> None:
        ratio = ours / theirs if theirs else float("nan")
        lines.append(f"| {label} | {fmt.format(ours)} | {fmt.format(theirs)} | {ratio:.2f}× |")

    ours, theirs = results["grpo"]["median"], results["trl"]["median"]
    row("step time, median (s)", ours["step"], theirs["step"])
    if "grpo-unshared" in results:
        unshared = results["grpo-unshared"]["median"]["step"]
        row("  grpo, each prompt G times (share_prompt off) (s)", unshared, theirs["step"])
    if "grpo-compiled" in results:
        compiled = results["grpo-compiled"]
        label = (
            f"  grpo, compiled (train and rollout; compiling took {compiled['compile_s']:.0f} s)"
        )
        row(label, compiled["median"]["step"], theirs["step"])
        for phase in ("rollout", "reference", "policy"):
            row(f"    {phase} (s)", compiled["median"][phase], theirs[phase])
    for phase in ("rollout", "reference", "policy", "optimizer"):
        row(f"  {phase} (s)", ours[phase], theirs[phase])
    phases = ("rollout", "reference", "policy", "optimizer")
    other_ours = ours["step"] - sum(ours[p] for p in phases)
    other_theirs = theirs["step"] - sum(theirs[p] for p in phases)
    row("  other: rewards, advantages, clipping, logging (s)", other_ours, other_theirs)
    row("completion tokens / s", tokens / ours["step"], tokens / theirs["step"], "{:.0f}")
    row(
        "peak RSS (GB)",
        results["grpo"]["peak_rss_bytes"] / 1e9,
        results["trl"]["peak_rss_bytes"] / 1e9,
    )
    row("reward mean", results["grpo"]["reward_mean"], results["trl"]["reward_mean"], "{:.4f}")
    row("reward std", results["grpo"]["reward_std"], results["trl"]["reward_std"], "{:.4f}")
    lines.append("")
    lines.append(f"Matmul ceiling: {ceiling / 1e9:.0f} GFLOP/s (fp32 torch.mm, this run).")
    lines.append("")
    lines.append("| phase | GFLOP | grpo GFLOP/s | grpo % of ceiling | TRL GFLOP/s | TRL % |")
    lines.append("|---|---:|---:|---:|---:|---:|")
    for phase in ("rollout", "reference", "policy"):
        rate_ours, rate_theirs = flops[phase] / ours[phase], flops[phase] / theirs[phase]
        lines.append(
            f"| {phase} | {flops[phase] / 1e9:.0f} | {rate_ours / 1e9:.0f} | "
            f"{rate_ours / ceiling:.0%} | {rate_theirs / 1e9:.0f} | {rate_theirs / ceiling:.0%} |"
        )
    total = sum(flops.values())
    lines.append(
        f"| whole step | {total / 1e9:.0f} | {total / ours['step'] / 1e9:.0f} | "
        f"{total / ours['step'] / ceiling:.0%} | {total / theirs['step'] / 1e9:.0f} | "
        f"{total / theirs['step'] / ceiling:.0%} |"
    )
    return "\n".join(lines)


def scaling_table(points: list[dict]) -> str:
    lines = [
        "| vocabulary | completion tokens | grpo peak RSS (GB) | TRL peak RSS (GB) | grpo / TRL |",
        "|---:|---:|---:|---:|---:|",
    ]
    for point in points:
        cells = []
        for trainer in ("grpo", "trl"):
            result = point[trainer]
            if "exceeded_gb" in result:
                cells.append((f"> {result['exceeded_gb']:g} (killed)", None))
            elif "timed_out_s" in result:
                seen = result["peak_rss_seen_bytes"] / 1e9
                cells.append((f"≥ {seen:.2f} (stopped after {result['timed_out_s']:g} s)", None))
            else:
                gb = result["peak_rss_bytes"] / 1e9
                cells.append((f"{gb:.2f}", gb))
        ratio = f"{cells[0][1] / cells[1][1]:.2f}×" if cells[0][1] and cells[1][1] else "—"
        where = f"| {point['vocab']} | {point['completion']} "
        lines.append(f"{where}| {cells[0][0]} | {cells[1][0]} | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4, help="per trainer, the warm-up included")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--micro-batch", type=int, default=16, help="grpo sequences per pass")
    parser.add_argument(
        "--trl-micro-batch",
        type=int,
        default=0,
        help="TRL sequences per pass (per_device_train_batch_size, the rest accumulated); "
        "0 = 64 (one pass) for the random model, --micro-batch for smollm2",
    )
    parser.add_argument("--prompt-tokens", type=int, default=32, help="256: long-prompt setting")
    parser.add_argument(
        "--model",
        choices=["random", "smollm2"],
        default="random",
        help="random: the ~58M Llama built here; smollm2: the real pretrained model",
    )
    parser.add_argument(
        "--max-new-tokens", type=int, default=0, help="T; 0 = 64 (random) or 48 (smollm2)"
    )
    parser.add_argument(
        "--unshared", action="store_true", help="also grpo with train.share_prompt = false"
    )
    parser.add_argument(
        "--compiled", action="store_true", help="also grpo with train/rollout.compile = true"
    )
    parser.add_argument("--scaling", action="store_true", help="also the memory-scaling table")
    parser.add_argument("--scaling-only", action="store_true")
    parser.add_argument("--cap-gb", type=float, default=14.0, help="kill a child above this RSS")
    parser.add_argument(
        "--grid",
        type=lambda text: [tuple(int(n) for n in point.split("x")) for point in text.split(",")],
        default="8000x64,32000x64,128000x64,32000x256,32000x512",
        help="scaling points, vocabulary x completion tokens",
    )
    parser.add_argument("--child-timeout", type=float, default=0, help="seconds; 0 = none")
    parser.add_argument("--json", type=Path, help="write every measurement here (as it comes)")
    args = parser.parse_args()
    completion = args.max_new_tokens or (48 if args.model == "smollm2" else 64)
    if not args.trl_micro_batch:
        args.trl_micro_batch = args.micro_batch if args.model == "smollm2" else ROWS
    report: dict = {
        "model": args.model,
        "threads": args.threads,
        "micro_batch": args.micro_batch,
        "trl_micro_batch": args.trl_micro_batch,
        "prompt_tokens": args.prompt_tokens,
        "max_new_tokens": completion,
    }
    with tempfile.TemporaryDirectory() as work:
        work_dir = Path(work)

        def setup(vocab: int, completion: int) -> tuple[Path, Path]:
            model_dir = work_dir / f"model-{vocab}"
            if not model_dir.exists():
                build_model_dir(model_dir, vocab, max_positions=args.prompt_tokens + 512)
            prompts = work_dir / f"prompts-{vocab}.jsonl"
            write_prompts(prompts, vocab, args.prompt_tokens)
            return model_dir, prompts

        if not args.scaling_only:
            ceiling_before = matmul_ceiling(args.threads)
            if args.model == "smollm2":
                from smollm2_bench import (
                    SMOLLM2_SHAPE,
                    SMOLLM2_VOCAB,
                    smollm2_model_dir,
                    write_smollm2_prompts,
                )

                model_dir = smollm2_model_dir(work_dir / "smollm2")
                prompts = work_dir / "prompts-smollm2.jsonl"
                report["prompt_tokens"] = write_smollm2_prompts(prompts, model_dir, PROMPTS)
                flops = step_flops(
                    SMOLLM2_VOCAB, completion, report["prompt_tokens"], SMOLLM2_SHAPE
                )
            else:
                model_dir, prompts = setup(32000, 64)
                flops = step_flops(32000, completion, args.prompt_tokens)
            reward = "digit_share" if args.model == "smollm2" else "even_share"
            results = {}
            runs = {"grpo": ("grpo", "true", "false"), "trl": ("trl", "true", "false")}
            if args.unshared:
                runs["grpo-unshared"] = ("grpo", "false", "false")
            if args.compiled:
                runs["grpo-compiled"] = ("grpo", "true", "true")
            for trainer, (child, share, compiled) in runs.items():
                results[trainer] = run_child(
                    child,
                    model_dir,
                    prompts,
                    args,
                    work_dir / f"{trainer}.json",
                    steps=args.steps,
                    max_new_tokens=completion,
                    share_prompt=share,
                    compile=compiled,
                    reward=reward,
                )
                results[trainer]["max_new_tokens"] = completion
                if "median" not in results[trainer]:  # stopped by --cap-gb or --child-timeout
                    raise SystemExit(f"{trainer} was stopped: {results[trainer]}")
                median_step = results[trainer]["median"]["step"]
                print(f"{trainer}: median step {median_step:.2f} s", flush=True)
            ceiling = max(ceiling_before, matmul_ceiling(args.threads))
            report.update(results=results, ceiling=ceiling, flops=flops)
            if args.json:
                args.json.write_text(json.dumps(report, indent=1))
            print(
                f"\n{args.model} model; {args.threads} threads; {args.steps - 1} timed steps per "
                f"trainer; prompts of {report['prompt_tokens']:.0f} tokens, {completion} "
                "completion tokens\n"
            )
            print(headline_table(results, flops, ceiling))
        if args.scaling or args.scaling_only:
            points = []
            for vocab, completion in args.grid:
                model_dir, prompts = setup(vocab, completion)
                point = {"vocab": vocab, "completion": completion}
                for trainer in ("grpo", "trl"):
                    if (vocab, completion) == (32000, 64) and "results" in report:
                        point[trainer] = report["results"][trainer]  # the headline run's point
                        continue
                    point[trainer] = run_child(
                        trainer,
                        model_dir,
                        prompts,
                        args,
                        work_dir / f"{trainer}-{vocab}-{completion}.json",
                        steps=1,
                        max_new_tokens=completion,
                    )
                print(f"scaling point {vocab} × {completion} done", flush=True)
                points.append(point)
                report["scaling"] = points
                if args.json:
                    args.json.write_text(json.dumps(report, indent=1))
            report["scaling"] = points
            print("\n" + scaling_table(points))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
