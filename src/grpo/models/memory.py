"""Training-memory planner: what GRPO and PPO hold in memory, row by row (pure arithmetic).

A 7B policy under mixed-precision Adam (the accounting of ZeRO, Rajbhandari et al. 2020):
a trained model carries 16 bytes per parameter, 7e9 × 16 = 112 GB; the frozen reference
and reward model 2 bytes per parameter, 14 GB each. PPO trains the policy and a critic of
the same size: 2 × 112 + 2 × 14 = 252 GB. GRPO trains only the policy: 112 + 28 = 140 GB.
The saving is 112 GB = 44.4 % of PPO's footprint, a factor of 1.8::

    >>> plan = plan_memory(7_000_000_000, precision="mixed", reward_model=True)
    >>> round(plan.grpo_total / 1e9), round(plan.ppo_total / 1e9), round(plan.saving_fraction, 3)
    (140, 252, 0.444)

Only :func:`grpo.models.architecture.architecture_from_config` reads anything (a local
config.json); everything here is arithmetic on its arguments. The assumptions are listed in
``MemoryPlan.assumptions``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from grpo.models.architecture import Architecture

Precision = Literal["fp32", "bf16", "mixed"]
Optimizer = Literal["adamw", "adamw-8bit", "sgd"]
CriticUpdate = Literal["joint", "separate"]

# Bytes per parameter: the weights the forward pass reads, their gradient, and per
# optimizer state; "mixed" also keeps an fp32 master copy among the optimizer states.
WEIGHT_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "mixed": 2}
GRADIENT_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "mixed": 2}
MASTER_BYTES: dict[str, int] = {"fp32": 0, "bf16": 0, "mixed": 4}
STATE_COUNT: dict[str, int] = {"adamw": 2, "adamw-8bit": 2, "sgd": 0}
ROWS = ("weights", "gradients", "optimizer states", "activations", "logits")


def optimizer_bytes_per_parameter(precision: Precision, optimizer: Optimizer) -> int:
    """Master copy (mixed precision) + optimizer states, per trained parameter."""
    state_bytes = 1 if optimizer == "adamw-8bit" else 4 if precision != "bf16" else 2
    return MASTER_BYTES[precision] + STATE_COUNT[optimizer] * state_bytes


def trained_bytes_per_parameter(precision: Precision, optimizer: Optimizer) -> int:
    """Weights + gradient + optimizer states: 16 for mixed-precision or fp32 AdamW, 8 for bf16."""
    return (
        WEIGHT_BYTES[precision]
        + GRADIENT_BYTES[precision]
        + optimizer_bytes_per_parameter(precision, optimizer)
    )


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes per row for GRPO and PPO (``rows[name] = (grpo, ppo)``) and how they were got."""

    rows: dict[str, tuple[int, int]]
    trained_model_bytes: int  # one trained model: weights + gradients + optimizer states
    frozen_model_bytes: int  # one frozen model of the policy's size
    frozen_models: int  # full-size frozen models held besides the trained ones
    models: dict[str, str]  # what each algorithm holds
    assumptions: list[str] = field(default_factory=list)

    @property
    def grpo_total(self) -> int:
        return sum(grpo for grpo, _ in self.rows.values())

    @property
    def ppo_total(self) -> int:
        return sum(ppo for _, ppo in self.rows.values())

    @property
    def saving(self) -> int:
        return self.ppo_total - self.grpo_total

    @property
    def saving_fraction(self) -> float:
        return self.saving / self.ppo_total if self.ppo_total else 0.0

    @property
    def factor(self) -> float:
        return self.ppo_total / self.grpo_total if self.grpo_total else 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "rows": {name: {"grpo": g, "ppo": p} for name, (g, p) in self.rows.items()},
            "grpo_total": self.grpo_total,
            "ppo_total": self.ppo_total,
            "saving": self.saving,
            "saving_fraction": self.saving_fraction,
            "factor": self.factor,
            "trained_model_bytes": self.trained_model_bytes,
            "frozen_model_bytes": self.frozen_model_bytes,
            "frozen_models": self.frozen_models,
            "models": self.models,
            "assumptions": self.assumptions,
        }


