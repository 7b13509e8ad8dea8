"""The memory planner: the 7B example (140 GB against 252) exactly, the other precisions,
LoRA, activations."""

from __future__ import annotations

import pytest

from grpo.models.architecture import Architecture, architecture_from_config
from grpo.models.memory import plan_memory

GB = 10**9


def test_the_7b_example_exactly() -> None:
    plan = plan_memory(7 * GB, precision="mixed", optimizer="adamw", reward_model=True)
    assert plan.trained_model_bytes == 112 * GB  # 7e9 × 16 bytes
    assert plan.frozen_model_bytes == 14 * GB  # 7e9 × 2 bytes
    assert plan.ppo_total == 252 * GB  # 2 × 112 + 2 × 14
    assert plan.grpo_total == 140 * GB  # 112 + 28
    assert plan.saving == 112 * GB
    assert round(plan.saving_fraction * 100, 1) == 44.4
    assert plan.factor == pytest.approx(1.8)
    assert plan.rows == {  # bf16 weights 2, grads 2, fp32 master + Adam moments 12
        "weights": (42 * GB, 56 * GB),
        "gradients": (14 * GB, 28 * GB),
        "optimizer states": (84 * GB, 168 * GB),
        "activations": (0, 0),
        "logits": (0, 0),
    }


def test_precisions_optimizers_and_frozen_models() -> None:
    n = 1000
    fp32 = plan_memory(n, precision="fp32")  # 4 + 4 + 8 trained, reference 4
    assert (fp32.trained_model_bytes, fp32.grpo_total, fp32.ppo_total) == (16 * n, 20 * n, 36 * n)
    bf16 = plan_memory(n, precision="bf16")  # 2 + 2 + 4 (AdamW states in bf16)
    assert bf16.trained_model_bytes == 8 * n
    sgd = plan_memory(n, precision="mixed", optimizer="sgd", reference=False)
    assert sgd.trained_model_bytes == 8 * n and sgd.grpo_total == 8 * n  # master copy only
    assert plan_memory(n, optimizer="adamw-8bit").trained_model_bytes == (2 + 2 + 4 + 2) * n
    separate = plan_memory(n, precision="fp32", critic_update="separate")
    assert separate.ppo_total == 36 * n - 4 * n  # one model's gradients live at a time


TINY = Architecture(
    parameters=1000,
    hidden_size=4,
    layers=2,
    intermediate_size=8,
    attention_width=4,
    kv_width=2,
    vocab_size=10,
)


def test_lora_trains_adapters_and_the_reference_is_free() -> None:
    # per layer, r·(in + out): q 4+4, k 4+2, v 4+2, o 4+4, gate 4+8, up 4+8, down 8+4 = 64
    assert TINY.lora_parameters(3) == 3 * 64 * 2
    plan = plan_memory(1000, architecture=TINY, precision="fp32", lora_rank=3)
    adapters = 384
    # GRPO: base 4·1000 frozen, adapters 16 bytes each, no reference copy
    assert plan.grpo_total == 4 * 1000 + 16 * adapters
    # PPO: the critic has its own base and adapters
    assert plan.ppo_total == 2 * (4 * 1000 + 16 * adapters)
    assert "no copy" in plan.models["grpo"]
    with pytest.raises(ValueError, match="architecture"):
        plan_memory(1000, lora_rank=3)


def test_activations_and_logits_by_hand() -> None:
    # per layer per token: 4h + 4q + 4kv + 4i = 16 + 16 + 8 + 32 = 72 elements; 2 layers
    assert TINY.activation_elements_per_token(gradient_checkpointing=False) == 144
    assert TINY.activation_elements_per_token(gradient_checkpointing=True) == 2 * 4 + 72
    plan = plan_memory(
        1000,
        architecture=TINY,
        precision="fp32",
        sequences=3,
        sequence_length=5,
        completion_length=2,
    )
    assert plan.rows["activations"] == (3 * 5 * 144 * 4,) * 2
    assert plan.rows["logits"] == (2 * 3 * 2 * 10 * 4,) * 2  # logits + their gradient, fp32


def test_architecture_from_a_local_config(tiny_model_dir) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    architecture = architecture_from_config(str(tiny_model_dir))
    assert architecture.parameters == sum(p.numel() for p in model.parameters())
    assert (architecture.hidden_size, architecture.layers) == (32, 2)


def test_architecture_from_a_gguf_file(smollm2_gguf) -> None:
    architecture = architecture_from_config(str(smollm2_gguf))
    assert architecture.parameters == 134_515_008  # SmolLM2-135M, tied embeddings once
    assert (architecture.layers, architecture.hidden_size, architecture.kv_width) == (30, 576, 192)
    assert architecture.vocab_size == 49152
