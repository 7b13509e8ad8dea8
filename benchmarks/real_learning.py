"""grpo against TRL's GRPOTrainer on a real pretrained model: held-out accuracy at equal
samples and at equal wall-clock.

    pip install -e ".[bench,gguf,peft]"
    python benchmarks/real_learning.py [--steps 20] [--seeds 0,1] [--eval-every 5]
    python benchmarks/real_learning.py --only grpo --steps 2 --eval-every 1   # a quick look

Both trainers start from the same weights, SmolLM2-135M-Instruct from the GGUF file that
``grpo demo --task smollm2`` uses (:mod:`smollm2_bench`: dequantized by grpo's loader, saved
as one folder), and train on the demo's task (:mod:`grpo.demo.smollm2_task`): its training
questions, in the chat template as text, so both see the same prompt ids. Everything that
both trainers name is set the same, as the demo sets it: G = 8, 8 prompts per step, LoRA
(rank 16, alpha 32, every linear layer but the output head, no dropout), AdamW at lr 2e-4
(constant, β = (0.9, 0.999), no weight decay, gradients clipped at norm 1), temperature 0.8
with neither top-p nor top-k, at most 32 completion tokens (EOS ends one), β = 0 (no
reference model), one optimizer step per batch (μ = 1, so the clip range 0.2 never acts),
the group-normalized advantage with ε = 1e-4 and the loss averaged 1/|y_i| per completion,
then over completions (TRL's ``loss_type="grpo"``). Each samples the step's 64 completions
at once and trains them in its own passes: grpo in one of 64, TRL in 4 of 16 (one of 64 takes
TRL past 14 GB on this vocabulary; ``trl_compare.py``). Three differences are theirs to
keep: TRL divides by the sample standard deviation of the group (G − 1), grpo by the
population's (G), as Shao et al. (2024) write it; grpo leaves groups whose rewards are all
equal out of the loss and averages over the groups that train, where TRL averages over all
64 completions, the skipped ones as zeros (so with half the groups skipped, TRL's step is
half as long at the same lr); and each draws its own order of prompts from the seed.

Each trainer runs in its own process, one after the other, with the same torch thread count.
Every ``--eval-every`` steps (and before the first) each measures the same thing with the
same code: greedy accuracy on the demo's 200 test questions, by
``grpo.eval.evaluate.greedy_accuracy`` with the numeric-answer reward. The clock counts the
training steps only (sampling, scoring, the update), not the loading or the evaluations.

The report, per seed and averaged: accuracy at equal samples (both after ``--steps``
steps), and at equal wall-clock (each trainer's accuracy at the last evaluation it had
reached when the faster one finished). Results go to ``--json``; the tables are printed in
Markdown for ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

GROUP, PROMPTS_PER_STEP, MAX_NEW_TOKENS, LR, TEMPERATURE = 8, 8, 32, 2e-4, 0.8
LORA = {"rank": 16, "alpha": 32}


def write_task(work_dir: Path, model_dir: Path) -> tuple[Path, Path]:
    """The demo's training and test questions, chat-templated as text, as JSONL files."""
    from smollm2_bench import chat_prompt_rows
    from transformers import AutoTokenizer

    from grpo.demo.smollm2_task import make_smollm2_splits

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    train_rows, _, test_rows = make_smollm2_splits()
    paths = []
    for name, rows in (("train", train_rows), ("test", test_rows)):
        path = work_dir / f"{name}.jsonl"
        templated = chat_prompt_rows(tokenizer, rows)
        path.write_text("".join(json.dumps(row) + "\n" for row in templated))
        paths.append(path)
    return paths[0], paths[1]


def test_accuracy(model: Any, tokenizer: Any, test_path: Path) -> float:
    """Greedy accuracy on the test questions, as both trainers are measured."""
    import torch

    from grpo.data.dataset import load_prompt_dataset
    from grpo.eval.evaluate import greedy_accuracy
    from grpo.rewards.math import numeric_answer
    from grpo.rewards.runner import RewardFunction

    dataset = load_prompt_dataset(test_path, tokenizer)
    reward = RewardFunction(name="numeric_answer", fn=numeric_answer)
    training = model.training
    model.eval()
    with torch.no_grad():
        accuracy = greedy_accuracy(model, tokenizer, dataset, reward, max_new_tokens=MAX_NEW_TOKENS)
    model.train(training)
    return float(accuracy)


