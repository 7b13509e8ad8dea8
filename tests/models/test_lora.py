"""LoRA via peft: only adapters train, the base is the reference, the merged model loads."""

from __future__ import annotations

import pytest
import torch

from grpo.rewards.runner import RewardFunction
from tests.user_code.user_rewards import digit_fraction

pytest.importorskip("peft")


def test_lora_trains_adapters_and_saves_a_loadable_model(tiny_config, tiny_model_dir) -> None:
    from transformers import AutoModelForCausalLM

    import grpo.training.loop
    import grpo.training.setup_learner

    config = tiny_config(
        "model.lora_rank=4",
        "rollout.max_new_tokens=5",
        "algorithm.beta=0.1",
        "optim.lr=5e-2",
    )
    loaded = []
    original = grpo.training.setup_learner.load_reference
    grpo.training.setup_learner.load_reference = lambda *a, **k: (
        loaded.append(1) or original(*a, **k)
    )
    try:
        result = grpo.training.loop.train(
            config,
            reward_functions=[RewardFunction("digit_fraction", digit_fraction)],
            verbose=False,
        )
    finally:
        grpo.training.setup_learner.load_reference = original
    assert not loaded, "LoRA uses the base weights as the reference; no copy is loaded"
    trained = [row for row in result.history if row.get("groups_trained", 0) > 0]
    assert trained and all(row["kl"] >= 0 for row in trained)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    merged = AutoModelForCausalLM.from_pretrained(result.final_dir)
    changed = [
        name
        for (name, a), b in zip(base.named_parameters(), merged.parameters(), strict=True)
        if not torch.equal(a, b)
    ]
    assert changed and all("proj" in name for name in changed)  # only adapted linear layers moved
    assert (result.run_dir / "final_adapter" / "adapter_config.json").exists()
    # The merged export is a plain transformers model computing what the adapter model does,
    # and with adapters disabled the adapter model is the base (the reference) exactly.
    adapter_model = result.model.eval()
    input_ids = torch.tensor([[3, 5, 7, 9, 11, 4], [6, 2, 8, 1, 5, 7]])
    assert type(merged).__module__.startswith("transformers.")
    with torch.no_grad():
        adapter_logits = adapter_model(input_ids=input_ids).logits
        torch.testing.assert_close(merged(input_ids=input_ids).logits, adapter_logits)
        with adapter_model.disable_adapter():
            reference_logits = adapter_model(input_ids=input_ids).logits
        torch.testing.assert_close(reference_logits, base(input_ids=input_ids).logits)
    assert not torch.allclose(adapter_logits, reference_logits)  # the adapters did train
