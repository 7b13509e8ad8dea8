"""One trainer's run for ``trl_compare.py``: a child process, so its peak RSS is its own.

    python benchmarks/trl_compare_child.py {grpo,trl} --model-dir D --prompts P.jsonl
        --steps N --max-new-tokens T --micro-batch M --threads K --out result.json
        [--device cuda --dtype bfloat16]   # benchmarks/gpu_check.py

Every phase is timed by wrapping the function that does it (the trainers are not edited):

- grpo: rollout = ``TransformersEngine.generate``, reference = ``update._reference_logprobs``,
  policy = ``update._micro_step`` (forward + loss + backward), optimizer = ``AdamW.step``.
- TRL: rollout = ``GRPOTrainer._generate``, reference = ``_get_per_token_logps_and_entropies``
  on the reference model, policy = ``compute_loss`` + backward (``training_step`` minus its
  ``_prepare_inputs``), optimizer = ``AdamW.step``.

A step's time is wall-clock from its start to the end of its optimizer step; step 1 (warm-up)
is left out of the medians. Rewards (``--reward``): :func:`even_share`, or for the real model
:func:`digit_share`, continuous scores that vary within every group. Neither trainer stops
early: grpo's engine gets no EOS id, TRL gets ``min_new_tokens`` = T, so both score exactly T
tokens per completion.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

PHASES = ("rollout", "reference", "policy", "optimizer")


def even_share(completions: list[str], **_: Any) -> list[float]:
    """Share of a completion's words ``t<n>`` with an even n: continuous, differs within groups."""
    scores = []
    for text in completions:
        words = text.split()
        even = sum(int(w[1:]) % 2 == 0 for w in words if w[1:].isdigit())
        scores.append(even / max(len(words), 1))
    return scores


def digit_share(completions: list[str]) -> list[float]:
    from smollm2_bench import digit_share as share

    return share(completions)


REWARDS = {"even_share": even_share, "digit_share": digit_share}
REWARD = ["even_share"]  # the one chosen by --reward


def grpo_reward(prompts: list[str], completions: list[str], **_: Any) -> list[float]:
    return REWARDS[REWARD[0]](completions)


def trl_reward(prompts: list[str], completions: list[str], **_: Any) -> list[float]:
    return REWARDS[REWARD[0]](completions)


class PhaseClock:
    """Seconds per phase per step; ``wrap`` times every call of a function as one phase."""

    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []
        self.current: dict[str, float] = defaultdict(float)
        self.step_started = 0.0
        self.last_optimizer_end = 0.0
        self.depth = 0

    def begin_step(self) -> None:
        self.current = defaultdict(float)
        self.step_started = time.perf_counter()

    def end_step(self, **extra: float) -> None:
        record = {phase: self.current.get(phase, 0.0) for phase in PHASES}
        # A step ends with its optimizer step (not with logging or a final save after it).
        end = self.last_optimizer_end if self.last_optimizer_end > self.step_started else None
        record["step"] = (end or time.perf_counter()) - self.step_started
        record.update(extra)
        self.steps.append(record)

    def wrap(self, phase: str, fn: Callable, when: Callable[..., bool] | None = None) -> Callable:
        def timed(*args, **kwargs):
            if self.depth or (when is not None and not when(*args, **kwargs)):
                return fn(*args, **kwargs)
            self.depth += 1
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                now = time.perf_counter()
                self.current[phase] += now - started
                self.depth -= 1
                if phase == "optimizer":
                    self.last_optimizer_end = now

        return timed


def run_grpo(args: argparse.Namespace, clock: PhaseClock) -> dict[str, Any]:
    import grpo.rounds.engines as engines_module
    import grpo.training.loop as trainer_module
    import grpo.training.update.policy as update_module
    from grpo.config import load_config
    from grpo.rewards import RewardFunction
    from grpo.rollout.hf_engine import TransformersEngine

    TransformersEngine.generate = clock.wrap("rollout", TransformersEngine.generate)
    update_module._reference_logprobs = clock.wrap("reference", update_module._reference_logprobs)
    update_module._micro_step = clock.wrap("policy", update_module._micro_step)
    torch.optim.AdamW.step = clock.wrap("optimizer", torch.optim.AdamW.step)
    engines_module.eos_token_ids = lambda *_: set()  # no early EOS: every row runs T tokens

    # Steps are delimited by the engine's calls: a step starts with its rollout.
    original_generate = TransformersEngine.generate

    def generate_starting_a_step(self, *a, **k):
        if clock.steps or clock.current:
            clock.end_step()
        clock.begin_step()
        return original_generate(self, *a, **k)

    TransformersEngine.generate = generate_starting_a_step
    rewards: list[list[float]] = []

    def recorded_reward(prompts, completions, **columns):
        scores = grpo_reward(prompts, completions, **columns)
        rewards.append(scores)
        return scores

    with tempfile.TemporaryDirectory() as run_dir:
        overrides = [
            f"model.path={args.model_dir}",
            f"data.train_path={args.prompts}",
            "rollout.group_size=8",
            f"rollout.max_new_tokens={args.max_new_tokens}",
            f"train.share_prompt={args.share_prompt}",
            f"train.compile={args.compile}",
            f"rollout.compile={args.compile}",
            f"model.device={args.device}",
            f"model.dtype={args.dtype}",
            "rollout.temperature=1.0",
            "algorithm.beta=0.04",
            "algorithm.inner_iterations=1",
            "algorithm.aggregation=sequence",
            f"optim.lr={args.lr}",
            f"train.steps={args.steps}",
            "train.prompts_per_step=8",
            f"train.sequences_per_micro_batch={args.micro_batch}",
            f"train.seed={args.seed}",
            f"train.run_dir={run_dir}",
            "train.tensorboard=false",
            "train.progress=false",
            # Validation wants a [[rewards]] table; the function itself is passed below.
            'rewards=[{function = "trl_compare_child:grpo_reward"}]',
        ]
        config = load_config(None, overrides)
        reward = RewardFunction(name=args.reward, fn=recorded_reward)
        started = time.perf_counter()
        history = trainer_module.train(config, reward_functions=[reward], verbose=False).history
        total = time.perf_counter() - started
    clock.end_step()
    compile_s = sum(row.get("time/compile", 0.0) for row in history)
    return {"rewards": rewards, "total_s": total, "compile_s": compile_s}


