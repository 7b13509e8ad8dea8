"""The configuration's sections: one frozen dataclass per TOML table, and :class:`Config`.

Each field's comment (the ``# …`` lines above it and the one at its end) is its
documentation: ``grpo docs`` builds the configuration reference page from them
(docs/reference/configuration.md). A numeric field's range sits beside it, as its
annotation's :class:`Bound` (``Annotated[int, at_least(1)]``); :mod:`grpo.config.validation`
checks every one when a config loads, with the rules that span several fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Annotated, Any, Literal, get_type_hints


@dataclass(frozen=True)
class Bound:
    """The range a numeric field must lie in; its text is the error's ("must be ≥ 1")."""

    low: float
    high: float | None = None  # None: no upper end
    open_low: bool = False
    open_high: bool = False

    def holds(self, value: float) -> bool:
        above = value > self.low if self.open_low else value >= self.low
        if self.high is None:
            return above
        return above and (value < self.high if self.open_high else value <= self.high)

    def __str__(self) -> str:
        if self.high is None:
            return f"{'>' if self.open_low else '≥'} {self.low}"
        opening, closing = "(" if self.open_low else "[", ")" if self.open_high else "]"
        return f"in {opening}{self.low}, {self.high}{closing}"


def at_least(low: float) -> Bound:
    return Bound(low)


def above(low: float) -> Bound:
    return Bound(low, open_low=True)


def within(low: float, high: float, *, open_low: bool = False, open_high: bool = False) -> Bound:
    return Bound(low, high, open_low, open_high)


def field_bounds(section: type) -> dict[str, Bound]:
    """Each field of the ``section`` dataclass declared with a :class:`Bound`, by name, in
    declaration order."""
    hints = get_type_hints(section, include_extras=True)
    return {
        field.name: bound
        for field in fields(section)
        for bound in getattr(hints[field.name], "__metadata__", ())
        if isinstance(bound, Bound)
    }


# train.self_correction_phrases' default: what a model says when it re-checks its work.
DEFAULT_SELF_CORRECTION_PHRASES = (
    "wait",
    "let me re-check",
    "let me recheck",
    "let me check",
    "let me double-check",
    "actually",
    "on second thought",
    "i made a mistake",
    "that's not right",
    "hmm",
)


@dataclass(frozen=True)
class ModelConfig:
    """The policy: a causal LM (a folder, a .gguf file or a Hub id), its precision and LoRA."""

    # a local Hugging Face folder | a .gguf file, dequantized into `dtype` (the `gguf` extra)
    # | a Hub id org/name[@revision] (from_pretrained: the hub cache and HF_HUB_OFFLINE apply)
    path: str = ""
    tokenizer_path: str = ""  # a folder, .gguf file or Hub id, as `path`; "" = `path`'s
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"  # weights and compute
    device: str = "auto"  # "auto" = cuda when available, else cpu
    gradient_checkpointing: bool = False  # recompute activations in backward: less memory
    disable_dropout: bool = True  # dropout would make π_old ≠ π_θ at ratio 1
    # 0 = full fine-tuning; > 0 = LoRA adapters (the `peft` extra)
    lora_rank: Annotated[int, at_least(0)] = 0
    lora_alpha: float = 16.0  # LoRA scaling numerator (the update is scaled by alpha / rank)
    lora_dropout: float = 0.0  # dropout inside the LoRA adapters
    # module names to adapt; "all-linear" = every linear layer but the output head
    lora_target_modules: list[str] = field(default_factory=lambda: ["all-linear"])


@dataclass(frozen=True)
class DataConfig:
    """Training prompts: the file, its columns, and how each prompt becomes model input."""

    # JSONL, JSON, CSV, TSV, Parquet or Arrow file; a folder (save_to_disk's, or data files
    # laid out as a Hub dataset); or a Hub dataset id org/name[@revision], through
    # datasets.load_dataset (its cache and HF_HUB_OFFLINE apply; the `datasets` extra)
    train_path: str = ""
    config: str = ""  # a Hub dataset's configuration (load_dataset's name; eval.path's too)
    split: str = "train"  # the split train_path reads in a Hub dataset or a folder of splits
    prompt_column: str = "prompt"  # the column holding the prompt text
    # reward argument → dataset column, e.g. { answer = "solution" }
    column_map: dict[str, str] = field(default_factory=dict)
    # reduce the `answer` column to its final answer: gsm8k = the text after the last "####",
    # math = the last \boxed{…}; plain = as it is
    answer_format: Literal["plain", "gsm8k", "math"] = "plain"
    # a longer prompt is an error naming its row
    max_prompt_tokens: Annotated[int, at_least(1)] = 512
    truncate_long_prompts: bool = False  # True: keep a long prompt's last max_prompt_tokens
    skip_bad_rows: bool = False  # skip (and count) bad rows instead of stopping at the first
    chat_template: bool = False  # wrap each prompt as a user turn with the tokenizer's template
    system_prompt: str = ""  # a system turn (with chat_template) or text put before each prompt
    shuffle: bool = True  # reshuffle the prompts every epoch (seeded by train.seed)


