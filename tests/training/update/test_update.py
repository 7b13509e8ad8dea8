"""policy_update on a tiny random model: micro-batch invariance, π_old reuse, masking."""

from __future__ import annotations

import copy

import pytest
import torch

from grpo.algo.objective import Objective
from grpo.models.logprobs import completion_logprobs
from grpo.runtime.optim import Optimization
from grpo.training.update.policy import Reference, TrainBatch, policy_update
from tests.training.update.sgd import sgd_update


def _batch(vocab: int, rows: int = 8) -> TrainBatch:
    generator = torch.Generator().manual_seed(0)
    prompt_lengths = torch.tensor([4, 2, 3, 4, 1, 4, 2, 3])[:rows]
    completion_lengths = torch.tensor([5, 1, 3, 2, 5, 4, 1, 2])[:rows]
    prompt_mask = (torch.arange(4)[None, :] >= 4 - prompt_lengths[:, None]).long()  # left-padded
    completion_mask = (torch.arange(5)[None, :] < completion_lengths[:, None]).long()
    return TrainBatch(
        prompt_ids_BP=torch.randint(3, vocab, (rows, 4), generator=generator) * prompt_mask,
        prompt_mask_BP=prompt_mask,
        completion_ids_BT=torch.randint(3, vocab, (rows, 5), generator=generator) * completion_mask,
        completion_mask_BT=completion_mask,
        advantages_BT=torch.randn(rows, generator=generator)[:, None].expand(-1, 5),
        sampler_logp_BT=torch.zeros(rows, 5),
    )


def _objective(**settings) -> Objective:
    return Objective(temperature=0.9, max_completion_length=5, **settings)


def _step(
    model: torch.nn.Module,
    batch: TrainBatch,
    micro: int,
    objective: Objective,
    share_prompt: bool = True,
) -> dict:
    reference = Reference(copy.deepcopy(model).eval()) if objective.beta > 0 else None
    return sgd_update(
        model,
        batch,
        objective,
        lr=1.0,
        micro=micro,
        reference=reference,
        share_prompt=share_prompt,
    )


def test_groups_sharing_their_prompt_give_the_same_update(tiny_model_dir) -> None:
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    batch = _batch(base.config.vocab_size)
    for name in ("prompt_ids_BP", "prompt_mask_BP"):  # 2 prompts × G = 4 (rows 0 and 4)
        setattr(batch, name, getattr(batch, name)[[0, 0, 0, 0, 4, 4, 4, 4]])
    objective = _objective(beta=0.1, inner_iterations=2)
    shared, plain = copy.deepcopy(base), copy.deepcopy(base)
    # 3 rows per micro-batch: the first group is split, the second cut at both ends.
    shared_metrics = _step(shared, batch, 3, objective, share_prompt=True)
    plain_metrics = _step(plain, batch, 3, objective, share_prompt=False)
    for (name, p1), p2 in zip(shared.named_parameters(), plain.parameters(), strict=True):
        assert torch.allclose(p1, p2, atol=1e-6), name
    for key in ("loss", "kl", "entropy"):
        assert shared_metrics[key] == pytest.approx(plain_metrics[key], abs=1e-6)


@pytest.mark.parametrize("aggregation", ["sequence", "token", "constant"])
def test_four_micro_batches_give_the_one_batch_update(tiny_model_dir, aggregation: str) -> None:
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    batch = _batch(base.config.vocab_size)
    objective = _objective(aggregation=aggregation, beta=0.1, inner_iterations=2)
    one, four = copy.deepcopy(base), copy.deepcopy(base)
    one_metrics = _step(one, batch, 8, objective)
    four_metrics = _step(four, batch, 2, objective)
    for (name, p1), p4 in zip(one.named_parameters(), four.parameters(), strict=True):
        assert torch.allclose(p1, p4, atol=1e-6), name
    assert four_metrics["loss"] == pytest.approx(one_metrics["loss"], abs=1e-6)
    assert four_metrics["kl"] == pytest.approx(one_metrics["kl"], abs=1e-6)


def test_padding_tokens_do_not_affect_the_update(tiny_model_dir) -> None:
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    batch = _batch(base.config.vocab_size)
    scrambled = copy.deepcopy(batch)
    pad_prompt, pad_completion = batch.prompt_mask_BP == 0, batch.completion_mask_BT == 0
    scrambled.prompt_ids_BP[pad_prompt] = 7
    scrambled.completion_ids_BT[pad_completion] = 9
    a, b = copy.deepcopy(base), copy.deepcopy(base)
    objective = _objective(beta=0.0)
    _step(a, batch, 3, objective)
    _step(b, scrambled, 3, objective)
    for p1, p2 in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.allclose(p1, p2, atol=1e-6)


def test_completion_logprobs_match_a_full_softmax(tiny_model_dir) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    batch = _batch(model.config.vocab_size, rows=1)  # one row: no padding in the prompt
    logp, entropy = completion_logprobs(
        model,
        batch.prompt_ids_BP,
        batch.prompt_mask_BP,
        batch.completion_ids_BT,
        batch.completion_mask_BT,
        temperature=0.5,
        with_entropy=True,
    )
    ids = torch.cat([batch.prompt_ids_BP, batch.completion_ids_BT], dim=1)
    logits = model(input_ids=ids).logits[:, 3:-1] / 0.5
    expected = torch.log_softmax(logits, -1).gather(-1, batch.completion_ids_BT[..., None])[..., 0]
    assert torch.allclose(logp, expected, atol=1e-5)
    assert entropy.shape == logp.shape and (entropy >= 0).all()


@pytest.mark.parametrize("poison", [float("inf"), float("nan")])
def test_a_non_finite_update_is_skipped_and_changes_nothing(tiny_model_dir, poison) -> None:
    """A real parameter set to inf/nan makes the loss and gradient non-finite: the update
    is skipped (no optimizer step), counted, and the weights and AdamW moments stay put."""
    import math

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    batch = _batch(model.config.vocab_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)

    def update() -> dict:
        return policy_update(
            model,
            batch,
            Objective(beta=0.0, temperature=1.0, max_completion_length=5),
            Optimization(optimizer, scheduler, max_grad_norm=1.0),
            sequences_per_micro_batch=3,
        )

    assert update()["skipped_updates"] == 0.0  # a good update first: AdamW has moments
    with torch.no_grad():
        model.model.norm.weight[0] = poison
    weights = {name: p.detach().clone() for name, p in model.named_parameters()}
    moments = copy.deepcopy(optimizer.state_dict()["state"])
    metrics = update()
    assert metrics["skipped_updates"] == 1.0 and not math.isfinite(metrics["grad_norm"])
    for name, parameter in model.named_parameters():
        torch.testing.assert_close(parameter, weights[name], rtol=0, atol=0, equal_nan=True)
    for index, state in optimizer.state_dict()["state"].items():
        for key, value in state.items():
            assert torch.equal(value, moments[index][key]), (index, key)
    assert all(p.grad is None for p in model.parameters())  # nothing carried to the next
    assert scheduler.last_epoch == 2  # the LR schedule stays on the step clock
