"""PPO's pure pieces on hand-computed numbers: terminal rewards, GAE, whitening, value loss."""

from __future__ import annotations

import pytest
import torch

from grpo.algo.ppo import gae, terminal_rewards, value_loss, whiten


def test_terminal_rewards_sit_on_the_last_kept_token() -> None:
    mask_BT = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    rewards_BT = terminal_rewards(torch.tensor([2.0, 5.0, 7.0]), mask_BT)
    assert rewards_BT.tolist() == [[0, 2, 0], [0, 0, 5], [0, 0, 0]]  # an empty row gets none


def test_gae_matches_the_recursion_by_hand() -> None:
    # Row 0: γ = 0.9, λ = 0.8, reward 1 on the last of 3 tokens, V = 0.2, 0.4, 0.6.
    #   t=2: δ = 1 − 0.6 = 0.4                      A = 0.4
    #   t=1: δ = 0.9·0.6 − 0.4 = 0.14               A = 0.14 + 0.72·0.4 = 0.428
    #   t=0: δ = 0.9·0.4 − 0.2 = 0.16               A = 0.16 + 0.72·0.428 = 0.46816
    # Row 1: 2 kept tokens, reward 2, V = 0.5, 1.0 (the padded 9.0 must not leak in).
    #   t=1: δ = 2 − 1.0 = 1.0 (episode ends)        A = 1.0
    #   t=0: δ = 0.9·1.0 − 0.5 = 0.4                 A = 0.4 + 0.72·1.0 = 1.12
    mask_BT = torch.tensor([[1, 1, 1], [1, 1, 0]])
    rewards_BT = terminal_rewards(torch.tensor([1.0, 2.0]), mask_BT)
    values_BT = torch.tensor([[0.2, 0.4, 0.6], [0.5, 1.0, 9.0]])
    advantages_BT, returns_BT = gae(rewards_BT, values_BT, mask_BT, gamma=0.9, lam=0.8)
    expected = torch.tensor([[0.46816, 0.428, 0.4], [1.12, 1.0, 0.0]])
    torch.testing.assert_close(advantages_BT, expected)
    torch.testing.assert_close(returns_BT, torch.tensor([[0.66816, 0.828, 1.0], [1.62, 2.0, 0.0]]))


def test_gae_limits_monte_carlo_and_td() -> None:
    mask_BT = torch.tensor([[1, 1, 1, 0]])
    values_BT = torch.tensor([[0.3, -0.2, 0.7, 5.0]])
    rewards_BT = terminal_rewards(torch.tensor([1.5]), mask_BT)
    monte_carlo, returns = gae(rewards_BT, values_BT, mask_BT, gamma=1.0, lam=1.0)
    torch.testing.assert_close(monte_carlo, torch.tensor([[1.2, 1.7, 0.8, 0.0]]))  # 1.5 − V_t
    torch.testing.assert_close(returns, torch.tensor([[1.5, 1.5, 1.5, 0.0]]))
    one_step, _ = gae(rewards_BT, values_BT, mask_BT, gamma=1.0, lam=0.0)
    torch.testing.assert_close(one_step, torch.tensor([[-0.5, 0.9, 0.8, 0.0]]))  # V_{t+1} − V_t


def test_whiten_uses_kept_tokens_and_population_std() -> None:
    whitened = whiten(
        torch.tensor([[1.0, 3.0, 100.0], [5.0, 0.0, 0.0]]), torch.tensor([[1, 1, 0], [1, 0, 0]])
    )
    # kept 1, 3, 5: mean 3, population σ = sqrt(8/3)
    sigma = (8 / 3) ** 0.5
    torch.testing.assert_close(
        whitened, torch.tensor([[-2 / sigma, 0.0, 0.0], [2 / sigma, 0.0, 0.0]])
    )


def test_value_loss_takes_the_larger_of_clipped_and_plain() -> None:
    ones = torch.ones(1, 1)
    # V_old = 0, V = 1, R = 2, c = 0.2: plain (1−2)² = 1, clipped (0.2−2)² = 3.24 → ½·3.24
    values = torch.ones(1, 1, requires_grad=True)
    loss, stats = value_loss(values, torch.zeros(1, 1), 2 * ones, ones, clip=0.2)
    assert loss.item() == pytest.approx(1.62)
    assert stats["value_clip_frac"].item() == 1.0
    loss.backward()
    assert values.grad.item() == 0.0  # the clipped term is flat in V: no push further
    # V_old = 0, V = 1, R = 0.5: plain 0.25 > clipped (0.2−0.5)² = 0.09 → ½·0.25
    loss, stats = value_loss(ones, torch.zeros(1, 1), 0.5 * ones, ones, clip=0.2)
    assert loss.item() == pytest.approx(0.125)
    assert stats["value_clip_frac"].item() == 0.0
    # clip = 0: plain ½ MSE over kept tokens
    loss, _ = value_loss(
        torch.tensor([[1.0, 2.0, 7.0]]),
        torch.zeros(1, 3),
        torch.zeros(1, 3),
        torch.tensor([[1, 1, 0]]),
        clip=0.0,
    )
    assert loss.item() == pytest.approx(0.5 * (1 + 4) / 2)


def test_value_loss_micro_batches_add_up_with_the_batch_token_count() -> None:
    generator = torch.Generator().manual_seed(0)
    values, old, returns = (torch.randn(4, 5, generator=generator) for _ in range(3))
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]])
    whole, _ = value_loss(values, old, returns, mask, clip=0.3)
    tokens = int(mask.sum())
    parts = sum(
        value_loss(values[s], old[s], returns[s], mask[s], clip=0.3, num_tokens=tokens)[0]
        for s in (slice(0, 1), slice(1, 3), slice(3, 4))
    )
    torch.testing.assert_close(parts, whole)


def test_policy_loss_and_micro_batches_take_per_token_advantages() -> None:
    from grpo.algo.losses import policy_loss
    from grpo.training.update.policy import TrainBatch

    zeros, mask = torch.zeros(1, 3), torch.tensor([[1, 1, 0]])
    loss, _ = policy_loss(zeros, zeros, torch.tensor([[1.0, 3.0, 50.0]]), mask, aggregation="token")
    assert loss.item() == pytest.approx(-(1.0 + 3.0) / 2)  # ρ = 1: −mean of the kept A_it
    batch = TrainBatch(
        prompt_ids_BP=torch.ones(2, 2, dtype=torch.long),
        prompt_mask_BP=torch.ones(2, 2, dtype=torch.long),
        completion_ids_BT=torch.ones(2, 4, dtype=torch.long),
        completion_mask_BT=torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]]),
        advantages_BT=torch.arange(8.0).view(2, 4),
        sampler_logp_BT=torch.zeros(2, 4),
    )
    micro = batch.micro_batch(slice(0, 1))  # completion columns trimmed to the row's 2 tokens
    assert micro.advantages_BT.tolist() == [[0.0, 1.0]]