def run_grpo(args: argparse.Namespace) -> dict[str, Any]:
    """grpo's run: evaluations from its own held-out evaluator on the test file (the same
    ``greedy_accuracy``), the clock from its ``time/step``."""
    from grpo.config import load_config
    from grpo.training.loop import train

    with tempfile.TemporaryDirectory() as run_dir:
        overrides = [
            f"model.path={args.model_dir}",
            f"model.lora_rank={LORA['rank']}",
            f"model.lora_alpha={LORA['alpha']}",
            f"data.train_path={args.train}",
            f"rollout.group_size={GROUP}",
            f"rollout.max_new_tokens={MAX_NEW_TOKENS}",
            f"rollout.temperature={TEMPERATURE}",
            "algorithm.beta=0.0",
            "algorithm.aggregation=sequence",
            f"optim.lr={LR}",
            f"eval.path={args.test}",
            f"eval.every={args.eval_every}",
            f"train.steps={args.steps}",
            f"train.prompts_per_step={PROMPTS_PER_STEP}",
            f"train.sequences_per_micro_batch={GROUP * PROMPTS_PER_STEP}",
            f"train.seed={args.seed}",
            f"train.run_dir={run_dir}",
            "train.tensorboard=false",
            "train.progress=false",
            'rewards=[{function = "grpo.rewards:numeric_answer"}]',
        ]
        history = train(load_config(None, overrides), verbose=False).history
    points, clock = [], 0.0
    for row in history:
        clock += row.get("time/step", 0.0)
        if "eval/accuracy" in row:
            points.append(
                {"step": int(row["step"]), "seconds": clock, "accuracy": row["eval/accuracy"]}
            )
    return {
        "points": points,
        "reward_mean": [row["reward/mean"] for row in history if "reward/mean" in row],
    }