@dataclass(frozen=True)
class RolloutConfig:
    """Sampling the G completions of each prompt."""

    group_size: Annotated[int, at_least(1)] = 8  # G: completions sampled per prompt
    # completion length cap; longer ones are cut (truncated_frac)
    max_new_tokens: Annotated[int, at_least(1)] = 256
    # sampling temperature; the trainer's log-probs use it too
    temperature: Annotated[float, above(0)] = 1.0
    top_p: Annotated[float, within(0, 1, open_low=True)] = 1.0  # nucleus sampling (1.0 = off)
    top_k: Annotated[int, at_least(0)] = 0  # 0 = off
    stop_strings: list[str] = field(default_factory=list)  # end a completion at any of these
    # generation chunk, bounds KV-cache memory
    max_sequences_per_batch: Annotated[int, at_least(1)] = 512
    engine: Literal["transformers", "vllm"] = "transformers"  # vllm: GPU, `grpo[vllm]` extra
    # the built-in engine's decode step (forward, sampling, log-prob, EOS check) under
    # torch.compile over a static KV cache, CUDA graphs on a GPU; compiled once per shape
    # (time/compile); ended rows stay in the batch, masked; stop strings, FSDP and [agent]
    # turns decode eagerly; "auto": on CUDA only (on a CPU it gains too little for its
    # compile time, benchmarks/RESULTS.md); tokens are the eager loop's but at near-ties
    compile: Literal[True, False, "auto"] = False
    # GPU share vLLM may take (it shares the GPU)
    vllm_gpu_memory_utilization: Annotated[float, within(0, 1, open_low=True)] = 0.3
    vllm_sleep: bool = True  # free vLLM's GPU memory between rollouts (sleep mode)
    # 0 = data.max_prompt_tokens + rollout.max_new_tokens; with [agent], per turn, plus
    # agent.max_tool_response_tokens + 64 (set it when observations run longer)
    vllm_max_model_len: Annotated[int, at_least(0)] = 0
    vllm_enforce_eager: bool = False  # skip CUDA-graph capture: faster start, slower decoding
    # sync: sample, then learn, in turn | async: worker processes sample while the learner
    # trains (docs: "Asynchronous rollouts and Ray")
    mode: Literal["sync", "async"] = "sync"
    backend: Literal["local", "ray"] = "local"  # async workers: local processes | Ray actors
    # async rollout workers; a round's rows are split over them
    workers: Annotated[int, at_least(1)] = 1
    # k: a batch trained at version v was sampled by a version ≥ v − k (0: sync's results)
    max_staleness: Annotated[int, at_least(0)] = 1
    # a request that would come back too stale: wait = not issued until weights fresh
    # enough are out | drop = issued early; its groups dropped on arrival, prompts re-issued
    stale: Literal["wait", "drop"] = "wait"
    # optimizer steps between weight syncs to the workers (≤ k + 1)
    sync_every: Annotated[int, at_least(1)] = 1
    worker_threads: Annotated[int, at_least(1)] = 1  # torch threads in each worker
    # a worker without a heartbeat, or on one request, this long is restarted
    worker_timeout_s: Annotated[float, above(0)] = 600.0
    # restarts per run before it fails, naming the worker
    max_worker_restarts: Annotated[int, at_least(0)] = 3
    # backend ray, as ray.init's address: "" = $RAY_ADDRESS, else a `ray start` cluster on
    # this machine, else a new local instance | "auto" (never a new one) | "host:port" | "ray://…"
    ray_address: str = ""


