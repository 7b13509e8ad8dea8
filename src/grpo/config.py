"""Configuration: frozen dataclasses loaded from TOML, with ``--section.key=value`` overrides.

An unknown key or a value of the wrong type or range is a :class:`ConfigError` naming the
key. The config is never mutated after loading; sizes derived from it live in
:class:`BatchPlan`.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal


class ConfigError(ValueError):
    """A bad configuration value; the message names the key."""


@dataclass(frozen=True)
class ModelConfig:
    """The policy: a local Hugging Face causal-LM directory, its precision and LoRA."""

    path: str = ""  # a local Hugging Face causal-LM directory (weights + tokenizer)
    tokenizer_path: str = ""  # defaults to `path`
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"  # weights and compute
    device: str = "auto"  # "auto" = cuda when available, else cpu
    gradient_checkpointing: bool = False  # recompute activations in backward: less memory
    disable_dropout: bool = True  # dropout would make π_old ≠ π_θ at ratio 1
    lora_rank: int = 0  # 0 = full fine-tuning; > 0 = LoRA adapters (the `peft` extra)
    lora_alpha: float = 16.0  # LoRA scaling numerator (the update is scaled by alpha / rank)
    lora_dropout: float = 0.0  # dropout inside the LoRA adapters
    # module names to adapt; "all-linear" = every linear layer but the output head
    lora_target_modules: list[str] = field(default_factory=lambda: ["all-linear"])


@dataclass(frozen=True)
class DataConfig:
    """Training prompts: the file, its columns, and how each prompt becomes model input."""

    train_path: str = ""  # JSONL, JSON, CSV, TSV, Parquet, Arrow, or a save_to_disk folder
    prompt_column: str = "prompt"  # the column holding the prompt text
    # reward argument → dataset column, e.g. { answer = "solution" }
    column_map: dict[str, str] = field(default_factory=dict)
    # reduce the `answer` column to its final answer: gsm8k = the text after the last "####",
    # math = the last \boxed{…}; plain = as it is
    answer_format: Literal["plain", "gsm8k", "math"] = "plain"
    max_prompt_tokens: int = 512  # a longer prompt is an error naming its row
    truncate_long_prompts: bool = False  # True: keep a long prompt's last max_prompt_tokens
    skip_bad_rows: bool = False  # skip (and count) bad rows instead of stopping at the first
    chat_template: bool = False  # wrap each prompt as a user turn with the tokenizer's template
    system_prompt: str = ""  # a system turn (with chat_template) or text put before each prompt
    shuffle: bool = True  # reshuffle the prompts every epoch (seeded by train.seed)


@dataclass(frozen=True)
class RolloutConfig:
    """Sampling the G completions of each prompt."""

    group_size: int = 8  # G: completions sampled per prompt
    max_new_tokens: int = 256  # completion length cap; longer ones are cut (truncated_frac)
    temperature: float = 1.0  # sampling temperature; the trainer's log-probs use it too
    top_p: float = 1.0  # nucleus sampling (1.0 = off)
    top_k: int = 0  # 0 = off
    stop_strings: list[str] = field(default_factory=list)  # end a completion at any of these
    max_sequences_per_batch: int = 512  # generation chunk, bounds KV-cache memory
    engine: Literal["transformers", "vllm"] = "transformers"  # vllm: GPU, `grpo[vllm]` extra
    vllm_gpu_memory_utilization: float = 0.3  # GPU share vLLM may take (it shares the GPU)
    vllm_sleep: bool = True  # free vLLM's GPU memory between rollouts (sleep mode)
    vllm_max_model_len: int = 0  # 0 = data.max_prompt_tokens + rollout.max_new_tokens
    vllm_enforce_eager: bool = False  # skip CUDA-graph capture: faster start, slower decoding


@dataclass(frozen=True)
class AlgorithmConfig:
    """Advantages, the clipped surrogate, its aggregation and the KL penalty."""

    # group: (r − mean)/(σ + eps) | batch: σ of the whole batch | none: r − mean |
    # rloo: r minus the mean of the group's other rewards
    advantage_scale: Literal["group", "batch", "none", "rloo"] = "group"
    advantage_eps: float = 1e-4  # eps in the advantage's denominator
    clip_low: float = 0.2  # the ratio is clipped below at 1 − clip_low
    clip_high: float = 0.2  # … and above at 1 + clip_high (> clip_low: DAPO's clip-higher)
    # sequence: 1/|y_i| per completion (the seeds) | token: DAPO | constant: Dr. GRPO
    aggregation: Literal["sequence", "token", "constant"] = "sequence"
    beta: float = 0.04  # KL weight; 0 = no reference model is loaded at all
    kl_kind: Literal["k1", "k2", "k3"] = "k3"  # the per-token KL estimator (see grpo.kl)
    inner_iterations: int = 1  # μ: optimizer steps on each rollout batch
    estimator: Literal["grpo", "ppo"] = "grpo"  # ppo: a critic + GAE instead of the group baseline
    # DAPO dynamic sampling: drop zero-variance groups and generate further rounds of
    # train.prompts_per_step prompts until that many informative groups are in hand (the
    # surplus of the last round is not trained on) or max_generation_rounds is reached.
    dynamic_sampling: bool = False
    max_generation_rounds: int = 4  # cap on rounds per step with dynamic_sampling


@dataclass(frozen=True)
class PPOConfig:
    """Used when algorithm.estimator = "ppo" (see grpo.critic)."""

    gamma: float = 1.0  # γ, discount per token
    lam: float = 0.95  # λ of GAE
    value_clip: float = 0.2  # the clipped value loss's c; 0 = unclipped
    critic_lr: float = 1e-5  # the critic's own AdamW learning rate (constant)
    whiten_advantages: bool = True  # normalise GAE advantages over the batch's tokens


@dataclass(frozen=True)
class CurriculumConfig:
    """Adaptive curriculum: draw prompts ∝ E[p(1 − p)]^strength under a Beta posterior."""

    enabled: bool = False  # false: epoch-wise shuffled order (data.shuffle)
    strength: float = 1.0  # exponent k on the weights: 0 = uniform, larger = sharper focus
    prior_successes: float = 1.0  # α₀ of the Beta(α₀, β₀) prior; an unseen prompt's weight
    prior_failures: float = 1.0  # β₀ (α₀ = β₀ = 1: unseen weight 1/6 vs at most 1/4)


@dataclass(frozen=True)
class RewardConfig:
    """One ``[[rewards]]`` table; the total reward is the weighted sum of all of them."""

    function: str = ""  # "module:function", resolved once at start-up
    weight: float = 1.0  # its weight in the total reward
    timeout_s: float = 0.0  # 0 = no limit
    on_error: Literal["fail", "zero", "skip_group"] = "fail"  # what a failing row gets
    options: dict[str, Any] = field(default_factory=dict)  # keyword arguments bound at start-up


@dataclass(frozen=True)
class OptimConfig:
    """AdamW, gradient clipping and the learning-rate schedule."""

    lr: float = 1e-6  # peak learning rate
    weight_decay: float = 0.0  # AdamW's decoupled weight decay
    beta1: float = 0.9  # AdamW β1
    beta2: float = 0.999  # AdamW β2
    max_grad_norm: float = 1.0  # 0 = no clipping
    schedule: Literal["constant", "linear", "cosine"] = "constant"  # decay after warm-up
    warmup_steps: int = 0  # optimizer steps of linear warm-up


@dataclass(frozen=True)
class EvalConfig:
    """Held-out greedy accuracy during training."""

    path: str = ""  # held-out prompts (same formats as data.train_path); "" = no evaluation
    every: int = 0  # steps between evaluations (0 = only before and after training)
    max_new_tokens: int = 0  # 0 = rollout.max_new_tokens
    reward: str = ""  # "module:function" scoring ≥ 1 as correct; "" = the first accuracy reward


@dataclass(frozen=True)
class TrainConfig:
    """The loop: steps, batch sizes, seed, outputs, logging and the console."""

    steps: int = 100  # training steps (each: one rollout batch, μ optimizer steps)
    prompts_per_step: int = 16  # prompts per step (× rollout.group_size = sequences per step)
    sequences_per_micro_batch: int = 8  # gradient accumulation; the gradient is the same
    seed: int = 0  # seeds sampling, shuffling and initialisation
    run_dir: str = "runs/grpo"  # metrics, checkpoints and the final model go here
    save_every: int = 0  # 0 = only the final save
    keep_checkpoints: int = 2  # the newest K of RUN_DIR/checkpoints/step-* are kept
    resume: bool = False  # continue from RUN_DIR/checkpoints/latest when present
    max_consecutive_skips: int = 3  # non-finite updates in a row (each skipped) before stopping
    log_every: int = 1  # steps between console lines (metrics.jsonl gets every step)
    tensorboard: bool = True  # also write TensorBoard events when tensorboard is installed
    progress: bool = True  # false = nothing on the console per step
    quiet: bool = False  # no progress bar: one plain line every log_every steps (logs, CI)
    # steps between tables of the step's completions (completions.jsonl, backends); 0 = never
    completions_every: int = 10
    wandb_project: str = ""  # log to Weights & Biases in this project ("" = off; `wandb` extra)
    trackio_project: str = ""  # log to trackio under this project ("" = off; `trackio` extra)


@dataclass(frozen=True)
class DistributedConfig:
    """Used when launched by torchrun (WORLD_SIZE > 1); ignored in a single process."""

    strategy: Literal["ddp", "fsdp"] = "ddp"  # fsdp: FSDP2 fully_shard, for models too big
    backend: Literal["auto", "gloo", "nccl"] = "auto"  # auto: nccl on CUDA, gloo on CPU
    timeout_s: float = 1800.0  # a collective waiting longer than this fails instead of hanging


@dataclass(frozen=True)
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    rewards: list[RewardConfig] = field(default_factory=list)
    optim: OptimConfig = field(default_factory=OptimConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)


@dataclass(frozen=True)
class BatchPlan:
    """Sizes derived once from the config, printed at start-up."""

    prompts_per_step: int
    group_size: int
    sequences_per_step: int
    sequences_per_micro_batch: int
    max_micro_batches_per_step: int
    inner_iterations: int
    world_size: int = 1
    sequences_per_rank: int = 0  # rows each process generates, scores and trains on

    def describe(self) -> str:
        text = (
            f"{self.prompts_per_step} prompts/step × G={self.group_size} = "
            f"{self.sequences_per_step} sequences/step; micro-batches of "
            f"{self.sequences_per_micro_batch} sequences (≤ {self.max_micro_batches_per_step} "
            f"per optimizer step); μ = {self.inner_iterations} optimizer step(s) per rollout batch"
        )
        if self.world_size > 1:
            text += (
                f"; {self.world_size} processes × {self.sequences_per_rank} sequences "
                f"(rank r: rows [r·{self.sequences_per_rank}, (r+1)·{self.sequences_per_rank}))"
            )
        return text


def batch_plan(config: Config, world_size: int = 1) -> BatchPlan:
    """Sizes of one step. With ``world_size`` processes each takes a contiguous block of
    sequences_per_step / world_size rows, which must divide exactly (a group may span ranks)."""
    sequences = config.train.prompts_per_step * config.rollout.group_size
    if world_size < 1 or sequences % world_size:
        raise ConfigError(
            f"train.prompts_per_step × rollout.group_size = {config.train.prompts_per_step} × "
            f"{config.rollout.group_size} = {sequences} sequences per step cannot be split evenly "
            f"over {world_size} processes: make it a multiple of {world_size}"
        )
    per_rank = sequences // world_size
    return BatchPlan(
        prompts_per_step=config.train.prompts_per_step,
        group_size=config.rollout.group_size,
        sequences_per_step=sequences,
        sequences_per_micro_batch=config.train.sequences_per_micro_batch,
        max_micro_batches_per_step=math.ceil(per_rank / config.train.sequences_per_micro_batch),
        inner_iterations=config.algorithm.inner_iterations,
        world_size=world_size,
        sequences_per_rank=per_rank,
    )


# --- loading ---------------------------------------------------------------------------


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Read TOML (or start from defaults), apply ``section.key=value`` overrides, validate."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"{path}: invalid TOML: {error}") from None
    for override in overrides or []:
        _apply_override(data, override)
    config = _build(Config, data, "")
    validate(config)
    return config


def config_to_dict(config: Config) -> dict[str, Any]:
    return dataclasses.asdict(config)


def _apply_override(data: dict[str, Any], override: str) -> None:
    text = override.removeprefix("--")
    if "=" not in text:
        raise ConfigError(f"override {override!r} must look like --section.key=value")
    dotted, raw = text.split("=", 1)
    keys = dotted.split(".")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # a bare word is a string
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {override!r}: {key} is not a section")
    node[keys[-1]] = value


def _build(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'}: expected a table, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        key = f"{where}.{unknown[0]}" if where else unknown[0]
        raise ConfigError(f"unknown config key {key!r} (known: {', '.join(sorted(names))})")
    values = {}
    for name, raw in data.items():
        key = f"{where}.{name}" if where else name
        values[name] = _coerce(hints[name], raw, key)
    return cls(**values)


def _coerce(hint: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, key)
    if origin is Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            raise ConfigError(f"{key} must be one of {list(choices)}, got {value!r}")
        return value
    if origin is list:
        (item_hint,) = typing.get_args(hint)
        if not isinstance(value, list):
            raise ConfigError(f"{key} must be a list, got {value!r}")
        return [_coerce(item_hint, item, f"{key}[{i}]") for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key} must be a table, got {value!r}")
        return dict(value)
    if origin in (typing.Union, types.UnionType):
        raise ConfigError(f"{key}: union types are not supported in config")
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key} must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key} must be an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise ConfigError(f"{key} must be a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key} must be a string, got {value!r}")
        return value
    raise ConfigError(f"{key}: unsupported type {hint}")


def validate(config: Config) -> None:
    """Range checks that types cannot express; each error names its key."""
    checks: list[tuple[bool, str]] = [
        (bool(config.model.path), "model.path must name a local model directory"),
        (bool(config.data.train_path), "data.train_path must name a dataset file"),
        (
            all(isinstance(v, str) for v in config.data.column_map.values()),
            "data.column_map values must be column names (strings)",
        ),
        (config.data.max_prompt_tokens >= 1, "data.max_prompt_tokens must be ≥ 1"),
        (
            config.rollout.group_size >= 2 or config.algorithm.estimator == "ppo",
            f"rollout.group_size = {config.rollout.group_size} with algorithm.advantage_scale = "
            f"{config.algorithm.advantage_scale!r}: the group mean is the baseline, so a group "
            "of one has advantage 0 whatever its reward; rollout.group_size must be ≥ 2 "
            "(or algorithm.estimator = 'ppo')",
        ),
        (config.rollout.group_size >= 1, "rollout.group_size must be ≥ 1"),
        (0 <= config.ppo.gamma <= 1, "ppo.gamma must be in [0, 1]"),
        (0 <= config.ppo.lam <= 1, "ppo.lam must be in [0, 1]"),
        (config.ppo.value_clip >= 0, "ppo.value_clip must be ≥ 0"),
        (config.ppo.critic_lr > 0, "ppo.critic_lr must be > 0"),
        (
            not (config.algorithm.estimator == "ppo" and config.train.resume),
            "train.resume is not supported with algorithm.estimator = 'ppo' "
            "(the critic is not checkpointed)",
        ),
        (config.rollout.max_new_tokens >= 1, "rollout.max_new_tokens must be ≥ 1"),
        (config.rollout.temperature > 0, "rollout.temperature must be > 0"),
        (0 < config.rollout.top_p <= 1, "rollout.top_p must be in (0, 1]"),
        (config.rollout.top_k >= 0, "rollout.top_k must be ≥ 0"),
        (
            config.rollout.max_sequences_per_batch >= 1,
            "rollout.max_sequences_per_batch must be ≥ 1",
        ),
        (config.algorithm.advantage_eps >= 0, "algorithm.advantage_eps must be ≥ 0"),
        (0 <= config.algorithm.clip_low < 1, "algorithm.clip_low must be in [0, 1)"),
        (config.algorithm.clip_high >= 0, "algorithm.clip_high must be ≥ 0"),
        (config.algorithm.beta >= 0, "algorithm.beta must be ≥ 0"),
        (config.algorithm.inner_iterations >= 1, "algorithm.inner_iterations must be ≥ 1"),
        (
            config.algorithm.max_generation_rounds >= 1,
            "algorithm.max_generation_rounds must be ≥ 1",
        ),
        (
            not (config.algorithm.dynamic_sampling and config.algorithm.estimator == "ppo"),
            "algorithm.dynamic_sampling needs algorithm.estimator = 'grpo' "
            "(PPO's critic learns from zero-variance groups too)",
        ),
        (config.curriculum.strength >= 0, "curriculum.strength must be ≥ 0"),
        (config.curriculum.prior_successes > 0, "curriculum.prior_successes must be > 0"),
        (config.curriculum.prior_failures > 0, "curriculum.prior_failures must be > 0"),
        (len(config.rewards) >= 1, "rewards: at least one [[rewards]] table is needed"),
        (config.optim.lr > 0, "optim.lr must be > 0"),
        (config.optim.max_grad_norm >= 0, "optim.max_grad_norm must be ≥ 0"),
        (config.optim.warmup_steps >= 0, "optim.warmup_steps must be ≥ 0"),
        (config.train.steps >= 1, "train.steps must be ≥ 1"),
        (config.train.prompts_per_step >= 1, "train.prompts_per_step must be ≥ 1"),
        (
            config.train.sequences_per_micro_batch >= 1,
            "train.sequences_per_micro_batch must be ≥ 1",
        ),
        (config.train.log_every >= 1, "train.log_every must be ≥ 1"),
        (config.train.save_every >= 0, "train.save_every must be ≥ 0"),
        (config.train.keep_checkpoints >= 1, "train.keep_checkpoints must be ≥ 1"),
        (config.train.max_consecutive_skips >= 1, "train.max_consecutive_skips must be ≥ 1"),
        (config.eval.every >= 0, "eval.every must be ≥ 0"),
        (config.train.completions_every >= 0, "train.completions_every must be ≥ 0"),
        (config.eval.max_new_tokens >= 0, "eval.max_new_tokens must be ≥ 0"),
        (
            not config.eval.reward or ":" in config.eval.reward,
            "eval.reward must be 'module:function'",
        ),
        (config.model.lora_rank >= 0, "model.lora_rank must be ≥ 0"),
        (
            0 < config.rollout.vllm_gpu_memory_utilization <= 1,
            "rollout.vllm_gpu_memory_utilization must be in (0, 1]",
        ),
        (config.rollout.vllm_max_model_len >= 0, "rollout.vllm_max_model_len must be ≥ 0"),
        (config.distributed.timeout_s > 0, "distributed.timeout_s must be > 0"),
    ]
    for index, reward in enumerate(config.rewards):
        checks.append(
            (":" in reward.function, f"rewards[{index}].function must be 'module:function'")
        )
        checks.append((reward.timeout_s >= 0, f"rewards[{index}].timeout_s must be ≥ 0"))
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)