def run_trl(args: argparse.Namespace) -> dict[str, Any]:
    """TRL's run: the same evaluation from a callback, the clock from step begin to step end."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from grpo.rewards.math import numeric_answer

    rows = [json.loads(line) for line in Path(args.train).read_text().splitlines()]
    tokenizer = AutoTokenizer.from_pretrained(str(args.model_dir), padding_side="left")
    eval_tokenizer = AutoTokenizer.from_pretrained(str(args.model_dir))
    points: list[dict[str, float]] = []
    rewards: list[float] = []
    clock = {"total": 0.0, "started": 0.0}

    def reward(prompts, completions, answer, **_):
        scores = numeric_answer(prompts, completions, answer)
        rewards.append(sum(scores) / len(scores))
        return scores

    class Measure(TrainerCallback):
        def on_train_begin(self, _args, state, control, model=None, **__):
            points.append(
                {
                    "step": 0,
                    "seconds": 0.0,
                    "accuracy": test_accuracy(model, eval_tokenizer, args.test),
                }
            )

        def on_step_begin(self, *_, **__):
            clock["started"] = time.perf_counter()

        def on_step_end(self, _args, state, control, model=None, **__):
            clock["total"] += time.perf_counter() - clock["started"]
            if state.global_step % args.eval_every == 0 or state.global_step == args.steps:
                accuracy = test_accuracy(model, eval_tokenizer, args.test)
                points.append(
                    {"step": state.global_step, "seconds": clock["total"], "accuracy": accuracy}
                )

    with tempfile.TemporaryDirectory() as output_dir:
        config = GRPOConfig(
            output_dir=output_dir,
            use_cpu=True,
            bf16=False,
            fp16=False,
            gradient_checkpointing=False,
            use_vllm=False,
            loss_type="grpo",
            scale_rewards="group",
            beta=0.0,
            epsilon=0.2,
            num_iterations=1,
            num_generations=GROUP,
            # the step's 64 completions generated at once, trained in 4 passes of 16: one
            # pass of 64 takes TRL past 14 GB on this vocabulary (trl_compare.py)
            per_device_train_batch_size=16,
            gradient_accumulation_steps=GROUP * PROMPTS_PER_STEP // 16,
            max_completion_length=MAX_NEW_TOKENS,
            temperature=TEMPERATURE,
            top_p=1.0,
            top_k=0,
            learning_rate=LR,
            lr_scheduler_type="constant",
            warmup_steps=0,
            weight_decay=0.0,
            adam_beta1=0.9,
            adam_beta2=0.999,
            max_grad_norm=1.0,
            max_steps=args.steps,
            seed=args.seed,
            logging_steps=1,
            report_to="none",
            save_strategy="no",
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        trainer = GRPOTrainer(
            model=str(args.model_dir),
            reward_funcs=reward,
            args=config,
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            peft_config=LoraConfig(
                r=LORA["rank"],
                lora_alpha=LORA["alpha"],
                lora_dropout=0.0,
                target_modules="all-linear",
                task_type="CAUSAL_LM",
            ),
            callbacks=[Measure()],
        )
        trainer.train()
    return {"points": points, "reward_mean": rewards}


def run_child(trainer: str, args: argparse.Namespace, seed: int, out: Path) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        f"--child={trainer}",
        f"--model-dir={args.model_dir}",
        f"--train={args.train}",
        f"--test={args.test}",
        f"--steps={args.steps}",
        f"--eval-every={args.eval_every}",
        f"--threads={args.threads}",
        f"--seed={seed}",
        f"--out={out}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(
            f"{trainer} (seed {seed}) failed:\n{(done.stdout + done.stderr)[-4000:]}"
        )
    return {**json.loads(out.read_text()), "process_s": time.perf_counter() - started}


def at_seconds(points: list[dict[str, float]], seconds: float) -> dict[str, float]:
    """The last evaluation reached within ``seconds`` of training."""
    return [p for p in points if p["seconds"] <= seconds + 1e-9][-1]


def tables(runs: dict[int, dict[str, dict]], steps: int) -> str:
    lines = [
        "| seed | trainer | step | samples | training s | greedy accuracy |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for seed, by_trainer in runs.items():
        for trainer, run in by_trainer.items():
            for p in run["points"]:
                samples = p["step"] * GROUP * PROMPTS_PER_STEP
                lines.append(
                    f"| {seed} | {trainer} | {p['step']} | {samples} | {p['seconds']:.0f} | "
                    f"{p['accuracy']:.1%} |"
                )
    if not all({"grpo", "trl"} <= set(r) for r in runs.values()):
        return "\n".join(lines)
    equal_samples = {
        t: [r[t]["points"][-1]["accuracy"] for r in runs.values()] for t in ("grpo", "trl")
    }
    lines += ["", "| comparison | grpo | TRL | grpo − TRL (points) |", "|---|---:|---:|---:|"]
    grpo_acc, trl_acc = (
        statistics.fmean(equal_samples["grpo"]),
        statistics.fmean(equal_samples["trl"]),
    )
    lines.append(
        f"| equal samples ({steps} steps × {GROUP * PROMPTS_PER_STEP}), mean of {len(runs)} "
        f"seed(s) | {grpo_acc:.1%} | {trl_acc:.1%} | {100 * (grpo_acc - trl_acc):+.1f} |"
    )
    for seed, run in runs.items():
        finish = min(run["grpo"]["points"][-1]["seconds"], run["trl"]["points"][-1]["seconds"])
        ours, theirs = (
            at_seconds(run["grpo"]["points"], finish),
            at_seconds(run["trl"]["points"], finish),
        )
        lines.append(
            f"| equal wall-clock, seed {seed}: at {finish:.0f} s of training (grpo step "
            f"{ours['step']}, TRL step {theirs['step']}) | {ours['accuracy']:.1%} | "
            f"{theirs['accuracy']:.1%} | {100 * (ours['accuracy'] - theirs['accuracy']):+.1f} |"
        )
    time_per_step = {
        t: statistics.fmean(r[t]["points"][-1]["seconds"] / steps for r in runs.values())
        for t in ("grpo", "trl")
    }
    ours, theirs = time_per_step["grpo"], time_per_step["trl"]
    lines.append(
        f"| training seconds per step, mean | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f}× |"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seeds", default="0,1", help="comma-separated train.seed values")
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--only", choices=["grpo", "trl"], help="run one trainer only")
    parser.add_argument("--json", type=Path, help="write the measurements here")
    # child mode (one trainer's run, in its own process)
    parser.add_argument("--child", choices=["grpo", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--train", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--test", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if args.child:
        import transformers

        transformers.utils.logging.set_verbosity_error()
        result = (run_grpo if args.child == "grpo" else run_trl)(args)
        args.out.write_text(json.dumps(result))
        return
    from smollm2_bench import smollm2_model_dir

    trainers = [args.only] if args.only else ["grpo", "trl"]
    runs: dict[int, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory() as work:
        work_dir = Path(work)
        args.model_dir = smollm2_model_dir(work_dir / "smollm2")
        args.train, args.test = write_task(work_dir, args.model_dir)
        for seed in (int(s) for s in args.seeds.split(",")):
            runs[seed] = {}
            for trainer in trainers:
                runs[seed][trainer] = run_child(
                    trainer, args, seed, work_dir / f"{trainer}-{seed}.json"
                )
                last = runs[seed][trainer]["points"][-1]
                print(
                    f"seed {seed} {trainer}: {last['accuracy']:.1%} after {last['step']} steps, "
                    f"{last['seconds']:.0f} s of training",
                    flush=True,
                )
                if args.json:
                    args.json.write_text(
                        json.dumps({"threads": args.threads, "runs": runs}, indent=1)
                    )
    print(f"\n{args.threads} threads; SmolLM2-135M-Instruct; the real-model demo's task\n")
    print(tables(runs, args.steps))


if __name__ == "__main__":
    main()