def plan_memory(
    parameters: int,
    *,
    architecture: Architecture | None = None,
    precision: Precision = "mixed",
    optimizer: Optimizer = "adamw",
    reference: bool = True,
    reward_model: bool = False,
    lora_rank: int = 0,
    sequences: int = 0,
    sequence_length: int = 0,
    completion_length: int = 0,
    gradient_checkpointing: bool = False,
    critic_update: CriticUpdate = "joint",
) -> MemoryPlan:
    """Training-state bytes of GRPO and of PPO for a policy of ``parameters`` parameters.

    Rows: weights (every model held), gradients and optimizer states (trained parameters
    only), activations and logits (one micro-batch of ``sequences`` × ``sequence_length``
    tokens, ``completion_length`` of them scored; needs ``architecture``; one model's backward
    at a time, so PPO's rows equal GRPO's).

    - Trained parameter: weights + gradient + optimizer states; mixed = 2 + 2 + (4 master +
      4 + 4 Adam moments) = 16 bytes, fp32 = 4 + 4 + 8 = 16, bf16 = 2 + 2 + 4 = 8.
    - Frozen model (reference, reward model, LoRA base): weights only, 4 bytes fp32, else 2.
      The reward model is assumed the policy's size (the usual RLHF set-up).
    - PPO's critic is the policy's architecture with a scalar head, counted as the policy's
      size, trained like it (LoRA: its own frozen base plus adapters).
    - LoRA (``lora_rank`` > 0): adapters on every linear layer but the LM head; the reference
      is the base with adapters disabled, so it costs nothing extra.
    - ``critic_update``: "joint" = policy and critic gradients live together (one backward
      through both, the usual PPO, and the 252 GB above); "separate" = each model takes its
      step and frees its gradients before the other's backward (grpo's PPO), so only the
      larger gradient set is live at once.

    Example:
        >>> plan_memory(7_000_000_000, reward_model=True).trained_model_bytes
        112000000000
    """
    _check_plan_arguments(parameters, architecture, lora_rank, sequences)
    adapters = architecture.lora_parameters(lora_rank) if lora_rank and architecture else 0
    frozen_models = (reference and not lora_rank) + reward_model
    rows, trained_model_bytes, frozen_model_bytes = _model_state_rows(
        parameters, adapters, lora_rank, precision, optimizer, frozen_models, critic_update
    )
    transient_rows, transient_assumption = _transient_rows(
        architecture,
        precision=precision,
        sequences=sequences,
        sequence_length=sequence_length,
        completion_length=completion_length,
        gradient_checkpointing=gradient_checkpointing,
    )
    return MemoryPlan(
        rows=rows | transient_rows,
        trained_model_bytes=trained_model_bytes,
        frozen_model_bytes=frozen_model_bytes,
        frozen_models=frozen_models,
        models=_held_models(reference=reference, reward_model=reward_model, lora_rank=lora_rank),
        assumptions=_assumptions(
            precision, optimizer, critic_update, lora_rank, adapters, transient_assumption
        ),
    )


def _model_state_rows(
    parameters: int,
    adapters: int,
    lora_rank: int,
    precision: Precision,
    optimizer: Optimizer,
    frozen_models: int,
    critic_update: CriticUpdate,
) -> tuple[dict[str, tuple[int, int]], int, int]:
    """The weights, gradients and optimizer-states rows (GRPO: the policy; PPO: policy and
    critic), one trained model's bytes and one frozen model's. Under LoRA the trained
    parameters are the ``adapters``, over a frozen base of the policy's size."""
    weight_bytes = WEIGHT_BYTES[precision]
    frozen_model = parameters * weight_bytes
    trained = adapters if lora_rank else parameters
    frozen_base = frozen_model if lora_rank else 0  # LoRA: the base under the adapters
    extra_frozen = frozen_model * frozen_models
    model_weights = trained * weight_bytes + frozen_base  # one trained model's weights
    gradients = trained * GRADIENT_BYTES[precision]
    optimizer_states = trained * optimizer_bytes_per_parameter(precision, optimizer)
    ppo_gradients = gradients if critic_update == "separate" else 2 * gradients
    rows = {
        "weights": (model_weights + extra_frozen, 2 * model_weights + extra_frozen),
        "gradients": (gradients, ppo_gradients),
        "optimizer states": (optimizer_states, 2 * optimizer_states),
    }
    return rows, model_weights + gradients + optimizer_states, frozen_model