@dataclass(frozen=True)
class AlgorithmConfig:
    """Advantages, the clipped surrogate, its aggregation and the KL penalty."""

    # group: (r − mean)/(σ + eps) | batch: σ of the whole batch | none: r − mean |
    # rloo: r minus the mean of the group's other rewards
    advantage_scale: Literal["group", "batch", "none", "rloo"] = "group"
    advantage_eps: Annotated[float, at_least(0)] = 1e-4  # eps in the advantage's denominator
    # the ratio is clipped below at 1 − clip_low
    clip_low: Annotated[float, within(0, 1, open_high=True)] = 0.2
    # … and above at 1 + clip_high (> clip_low: DAPO's clip-higher)
    clip_high: Annotated[float, at_least(0)] = 0.2
    # sequence: 1/|y_i| per completion (GRPO, Shao et al. 2024) | token: DAPO | constant: Dr. GRPO
    aggregation: Literal["sequence", "token", "constant"] = "sequence"
    beta: Annotated[float, at_least(0)] = 0.04  # KL weight; 0 = no reference model is loaded at all
    kl_kind: Literal["k1", "k2", "k3"] = "k3"  # the per-token KL estimator (see grpo.algo.kl)
    inner_iterations: Annotated[int, at_least(1)] = 1  # μ: optimizer steps on each rollout batch
    estimator: Literal["grpo", "ppo"] = "grpo"  # ppo: a critic + GAE instead of the group baseline
    # DAPO dynamic sampling: drop zero-variance groups and generate further rounds of
    # train.prompts_per_step prompts until that many informative groups are in hand (the
    # surplus of the last round is not trained on) or max_generation_rounds is reached.
    dynamic_sampling: bool = False
    # cap on rounds per step with dynamic_sampling
    max_generation_rounds: Annotated[int, at_least(1)] = 4
    # token: PPO's per-token ratio | sequence: GSPO's exp(mean_t log ρ_t), clipped per sequence
    ratio_level: Literal["token", "sequence"] = "token"
    # GSPO's clip below (the paper's 3e-4); clip_low is unused
    sequence_clip_low: Annotated[float, within(0, 1, open_high=True)] = 3e-4
    sequence_clip_high: Annotated[float, at_least(0)] = 4e-4  # GSPO's clip above (the paper's 4e-4)
    # entropy bonus on the masked token mean; 0 = off
    entropy_coef: Annotated[float, at_least(0)] = 0.0
    # weight the loss by π_old/π_sampler: auto = tis for the vllm engine, none for the built-in
    # one | tis: min(r, sampler_is_cap) | mis: r inside [sampler_mask_low, sampler_mask_high],
    # else 0 | seq_mis: the same on the sequence's product ratio | geo_mask: drop sequences
    # whose geometric-mean ratio is outside [sampler_geo_low, sampler_geo_high]
    sampler_correction: Literal["auto", "none", "tis", "mis", "seq_mis", "geo_mask"] = "auto"
    # samples from older weights (rollout.mode = "async"): none = as sync | sampler (prime-rl) =
    # clip π_θ against the worker's π_behav | decoupled (AReaL) = clip π_θ/π_prox, weight by
    # min(π_prox/π_behav, sampler_is_cap) | auto = decoupled when async with max_staleness ≥ 1
    off_policy: Literal["auto", "none", "sampler", "decoupled"] = "auto"
    # C of tis (verl's rollout_is_threshold default)
    sampler_is_cap: Annotated[float, above(0)] = 2.0
    # lower end of the band of mis and seq_mis
    sampler_mask_low: Annotated[float, at_least(0)] = 0.5
    sampler_mask_high: float = 2.0  # upper end of that band
    # lower end of the band of geo_mask (SkyRL's)
    sampler_geo_low: Annotated[float, at_least(0)] = 0.99
    sampler_geo_high: float = 1.01  # upper end of that band
    # DAPO overlong shaping: the last overlong_buffer tokens before rollout.max_new_tokens
    # cost a linear penalty, up to overlong_penalty at the cap; 0 = off
    overlong_buffer: Annotated[int, at_least(0)] = 0
    overlong_penalty: Annotated[float, at_least(0)] = 1.0  # the penalty at rollout.max_new_tokens
    # leave completions cut at rollout.max_new_tokens out of the loss (counted)
    mask_truncated_completions: bool = False


@dataclass(frozen=True)
class PPOConfig:
    """Used when algorithm.estimator = "ppo" (see grpo.training.update.critic)."""

    gamma: Annotated[float, within(0, 1)] = 1.0  # γ, discount per token
    lam: Annotated[float, within(0, 1)] = 0.95  # λ of GAE
    value_clip: Annotated[float, at_least(0)] = 0.2  # the clipped value loss's c; 0 = unclipped
    critic_lr: Annotated[float, above(0)] = 1e-5  # the critic's own AdamW learning rate (constant)
    whiten_advantages: bool = True  # normalise GAE advantages over the batch's tokens


