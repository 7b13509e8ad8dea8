import math

import pytest
import torch

from grpo import aggregate, policy_loss

VALUES = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
RAGGED = torch.tensor([[1, 1, 1], [1, 0, 0]])  # completion lengths 3 and 1


def test_sequence_aggregation_is_mean_of_per_completion_means() -> None:
    # (1/2)·((1+2+3)/3 + 4/1) = 3; the 9s are padding.
    assert aggregate(VALUES, RAGGED, "sequence").item() == pytest.approx(3.0)


def test_token_aggregation_is_sum_over_kept_tokens() -> None:
    assert aggregate(VALUES, RAGGED, "token").item() == pytest.approx(10 / 4)


def test_constant_aggregation_divides_by_batch_times_max_length() -> None:
    assert aggregate(VALUES, RAGGED, "constant").item() == pytest.approx(10 / 6)
    assert aggregate(VALUES, RAGGED, "constant", max_length=5).item() == pytest.approx(10 / 10)


def test_ratio_e_is_clipped_for_positive_advantage() -> None:
    # log ρ = 1 → ρ = e ≈ 2.718 > 1.2: min(e·1, 1.2·1) = 1.2 (clipped); for A = −1,
    # min(−e, −1.2) = −e (the pessimistic, unclipped term).
    logp, old = torch.ones(2, 1), torch.zeros(2, 1)
    mask = torch.ones(2, 1)
    loss_pos, stats = policy_loss(logp, old, torch.tensor([1.0, 1.0]), mask)
    assert loss_pos.item() == pytest.approx(-1.2)
    assert stats["clip_frac_high"].item() == 1.0 and stats["clip_frac_low"].item() == 0.0
    loss_neg, stats = policy_loss(logp, old, torch.tensor([-1.0, -1.0]), mask)
    assert loss_neg.item() == pytest.approx(math.e)
    assert stats["clip_frac_high"].item() == 0.0


def test_ratio_half_is_clipped_for_negative_advantage() -> None:
    # ρ = 0.5 < 0.8: A = −1 → min(−0.5, −0.8) = −0.8 (clipped); A = +1 → min(0.5, 0.8) = 0.5.
    logp, old = torch.full((1, 1), math.log(0.5)), torch.zeros(1, 1)
    loss, stats = policy_loss(logp, old, torch.tensor([-1.0]), torch.ones(1, 1))
    assert loss.item() == pytest.approx(0.8)
    assert stats["clip_frac_low"].item() == 1.0
    loss, _ = policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 1))
    assert loss.item() == pytest.approx(-0.5)


def test_asymmetric_clip_higher() -> None:
    logp, old = torch.full((1, 1), math.log(1.25)), torch.zeros(1, 1)
    loss, _ = policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 1), clip_high=0.28)
    assert loss.item() == pytest.approx(-1.25)  # inside 1 + 0.28: not clipped
    loss, _ = policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 1), clip_high=0.2)
    assert loss.item() == pytest.approx(-1.2)


def test_clipped_tokens_get_no_gradient() -> None:
    logp = torch.tensor([[1.0, 0.0]], requires_grad=True)  # ratios e (clipped) and 1 (not)
    loss, _ = policy_loss(logp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2))
    loss.backward()
    # Sequence mode: loss = −(1/1)(1/2)(1.2 + ρ₂); ∂/∂logp₂ = −ρ₂/2 = −0.5.
    assert logp.grad[0].tolist() == pytest.approx([0.0, -0.5])


def test_on_policy_gradient_is_advantage_weighted_score() -> None:
    # At ρ = 1 the loss value is −mean(A) but its gradient is −A/|y| per token (REINFORCE).
    logp = torch.zeros(2, 2, requires_grad=True)
    loss, stats = policy_loss(logp, logp.detach(), torch.tensor([1.0, -1.0]), torch.ones(2, 2))
    assert loss.item() == pytest.approx(0.0)
    loss.backward()
    assert logp.grad.flatten().tolist() == pytest.approx([-0.25, -0.25, 0.25, 0.25])
    assert stats["ratio_mean"].item() == 1.0


@pytest.mark.parametrize("aggregation", ["sequence", "token", "constant"])
def test_masked_tokens_get_no_gradient(aggregation: str) -> None:
    logp = torch.randn(2, 3, requires_grad=True)
    loss, _ = policy_loss(
        logp, logp.detach(), torch.tensor([0.7, -1.3]), RAGGED, aggregation=aggregation
    )
    loss.backward()
    assert (logp.grad[RAGGED == 0] == 0).all()
    assert (logp.grad[RAGGED == 1] != 0).all()


@pytest.mark.parametrize("aggregation", ["sequence", "token", "constant"])
def test_four_micro_batches_sum_to_the_full_batch(aggregation: str) -> None:
    generator = torch.Generator().manual_seed(0)
    logp = torch.randn(8, 5, generator=generator, requires_grad=True)
    old = logp.detach() + 0.3 * torch.randn(8, 5, generator=generator)
    advantages = torch.randn(8, generator=generator)
    lengths = torch.tensor([5, 1, 3, 2, 5, 4, 1, 2])
    mask = (torch.arange(5)[None, :] < lengths[:, None]).long()
    full, _ = policy_loss(logp, old, advantages, mask, aggregation=aggregation)
    (full_grad,) = torch.autograd.grad(full, logp)
    normalizers = {"num_sequences": 8, "num_tokens": int(mask.sum()), "max_length": 5}
    total = torch.zeros(())
    for rows in (slice(0, 2), slice(2, 4), slice(4, 6), slice(6, 8)):
        part, _ = policy_loss(
            logp[rows],
            old[rows],
            advantages[rows],
            mask[rows],
            aggregation=aggregation,
            **normalizers,
        )
        total = total + part
    (micro_grad,) = torch.autograd.grad(total, logp)
    assert total.item() == pytest.approx(full.item(), abs=1e-6)
    assert torch.allclose(micro_grad, full_grad, atol=1e-7)
