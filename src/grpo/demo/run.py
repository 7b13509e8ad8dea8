"""``grpo demo``: warm start → GRPO → held-out greedy accuracy before and after.

Everything is built here, nothing is downloaded: a character tokenizer, a tiny random
Llama, an arithmetic task with dev and test splits, and a short supervised warm start that
stops once the model answers about 30% of the dev split: the regime where groups have
mixed outcomes and GRPO has signal.
"""

from __future__ import annotations

import json
import shlex
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from grpo.config import load_config
from grpo.data.dataset import PromptDataset, load_prompt_dataset
from grpo.demo.model import build_tiny_llama
from grpo.demo.task import make_splits, write_splits
from grpo.demo.tokenizer import build_char_tokenizer
from grpo.demo.warm_start import (
    record_warm_start,
    recorded_warm_start,
    supervised_warm_start,
    warm_start_recipe,
)
from grpo.eval.evaluate import evaluate_model
from grpo.eval.report import EvalReport
from grpo.log.metrics import text_curve
from grpo.rewards.math import numeric_answer
from grpo.rewards.runner import RewardFunction

if TYPE_CHECKING:
    from grpo.config import Config
    from grpo.training.loop import TrainResult

WARM_START_TARGET = 0.30  # stop the warm start at this greedy accuracy on the dev split
WARM_START_CHUNK = 50
WARM_START_MAX_STEPS = 4000
PASS_AT_SAMPLES = 8  # sampled completions per test problem for pass@k, before and after


def problem_kind(prompt: str) -> str:
    operator = next(c for c in prompt if c in "+-*")
    width = len(prompt.split(operator)[0])
    return {"+": f"add {width}-digit", "-": "subtract 2-digit", "*": "multiply 1-digit"}[operator]


def evaluate_by_kind(
    model,
    tokenizer,
    dataset: PromptDataset,
    max_new_tokens: int,
    samples: int = 0,
    kinds: Sequence[str] | None = None,
) -> tuple[dict[str, float], EvalReport]:
    """Greedy accuracy per problem kind (and overall), with ``grpo eval``'s evaluation:
    the numeric-answer reward; with ``samples`` > 0 also pass@1 and pass@``samples``.
    ``kinds`` names each prompt's kind (default: :func:`problem_kind` of the prompt)."""
    reward = RewardFunction(name="numeric_answer", fn=numeric_answer)
    report = evaluate_model(
        model,
        tokenizer,
        dataset,
        [reward],
        reward,
        max_new_tokens=max_new_tokens,
        samples=samples,
        ks=sorted({1, samples}) if samples else (),
    )
    if kinds is None:
        kinds = [problem_kind(prompt) for prompt in dataset.prompts]
    hits: dict[str, list[bool]] = defaultdict(list)
    for kind, correct in zip(kinds, report.greedy_correct, strict=True):
        hits[kind].append(correct)
        hits["all"].append(correct)
    # alphabetical, the total last: the order of the demo's table
    order = sorted(hits, key=lambda kind: (kind == "all", kind))
    by_kind = {kind: sum(hits[kind]) / len(hits[kind]) for kind in order}
    return by_kind, report


def warm_start(
    base_dir: Path, train_rows: list[dict], probe: PromptDataset, tokenizer, say
) -> dict:
    recipe = warm_start_recipe(
        "arithmetic",
        target=WARM_START_TARGET,
        chunk=WARM_START_CHUNK,
        max_steps=WARM_START_MAX_STEPS,
        model=[128, 4, 4],
        lr=1e-3,
    )
    if (done := recorded_warm_start(base_dir, recipe)) is not None:
        say(f"warm start: reused from {base_dir} ({done['probe_accuracy']:.0%} on the dev split)")
        return done
    model = build_tiny_llama(tokenizer, hidden_size=128, layers=4, heads=4, seed=0)
    steps, accuracy = 0, 0.0
    while steps < WARM_START_MAX_STEPS:
        supervised_warm_start(
            model, tokenizer, train_rows, steps=WARM_START_CHUNK, lr=1e-3, seed=steps
        )
        steps += WARM_START_CHUNK
        accuracy = evaluate_by_kind(model, tokenizer, probe, max_new_tokens=6)[0]["all"]
        if accuracy >= WARM_START_TARGET:
            break
    model.save_pretrained(str(base_dir), safe_serialization=True)
    tokenizer.save_pretrained(str(base_dir))
    say(f"warm start: {steps} supervised steps → {accuracy:.0%} greedy accuracy on the dev split")
    outcome = {"steps": steps, "probe_accuracy": accuracy}
    record_warm_start(base_dir, recipe, outcome)
    return outcome


