"""policy_update with the new loss options: gradient accumulation still gives the one-batch
update; the correction's metrics are the hand-computed ones; truncated rows leave the loss."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from grpo.algo.corrections import CorrectionSettings
from grpo.algo.groups import skipped_groups, zero_variance_groups
from grpo.algo.objective import Objective
from grpo.algo.selection import select_groups
from grpo.training.update.policy import TrainBatch
from tests.training.update.sgd import sgd_update


def _batch(vocab: int) -> TrainBatch:
    generator = torch.Generator().manual_seed(0)
    rows = 6
    completion_lengths = torch.tensor([5, 1, 3, 2, 5, 4])
    completion_mask = (torch.arange(5)[None, :] < completion_lengths[:, None]).long()
    return TrainBatch(
        prompt_ids_BP=torch.randint(3, vocab, (rows, 3), generator=generator),
        prompt_mask_BP=torch.ones(rows, 3, dtype=torch.long),
        completion_ids_BT=torch.randint(3, vocab, (rows, 5), generator=generator) * completion_mask,
        completion_mask_BT=completion_mask,
        advantages_BT=torch.randn(rows, generator=generator)[:, None].expand(-1, 5),
        sampler_logp_BT=torch.zeros(rows, 5),  # see _with_sampler_logps
    )


def _update(model, batch: TrainBatch, micro: int, objective: Objective) -> dict[str, float]:
    return sgd_update(model, batch, objective, lr=1.0, micro=micro)


def _with_sampler_logps(model, batch: TrainBatch, shift_BT: torch.Tensor) -> TrainBatch:
    """The batch whose sampler log-probs are the trainer's plus ``shift_BT`` (on real tokens)."""
    from grpo.models.logprobs import completion_logprobs

    with torch.no_grad():
        logp, _ = completion_logprobs(
            model,
            batch.prompt_ids_BP,
            batch.prompt_mask_BP,
            batch.completion_ids_BT,
            batch.completion_mask_BT,
        )
    return TrainBatch(
        **{**batch.__dict__, "sampler_logp_BT": (logp + shift_BT) * batch.completion_mask_BT}
    )


@pytest.mark.parametrize(
    "settings",
    [
        {"correction": CorrectionSettings("tis", is_cap=1.2)},
        {"correction": CorrectionSettings("seq_mis", mask_low=0.3, mask_high=3.0)},
        {"ratio_level": "sequence", "entropy_coef": 0.05, "inner_iterations": 2},
    ],
)
def test_micro_batches_still_give_the_one_batch_update(tiny_model_dir, settings) -> None:
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    shift = torch.linspace(-0.6, 0.6, 30).reshape(6, 5)
    batch = _with_sampler_logps(base, _batch(base.config.vocab_size), shift)
    objective = Objective(max_completion_length=5, aggregation="token", **settings)
    one, three = copy.deepcopy(base), copy.deepcopy(base)
    one_metrics = _update(one, batch, 6, objective)
    three_metrics = _update(three, batch, 2, objective)
    for (name, p1), p3 in zip(one.named_parameters(), three.parameters(), strict=True):
        assert torch.allclose(p1, p3, atol=1e-6), name
    for key, value in one_metrics.items():
        assert three_metrics[key] == pytest.approx(value, abs=1e-5), key


def test_the_correction_metrics_are_the_hand_computed_ones(tiny_model_dir) -> None:
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    # Sampler log-prob = trainer's − log 3 on every real token: r = 3 everywhere.
    shift = torch.full((6, 5), -math.log(3.0))
    batch = _with_sampler_logps(base, _batch(base.config.vocab_size), shift)
    objective = Objective(max_completion_length=5, correction=CorrectionSettings("tis"))
    metrics = _update(copy.deepcopy(base), batch, 4, objective)
    assert metrics["sampler/is_ratio_mean"] == pytest.approx(3.0, rel=1e-4)
    assert metrics["sampler/is_ratio_min"] == pytest.approx(3.0, rel=1e-4)
    assert metrics["sampler/is_weight_max"] == pytest.approx(2.0)  # the default cap
    assert metrics["sampler/capped_frac"] == pytest.approx(1.0)
    assert metrics["sampler/kl_k3"] == pytest.approx(2.0 - math.log(3.0), rel=1e-4)
    assert metrics["sampler/masked_frac"] == 0.0
    # With no correction the update logs none of these keys (defaults: unchanged output).
    plain = _update(copy.deepcopy(base), batch, 4, Objective(max_completion_length=5))
    assert not any(key.startswith("sampler/") for key in plain)


def test_truncated_rows_leave_the_loss_but_not_the_baseline() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])  # group 2 has no signal
    rewards_NG = rewards.view(-1, 4)
    groups = (
        rewards_NG,
        zero_variance_groups(rewards_NG),
        skipped_groups(torch.zeros(8, dtype=bool), 4),
    )
    truncated = torch.tensor([False, True, False, False, True, False, False, False])
    selection = select_groups(*groups, target_groups=2, scale="none", eps=0.0, drop_B=truncated)
    # Group 1 trains without its truncated row 1; row 4 is in a group that does not train.
    assert selection.keep_B.tolist() == [True, False, True, True] + [False] * 4
    assert selection.dropped_rows == 1
    assert selection.advantages_B[:4].tolist() == [0.75, -0.25, -0.25, -0.25]  # mean over all 4
    plain = select_groups(*groups, target_groups=2, scale="none", eps=0.0)
    assert plain.dropped_rows is None and plain.keep_B[:4].all()
