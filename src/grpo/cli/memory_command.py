"""``grpo memory``: the planner of :mod:`grpo.models.memory` as a command (table or JSON)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import get_args

from grpo.cli.common import Commands
from grpo.models.architecture import architecture_from_config
from grpo.models.memory import CriticUpdate, MemoryPlan, Optimizer, Precision, plan_memory


def _count(text: str) -> int:
    """A parameter count: 7000000000, 7e9, 7B, 350M."""
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}.get(text[-1:].upper(), 1.0)
    number = text[:-1] if scale != 1.0 else text
    try:
        return round(float(number) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a parameter count: {text!r} (e.g. 7e9 or 7B)"
        ) from None


def add_memory_parser(commands: Commands) -> None:
    parser = commands.add_parser("memory", help="plan GRPO vs PPO training memory, row by row")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--config",
        help="a model: a local HF folder, a Hub id org/name[@rev] or a .gguf file (its config "
        "alone is read)",
    )
    source.add_argument("--params", type=_count, help="a parameter count instead: 7e9, 7B, 350M")
    parser.add_argument("--precision", choices=get_args(Precision), default="mixed")
    parser.add_argument("--optimizer", choices=get_args(Optimizer), default="adamw")
    parser.add_argument(
        "--no-reference", action="store_true", help="β = 0: no reference model is loaded"
    )
    parser.add_argument(
        "--reward-model", action="store_true", help="a frozen reward model of the policy's size"
    )
    parser.add_argument("--lora-rank", type=int, default=0, help="0 = full fine-tuning")
    parser.add_argument("--sequences", type=int, default=0, help="sequences per micro-batch")
    parser.add_argument(
        "--length", type=int, default=0, help="tokens per sequence (prompt + completion)"
    )
    parser.add_argument(
        "--completion-length",
        type=int,
        default=0,
        help="scored tokens per sequence (default: --length)",
    )
    parser.add_argument(
        "--vocab", type=int, default=0, help="vocabulary size (default: the config's)"
    )
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument(
        "--critic-update",
        choices=get_args(CriticUpdate),
        default="joint",
        help="PPO: joint = both models' gradients live at once (usual PPO); separate = grpo's PPO",
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.set_defaults(handler=cmd_memory)


def cmd_memory(args: argparse.Namespace, overrides: list[str]) -> int:
    architecture = architecture_from_config(args.config) if args.config else None
    if architecture is not None and args.vocab:
        architecture = dataclasses.replace(architecture, vocab_size=args.vocab)
    parameters = architecture.parameters if architecture is not None else args.params
    try:
        plan = plan_memory(
            parameters,
            architecture=architecture,
            precision=args.precision,
            optimizer=args.optimizer,
            reference=not args.no_reference,
            reward_model=args.reward_model,
            lora_rank=args.lora_rank,
            sequences=args.sequences,
            sequence_length=args.length,
            completion_length=args.completion_length or args.length,
            gradient_checkpointing=args.gradient_checkpointing,
            critic_update=args.critic_update,
        )
    except ValueError as error:
        print(f"grpo memory: error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"parameters": parameters, **plan.to_dict()}, indent=2))
    else:
        print(f"policy: {parameters:,} parameters")
        print(format_plan(plan))
    return 0


def format_plan(plan: MemoryPlan) -> str:
    """The plan as a text table (GB = 1e9 bytes), then the models and the assumptions."""

    def gb(value: int) -> str:
        return f"{value / 1e9:,.3f}" if value < 1e9 else f"{value / 1e9:,.1f}"

    lines = [f"{'':<18}{'GRPO (GB)':>12}{'PPO (GB)':>12}"]
    lines += [f"{name:<18}{gb(g):>12}{gb(p):>12}" for name, (g, p) in plan.rows.items()]
    lines.append(f"{'total':<18}{gb(plan.grpo_total):>12}{gb(plan.ppo_total):>12}")
    lines.append(
        f"saving: {gb(plan.saving)} GB = {plan.saving_fraction:.1%} of PPO; "
        f"PPO / GRPO = {plan.factor:.2f}×"
    )
    trained, frozen, k = plan.trained_model_bytes, plan.frozen_model_bytes, plan.frozen_models
    transient = plan.rows["activations"][0] + plan.rows["logits"][0]
    plus = f" + {gb(transient)} activations and logits" if transient else ""
    unlive = 2 * trained + k * frozen + transient - plan.ppo_total  # critic_update = "separate"
    freed = f" − {gb(unlive)} (gradients freed between the two updates)" if unlive else ""
    lines.append(
        f"one trained model: {gb(trained)} GB; one frozen model: {gb(frozen)} GB; "
        f"PPO = 2 × {gb(trained)} + {k} × {gb(frozen)}{plus}{freed}; "
        f"GRPO = {gb(trained)} + {k} × {gb(frozen)}{plus}"
    )
    lines += [f"{name.upper()}: {held}" for name, held in plan.models.items()]
    lines.append("assumptions:")
    lines += [f"  - {text}" for text in plan.assumptions]
    return "\n".join(lines)