def _check_plan_arguments(
    parameters: int, architecture: Architecture | None, lora_rank: int, sequences: int
) -> None:
    """Arguments :func:`plan_memory` cannot plan with: a ValueError saying why."""
    if parameters <= 0:
        raise ValueError(f"parameters must be > 0, got {parameters}")
    if lora_rank < 0:
        raise ValueError(f"lora_rank must be ≥ 0, got {lora_rank}")
    if lora_rank and architecture is None:
        raise ValueError("lora_rank > 0 needs the architecture (a model config) to count adapters")
    if sequences and architecture is None:
        raise ValueError("activations need the architecture (a model config), not just a count")


def _transient_rows(
    architecture: Architecture | None,
    *,
    precision: Precision,
    sequences: int,
    sequence_length: int,
    completion_length: int,
    gradient_checkpointing: bool,
) -> tuple[dict[str, tuple[int, int]], str]:
    """The activations and logits rows of one micro-batch, and the assumption they rest on,
    in words; nothing is estimated without an architecture and a batch.

    They are those of one model's backward at a time (PPO's policy and critic passes run one
    after the other), so PPO's rows equal GRPO's. Activations: sequences × sequence_length ×
    the elements a layer saves per token × 2 bytes (4 in fp32). Logits: the scored positions
    only (``logits_to_keep``), in fp32, twice (logits and their gradient):
    2 × sequences × completion_length × vocab × 4 bytes."""
    if architecture is None or not sequences:
        nothing = "activations and logits not estimated (give a config and a batch)"
        return {"activations": (0, 0), "logits": (0, 0)}, nothing
    act_bytes = 4 if precision == "fp32" else 2
    per_token = architecture.activation_elements_per_token(gradient_checkpointing)
    activations = sequences * sequence_length * per_token * act_bytes
    logits = 2 * sequences * completion_length * architecture.vocab_size * 4
    assumption = (
        f"activations of one micro-batch ({sequences} × {sequence_length} tokens"
        f"{', gradient checkpointing' if gradient_checkpointing else ''}), one model's "
        f"backward at a time; logits: {completion_length} scored positions × vocab "
        f"{architecture.vocab_size}, fp32, ×2 for their gradient"
    )
    return {"activations": (activations, activations), "logits": (logits, logits)}, assumption


def _held_models(*, reference: bool, reward_model: bool, lora_rank: int) -> dict[str, str]:
    """What GRPO and PPO each hold: the trained models and the frozen ones."""
    frozen = [
        name
        for name, held in (
            ("reference" + (" (LoRA base: no copy)" if lora_rank else ""), reference),
            ("reward model", reward_model),
        )
        if held
    ]
    trained_kind = f"LoRA r={lora_rank}" if lora_rank else "full"
    return {
        "grpo": f"policy ({trained_kind}) + frozen: {', '.join(frozen) or 'none'}",
        "ppo": f"policy + critic ({trained_kind}) + frozen: {', '.join(frozen) or 'none'}",
    }


def _assumptions(
    precision: Precision,
    optimizer: Optimizer,
    critic_update: CriticUpdate,
    lora_rank: int,
    adapters: int,
    transient_assumption: str,
) -> list[str]:
    """The plan's assumptions, in words, for the arguments it was made with."""
    weight_bytes = WEIGHT_BYTES[precision]
    trained_per_param = trained_bytes_per_parameter(precision, optimizer)
    assumptions = [
        f"GB = 1e9 bytes; {precision} precision, {optimizer}: a trained parameter costs "
        f"{trained_per_param} bytes (weights {weight_bytes} + gradient {GRADIENT_BYTES[precision]}"
        f" + optimizer {optimizer_bytes_per_parameter(precision, optimizer)}), a frozen one "
        f"{weight_bytes}",
        "the critic and the reward model are counted at the policy's size",
        f"PPO gradients: {critic_update} update ("
        + (
            "both models' gradients live at once)"
            if critic_update == "joint"
            else "each model frees its gradients after its own step)"
        ),
    ]
    if lora_rank:
        assumptions.append(
            f"LoRA r={lora_rank} on every linear layer but the LM head: {adapters:,} trained "
            "parameters; the reference is the base with adapters disabled"
        )
    assumptions.append(transient_assumption)
    assumptions.append(
        "not counted: the rollout's KV cache, CUDA context / interpreter, allocator slack"
    )
    return assumptions