@dataclass(frozen=True)
class CurriculumConfig:
    """Adaptive curriculum: draw prompts ∝ E[p(1 − p)]^strength under a Beta posterior."""

    enabled: bool = False  # false: epoch-wise shuffled order (data.shuffle)
    # exponent k on the weights: 0 = uniform, larger = sharper focus
    strength: Annotated[float, at_least(0)] = 1.0
    # α₀ of the Beta(α₀, β₀) prior; an unseen prompt's weight
    prior_successes: Annotated[float, above(0)] = 1.0
    # β₀ (α₀ = β₀ = 1: unseen weight 1/6 vs at most 1/4)
    prior_failures: Annotated[float, above(0)] = 1.0
    # pooled difficulty (grpo.algo.pooled_difficulty): prompts sharing a key share a prior and
    # are drawn ∝ P(group mixed)^strength. none: per-prompt Beta(α₀, β₀) weights as above |
    # column: the key is data column pool_column | length: prompt-length quantile buckets
    pool_by: Literal["none", "column", "length"] = "none"
    pool_column: str = ""  # the difficulty column for pool_by = "column" (e.g. level, source)
    length_buckets: Annotated[int, at_least(1)] = 4  # prompt-length buckets for pool_by = "length"
    # cap on a key prior's pseudo-counts (a + b)
    max_prior_weight: Annotated[float, above(0)] = 20.0
    # skip prompts with P(mixed) below this (0 = no skipping)
    prescreen_threshold: Annotated[float, within(0, 1, open_high=True)] = 0.0
    # share of each step's prompts drawn uniformly (fresh estimates)
    exploration: Annotated[float, within(0, 1)] = 0.1
    # counts weigh 0.5^(age / half-life); 0 = never forget
    half_life_steps: Annotated[float, at_least(0)] = 0.0


@dataclass(frozen=True)
class RewardConfig:
    """One ``[[rewards]]`` table; the total reward is the weighted sum of all of them."""

    function: str = ""  # "module:function", resolved once at start-up
    weight: float = 1.0  # its weight in the total reward
    timeout_s: float = 0.0  # 0 = no limit
    on_error: Literal["fail", "zero", "skip_group"] = "fail"  # what a failing row gets
    options: dict[str, Any] = field(default_factory=dict)  # keyword arguments bound at start-up
    accuracy: bool = False  # its value ≥ 1 means correct: drives accuracy, groups/* and grpo eval


@dataclass(frozen=True)
class OptimConfig:
    """AdamW, gradient clipping and the learning-rate schedule."""

    lr: Annotated[float, above(0)] = 1e-6  # peak learning rate
    weight_decay: float = 0.0  # AdamW's decoupled weight decay
    beta1: float = 0.9  # AdamW β1
    beta2: float = 0.999  # AdamW β2
    max_grad_norm: Annotated[float, at_least(0)] = 1.0  # 0 = no clipping
    schedule: Literal["constant", "linear", "cosine"] = "constant"  # decay after warm-up
    warmup_steps: Annotated[int, at_least(0)] = 0  # optimizer steps of linear warm-up
    # one fused AdamW kernel for all parameters where torch has one for the device (else
    # foreach); false = torch's default implementation (the same update up to rounding)
    fused: bool = True


@dataclass(frozen=True)
class EvalConfig:
    """Held-out greedy accuracy during training."""

    path: str = ""  # held-out prompts (same formats as data.train_path); "" = no evaluation
    split: str = "test"  # the split eval.path reads in a Hub dataset or a folder of splits
    # steps between evaluations (0 = only before and after training)
    every: Annotated[int, at_least(0)] = 0
    max_new_tokens: Annotated[int, at_least(0)] = 0  # 0 = rollout.max_new_tokens
    reward: str = ""  # "module:function" scoring ≥ 1 as correct; "" = the accuracy reward