def run_trl(args: argparse.Namespace, clock: PhaseClock) -> dict[str, Any]:
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    prompts = [json.loads(line)["prompt"] for line in Path(args.prompts).read_text().splitlines()]
    rewards: list[list[float]] = []

    def recorded_reward(prompts, completions, **kwargs):
        scores = trl_reward(prompts, completions, **kwargs)
        rewards.append(scores)
        return scores

    class StepClock(TrainerCallback):
        def on_step_begin(self, *_, **__):
            clock.begin_step()

        def on_step_end(self, *_, **__):
            clock.end_step()

    torch.optim.AdamW.step = clock.wrap("optimizer", torch.optim.AdamW.step)
    GRPOTrainer._generate = clock.wrap("rollout", GRPOTrainer._generate)
    original_logps = GRPOTrainer._get_per_token_logps_and_entropies
    GRPOTrainer._get_per_token_logps_and_entropies = clock.wrap(
        "reference", original_logps, when=lambda self, model, *a, **k: model is self.ref_model
    )
    original_training_step = GRPOTrainer.training_step
    original_prepare = GRPOTrainer._prepare_inputs
    preparing = {"seconds": 0.0}

    def timed_prepare(self, *a, **k):
        started = time.perf_counter()
        try:
            return original_prepare(self, *a, **k)
        finally:
            preparing["seconds"] += time.perf_counter() - started

    def timed_training_step(self, *a, **k):
        preparing["seconds"] = 0.0
        started = time.perf_counter()
        try:
            return original_training_step(self, *a, **k)
        finally:
            clock.current["policy"] += time.perf_counter() - started - preparing["seconds"]

    GRPOTrainer._prepare_inputs = timed_prepare
    GRPOTrainer.training_step = timed_training_step

    with tempfile.TemporaryDirectory() as output_dir:
        config = GRPOConfig(
            output_dir=output_dir,
            use_cpu=args.device == "cpu",
            bf16=args.dtype == "bfloat16",  # the weights load in the checkpoint's dtype
            fp16=False,
            gradient_checkpointing=False,
            use_vllm=False,
            loss_type="grpo",
            beta=0.04,
            num_iterations=1,
            num_generations=8,
            # 8 prompts × G = 8 per optimizer step, generated at once, trained in passes of
            # --trl-micro-batch (64: one pass)
            per_device_train_batch_size=args.trl_micro_batch,
            gradient_accumulation_steps=64 // args.trl_micro_batch,
            max_completion_length=args.max_new_tokens,
            generation_kwargs={"min_new_tokens": args.max_new_tokens},
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            learning_rate=args.lr,
            lr_scheduler_type="constant",
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
            model=args.model_dir,
            reward_funcs=recorded_reward,
            args=config,
            train_dataset=Dataset.from_dict({"prompt": prompts}),
            processing_class=AutoTokenizer.from_pretrained(args.model_dir, padding_side="left"),
            callbacks=[StepClock()],
        )
        started = time.perf_counter()
        trainer.train()
        total = time.perf_counter() - started
    return {"rewards": rewards, "total_s": total}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trainer", choices=["grpo", "trl"])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--share-prompt", default="true", choices=["true", "false"])
    parser.add_argument("--compile", default="false", choices=["true", "false"])
    parser.add_argument("--device", default="cpu", help="cpu or cuda (gpu_check.py)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--trl-micro-batch", type=int, default=64, choices=[8, 16, 32, 64])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reward", choices=sorted(REWARDS), default="even_share")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    REWARD[0] = args.reward
    torch.set_num_threads(args.threads)
    import transformers

    transformers.utils.logging.set_verbosity_error()
    clock = PhaseClock()
    result = (run_grpo if args.trainer == "grpo" else run_trl)(args, clock)
    timed = clock.steps[1:] or clock.steps  # step 1 warms up
    rewards = [r for step in result.pop("rewards")[1:] or [] for r in step]
    summary = {
        "trainer": args.trainer,
        "threads": torch.get_num_threads(),
        "steps": len(clock.steps),
        "median": {key: statistics.median(s[key] for s in timed) for key in (*PHASES, "step")},
        "per_step": clock.steps,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "peak_gpu_bytes": torch.cuda.max_memory_allocated() if args.device != "cpu" else None,
        "reward_mean": statistics.fmean(rewards) if rewards else None,
        "reward_std": statistics.pstdev(rewards) if rewards else None,
        **result,
    }
    Path(args.out).write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