def demo_warm_start(base_dir: Path, say: Callable[[str], None] = print) -> dict:
    """The demo's warm start alone, into ``base_dir``, for a later :func:`run_demo` to reuse."""
    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    train_rows, dev_rows, _ = demo_splits()
    return warm_start(base_dir, train_rows, _probe_dataset(dev_rows, tokenizer), tokenizer, say)


def run_demo(
    work_dir: Path,
    *,
    overrides: list[str] | None = None,
    quick: bool = False,
    say: Callable[[str], None] = print,
) -> dict:
    """Run the whole demo in ``work_dir``; returns accuracies before and after, and timings."""
    started = time.perf_counter()
    torch.manual_seed(0)
    work_dir.mkdir(parents=True, exist_ok=True)
    base_dir, run_dir = work_dir / "base", work_dir / "run"
    tokenizer = build_char_tokenizer()
    train_rows, dev_rows, test_rows = demo_splits()
    train_path, dev_path, test_path = write_splits(work_dir, train_rows, dev_rows, test_rows)
    probe = _probe_dataset(dev_rows, tokenizer)
    say(
        f"grpo demo: {len(train_rows)} training, {len(dev_rows)} dev and {len(test_rows)} test "
        f"arithmetic problems in {work_dir}"
    )
    warm = warm_start(base_dir, train_rows, probe, tokenizer, say)

    config_path = write_demo_config(
        work_dir, base_dir=base_dir, train_path=train_path, dev_path=dev_path, run_dir=run_dir
    )
    quick_overrides = ["train.steps=6", "eval.every=0", "train.log_every=2"] if quick else []
    config, train_command = load_demo_config(config_path, quick_overrides + list(overrides or []))
    test_set = load_prompt_dataset(test_path, tokenizer)

    from transformers import AutoModelForCausalLM

    base_model = AutoModelForCausalLM.from_pretrained(str(base_dir)).eval()
    max_new_tokens = config.rollout.max_new_tokens
    before, before_report = evaluate_by_kind(
        base_model, tokenizer, test_set, max_new_tokens, samples=PASS_AT_SAMPLES
    )
    say(f"grpo demo: training with `{train_command}`")
    result, grpo_seconds = timed_train(config)
    after, after_report = evaluate_by_kind(
        result.model.eval(), tokenizer, test_set, max_new_tokens, samples=PASS_AT_SAMPLES
    )
    for name, report in (("before", before_report), ("after", after_report)):
        (work_dir / f"eval_{name}.json").write_text(json.dumps(report.summary(), indent=2))

    _say_reward_curve(result.history, say)
    _say_before_and_after(test_set, (before, before_report), (after, after_report), say)
    total_seconds = time.perf_counter() - started
    say(
        f"\nwarm start {warm['steps']} steps; GRPO {steps_done(result.history)} steps in "
        f"{grpo_seconds:.0f} s; demo total {total_seconds:.0f} s"
    )
    _say_next_steps(run_dir, result.final_dir, config_path, test_path, train_command, say)
    return {
        "before": before,
        "after": after,
        "eval_before": before_report.summary(),
        "eval_after": after_report.summary(),
        "warm_start": warm,
        "grpo_seconds": grpo_seconds,
        "total_seconds": total_seconds,
        "history": result.history,
    }


def _probe_dataset(dev_rows: list[dict], tokenizer: Any) -> PromptDataset:
    """The dev split, tokenized as it is (no file, no template), for the warm start's probe."""
    return PromptDataset(
        source="probe",
        prompts=[row["prompt"] for row in dev_rows],
        prompt_token_ids=[tokenizer(row["prompt"])["input_ids"] for row in dev_rows],
        columns={"answer": [row["answer"] for row in dev_rows]},
    )


def demo_splits() -> tuple[list[dict], list[dict], list[dict]]:
    """Train, dev and test rows: 4000, 200 and 300 distinct problems, no problem in two.
    The dev split steers the warm start and the evaluations during training; the test
    split is only for the final before/after table, so nothing was chosen by looking at it."""
    train_rows, held_out = make_splits(4000, 500, seed=0)
    return train_rows, held_out[:200], held_out[200:]


def write_demo_config(
    work_dir: Path,
    *,
    base_dir: Path,
    train_path: Path,
    dev_path: Path,
    run_dir: Path,
    template_name: str = "default.toml",
) -> Path:
    """The packaged ``template_name`` with this run's paths filled in, written to the work
    dir; its ``eval.path`` (held-out accuracy during training) is the dev split."""
    template = resources.files("grpo.demo").joinpath(template_name).read_text()
    config_path = work_dir / "grpo.toml"
    config_path.write_text(
        template.format(
            base_dir=base_dir, train_path=train_path, dev_path=dev_path, run_dir=run_dir
        )
    )
    return config_path