@dataclass(frozen=True)
class TrainConfig:
    """The loop: steps, batch sizes, seed, outputs, logging and the console."""

    # training steps (each: one rollout batch, μ optimizer steps)
    steps: Annotated[int, at_least(1)] = 100
    # prompts per step (× rollout.group_size = sequences per step)
    prompts_per_step: Annotated[int, at_least(1)] = 16
    # gradient accumulation; the gradient is the same
    sequences_per_micro_batch: Annotated[int, at_least(1)] = 8
    # the policy and reference passes run each prompt once per group, its keys and values
    # shared by the G completions (the same log-probs up to rounding); off under DDP/FSDP
    # and gradient checkpointing, which the log then says
    share_prompt: bool = True
    # the policy's and reference's decoder under torch.compile (dynamic shapes) for the
    # training passes; sampling is unaffected; the first step compiles (about a minute on a
    # 2-core CPU, time/compile); the same values and gradients up to rounding; single
    # process, chunked log-probs only
    compile: bool = False
    seed: int = 0  # seeds sampling, shuffling and initialisation
    # torch CPU threads (grpo train/demo); 0 = $OMP_NUM_THREADS, else usable CPUs − busy ones
    threads: Annotated[int, at_least(0)] = 0
    run_dir: str = "runs/grpo"  # metrics, checkpoints and the final model go here
    # folders searched, before sys.path, for the module:name and file.py:name of tools, the
    # environment and reward functions; [] = the config file's folder, then the working
    # directory. Relative ones are from the config's folder; loading makes them absolute
    import_dirs: list[str] = field(default_factory=list)
    save_every: Annotated[int, at_least(0)] = 0  # 0 = only the final save
    # the newest K of RUN_DIR/checkpoints/step-* are kept
    keep_checkpoints: Annotated[int, at_least(1)] = 2
    resume: bool = False  # continue from RUN_DIR/checkpoints/latest when present
    # non-finite updates in a row (each skipped) before stopping
    max_consecutive_skips: Annotated[int, at_least(1)] = 3
    # steps between console lines (metrics.jsonl gets every step)
    log_every: Annotated[int, at_least(1)] = 1
    tensorboard: bool = True  # also write TensorBoard events when tensorboard is installed
    progress: bool = True  # false = nothing on the console per step
    quiet: bool = False  # no progress bar: one plain line every log_every steps (logs, CI)
    # steps between tables of the step's completions (completions.jsonl, backends); 0 = never
    completions_every: Annotated[int, at_least(0)] = 10
    # the completion tables also hold each row's ids as trained on, padding left out:
    # prompt_ids, completion_ids (inserted tokens included) and model_mask (1 = the model's)
    log_token_ids: bool = False
    wandb_project: str = ""  # log to Weights & Biases in this project ("" = off; `wandb` extra)
    trackio_project: str = ""  # log to trackio under this project ("" = off; `trackio` extra)
    # phrases counted as self-correction in reasoning/self_correction_rate (case-insensitive,
    # whole words); [] = none counted
    self_correction_phrases: list[str] = field(
        default_factory=lambda: list(DEFAULT_SELF_CORRECTION_PHRASES)
    )


@dataclass(frozen=True)
class DistributedConfig:
    """Used when launched by torchrun (WORLD_SIZE > 1); ignored in a single process."""

    strategy: Literal["ddp", "fsdp"] = "ddp"  # fsdp: FSDP2 fully_shard, for models too big
    backend: Literal["auto", "gloo", "nccl"] = "auto"  # auto: nccl on CUDA, gloo on CPU
    # a collective waiting longer than this fails instead of hanging
    timeout_s: Annotated[float, above(0)] = 1800.0


@dataclass(frozen=True)
class AgentConfig:
    """Multi-turn rollouts with tools and an environment (see "Agents and tools"); off while
    both environment and tools are empty."""

    environment: str = ""  # "module:Class", created per rollout row from its dataset row
    tools: list[str] = field(default_factory=list)  # "module:function" tools; "python" = sandbox
    parser: Literal["xml_json"] = "xml_json"  # tool calls as <tool_call>{json}</tool_call>
    # assistant turns per trajectory; rows still going are cut
    max_turns: Annotated[int, at_least(1)] = 4
    # a longer tool result is cut (agent/too_long/errors)
    max_tool_response_tokens: Annotated[int, at_least(1)] = 256
    tool_timeout_s: Annotated[float, at_least(0)] = 10.0  # per tool call; 0 = no limit
    # per environment call (constructor, reset, step); 0 = no limit
    env_timeout_s: Annotated[float, at_least(0)] = 30.0
    env_on_error: Literal["fail", "zero", "skip_group"] = "fail"  # a raising or hung environment
    # true: the environment's reward (summed) is the accuracy reward, ≥ 1 = correct (accuracy,
    # groups/*, the curriculum, grpo eval); false: only when no [[rewards]] table is set
    environment_accuracy: bool = False
    # a turn's tool calls and environment steps run this many at a time (results are
    # applied in row order: the same trajectories whatever the number)
    tool_workers: Annotated[int, at_least(1)] = 8
    # "process": each tool call in a worker process, killed at tool_timeout_s (the tool must
    # be importable by module name); "thread": in threads, a hung call's thread runs on
    tool_isolation: Literal["thread", "process"] = "thread"

    @property
    def enabled(self) -> bool:
        return bool(self.environment or self.tools)


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
    agent: AgentConfig = field(default_factory=AgentConfig)
