"""``grpo eval``: pass@1 (greedy), pass@k (sampled) and mean rewards of a model on a prompt set."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo.cli.common import (
    Commands,
    bad_overrides,
    check_model_names,
    import_user_code,
    quiet_transformers,
)
from grpo.cli.failures import add_debug_flag

if TYPE_CHECKING:
    from torch import nn

    from grpo.config import Config
    from grpo.rollout.engine import RolloutEngine


def eval_config(args: argparse.Namespace, overrides: list[str]):
    """The config ``grpo eval`` runs under: ``--config`` (or the defaults), the model and
    data from the command line, ``--reward`` replacing the rewards, then the overrides."""
    from grpo.config import load_config

    data = args.data_option or args.data
    if not data:
        raise FileNotFoundError("grpo eval needs a dataset: --data FILE")
    fixed = [f"--model.path={json.dumps(args.model)}", f"--data.train_path={json.dumps(data)}"]
    rewards = args.reward or ([] if args.config else ["grpo.rewards:numeric_answer"])
    if rewards:
        tables = ", ".join("{ function = " + json.dumps(spec) + " }" for spec in rewards)
        fixed.append(f"--rewards=[{tables}]")
    return load_config(args.config, fixed + overrides)


def cmd_eval(args: argparse.Namespace, overrides: list[str]) -> int:
    from grpo.data.dataset import load_dataset_for
    from grpo.eval.evaluate import correctness_reward, evaluate_model
    from grpo.models.loading import load_reference, load_tokenizer, pick_device
    from grpo.rewards.resolve import resolve_reward_functions
    from grpo.rounds.build import agent_settings
    from grpo.rounds.engines import check_engine_available

    if bad_overrides("eval", overrides):
        return 2
    config = eval_config(args, overrides)
    import_user_code(config)  # a bad tool or reward spec fails here, before any model loads
    check_model_names(config)  # and a bad model name, a missing .gguf or an uncached Hub id
    check_engine_available(config.rollout.engine)  # as grpo train: before anything loads
    quiet_transformers()
    model_cfg = config.model
    tokenizer = load_tokenizer(model_cfg.path, tokenizer_path=model_cfg.tokenizer_path)
    agentic = config.agent.enabled
    dataset = load_dataset_for(config.data.train_path, tokenizer, config.data, agent=agentic)
    device = pick_device(model_cfg.device)
    model = load_reference(model_cfg.path, device, dtype=model_cfg.dtype)  # frozen, eval mode
    rewards = resolve_reward_functions(config.rewards, config.train.import_dirs)
    ks = sorted({int(k) for k in args.k.split(",")}) if args.samples else []
    agent = None
    if config.agent.enabled:
        dirs = config.train.import_dirs
        agent = agent_settings(config.agent, tokenizer, config.data, import_dirs=dirs)
    max_new_tokens = (
        args.max_new_tokens or config.eval.max_new_tokens or config.rollout.max_new_tokens
    )
    report = evaluate_model(
        model,
        tokenizer,
        dataset,
        rewards,
        correctness_reward(config.eval.reward, rewards, config.agent, config.train.import_dirs),
        max_new_tokens=max_new_tokens,
        samples=args.samples,
        ks=[k for k in ks if k <= args.samples],
        temperature=args.temperature or config.rollout.temperature,
        top_p=config.rollout.top_p,
        top_k=config.rollout.top_k,
        seed=args.seed,
        agent=agent,
        # Turns end on the stop strings (a tool call's closing tag) as in training.
        stop_strings=config.rollout.stop_strings if agent else (),
        engine=eval_engine(config, model, tokenizer, max_new_tokens),
    )
    print(report.table())
    if args.json:
        Path(args.json).write_text(json.dumps(report.summary(), indent=2) + "\n")
        print(f"written to {args.json}")
    return 0


def eval_engine(
    config: Config, model: nn.Module, tokenizer: Any, max_new_tokens: int
) -> RolloutEngine:
    """What samples: the engine training samples with (``rollout.engine`` and its keys,
    through the trainer's factory), in this one process; ``max_new_tokens`` is eval's, so
    vLLM's context has room for its completions."""
    from dataclasses import replace

    from grpo.rounds.engines import rollout_engine

    rollout = replace(config.rollout, max_new_tokens=max_new_tokens)
    return rollout_engine(replace(config, rollout=rollout), model, tokenizer)


def add_eval_parser(commands: Commands) -> None:
    evaluate = commands.add_parser(
        "eval",
        help="pass@1 (greedy), pass@k (sampled) and mean rewards of a model on a prompt set",
        description="pass@1 (greedy), pass@k (sampled) and mean rewards of a model on a "
        "prompt set. --section.key=value overrides apply as in `grpo train` (see `grpo docs`).",
    )
    evaluate.add_argument(
        "model", help="a local model folder, a .gguf file or a Hub id org/name[@revision]"
    )
    evaluate.add_argument("data", nargs="?", help="the prompt set (or --data)")
    evaluate.add_argument("--data", dest="data_option", metavar="FILE", help="the prompt set")
    evaluate.add_argument(
        "--config", help="a training TOML: its [data] formatting, [[rewards]] and [eval] apply"
    )
    evaluate.add_argument(
        "--reward",
        action="append",
        metavar="MODULE:FUNCTION",
        help="a reward function (repeat for several; default: the config's, else "
        "grpo.rewards:numeric_answer)",
    )
    evaluate.add_argument(
        "--samples",
        type=int,
        default=0,
        help="n sampled completions per prompt for pass@k "
        "(default: %(default)s = greedy pass@1 only)",
    )
    evaluate.add_argument(
        "--k", default="1,4,8", help="the k of pass@k, comma-separated, ≤ n (default: %(default)s)"
    )
    evaluate.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="of the sampled completions (default: %(default)s = the config's rollout.temperature)",
    )
    evaluate.add_argument(
        "--max-new-tokens",
        type=int,
        default=0,
        help="(default: %(default)s = the config's eval.max_new_tokens, "
        "else rollout.max_new_tokens)",
    )
    evaluate.add_argument(
        "--seed", type=int, default=0, help="seeds the sampling (default: %(default)s)"
    )
    evaluate.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    add_debug_flag(evaluate)
    evaluate.set_defaults(handler=cmd_eval)