def load_demo_config(config_path: Path, overrides: list[str]) -> tuple[Any, str]:
    """The demo's config with ``overrides``, and the exact ``grpo train`` command that
    reruns this training, overrides and all."""
    config = load_config(config_path, overrides)
    command = shlex.join(
        ["grpo", "train", str(config_path), *(f"--{o.removeprefix('--')}" for o in overrides)]
    )
    return config, command


def timed_train(config: Config) -> tuple[TrainResult, float]:
    """``train(config)`` and its wall-clock seconds."""
    from grpo.training.loop import train

    started = time.perf_counter()
    result = train(config)
    return result, time.perf_counter() - started


def steps_done(history: list[dict]) -> int:
    """The last step a run logged (fewer than ``train.steps`` when it was stopped)."""
    return max((int(entry["step"]) for entry in history), default=0)


def _say_next_steps(
    run_dir: Path,
    final_dir: Path,
    config_path: Path,
    test_path: Path,
    train_command: str,
    say: Callable[[str], None],
) -> None:
    """What the run left and the commands that use it: only what exists and what works
    here (tests/cli/test_cli.py follows every path and runs every command)."""
    import importlib.util

    contents = [
        name for name in ("metrics.jsonl", "completions.jsonl") if (run_dir / name).exists()
    ]
    if (run_dir / "tensorboard").is_dir():
        contents.append("tensorboard/ (tensorboard --logdir)")
    contents.append("final/ (loads with from_pretrained)")
    say(f"run directory: {run_dir}: {', '.join(contents)}")
    say("next:")
    say(f"  grpo plot {shlex.quote(str(run_dir))}   # the reward curve again")
    if importlib.util.find_spec("matplotlib") is not None:
        say(f"  grpo report {shlex.quote(str(run_dir))}   # PNG plots and sample completions")
    else:
        say("  (plots and sample completions with grpo report: pip install 'grpo[plot]' first)")
    evaluate = ["grpo", "eval", str(final_dir), "--data", str(test_path)]
    say(f"  {shlex.join([*evaluate, '--config', str(config_path), '--samples', '8'])}")
    say(f"  {train_command}   # this training again (overwrites the run)")


def _say_reward_curve(
    history: list[dict], say: Callable[[str], None], temperature: float = 1.0
) -> None:
    """The mean training reward of each step, as a text curve."""
    rewards = [row["reward/mean"] for row in history if "reward/mean" in row]
    say(f"\nmean reward per step (training prompts, sampled at temperature {temperature:g}):")
    say(text_curve(rewards, label="reward/mean"))


def _say_before_and_after(
    test_set: PromptDataset,
    before: tuple[dict[str, float], EvalReport],
    after: tuple[dict[str, float], EvalReport],
    say: Callable[[str], None],
    kinds: Sequence[str] | None = None,
    min_count: int = 20,
) -> None:
    """Held-out greedy accuracy per problem kind, then pass@k, for the base model
    (``before``) and the trained one (``after``): each (accuracy by kind, its report);
    ``kinds`` as :func:`evaluate_by_kind`'s. A kind with fewer than ``min_count`` problems
    is counted in "all" only: the arithmetic demo's easy kinds have few distinct problems,
    nearly all of them in training."""
    (before_by_kind, before_report), (after_by_kind, after_report) = before, after
    if kinds is None:
        kinds = [problem_kind(prompt) for prompt in test_set.prompts]
    width = max(20, *(len(kind) + 2 for kind in before_by_kind))
    say(f"\nheld-out greedy accuracy ({len(test_set)} problems never trained on):")
    say(f"  {'problems':<{width}}{'count':>6}{'base':>9}{'after GRPO':>12}{'change':>9}")
    counts: defaultdict[str, int] = defaultdict(int)
    for kind in kinds:
        counts[kind] += 1
    counts["all"] = len(test_set)
    for kind in before_by_kind:
        if counts[kind] < min_count and kind != "all":
            continue
        base, trained = before_by_kind[kind], after_by_kind[kind]
        change = 100 * (trained - base)
        say(f"  {kind:<{width}}{counts[kind]:>6}{base:>9.1%}{trained:>12.1%}{change:>+8.1f}")
    for k in before_report.pass_at:
        change = 100 * (after_report.pass_at[k] - before_report.pass_at[k])
        label = f"pass@{k} ({PASS_AT_SAMPLES} samples, T=1)"
        say(
            f"  {label:<{width + 6}}{before_report.pass_at[k]:>9.1%}"
            f"{after_report.pass_at[k]:>12.1%}{change:>+8.1f}"
        )
