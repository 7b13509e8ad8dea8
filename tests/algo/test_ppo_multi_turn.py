"""PPO's critic pieces on a multi-turn mask, by hand: the tokens tools and the environment
inserted (mask 0 between model tokens) get no reward, advantage, return or value loss,
and GAE steps over them as if the model's tokens were contiguous."""

from __future__ import annotations

import torch

from grpo.algo.ppo import gae, terminal_rewards, value_loss, whiten

# model, model, inserted, inserted, model, padding
MASK_BT = torch.tensor([[1, 1, 0, 0, 1, 0]])
# V at the inserted positions and the padding must not leak into anything.
VALUES_BT = torch.tensor([[0.2, 0.4, 9.0, -9.0, 0.6, 7.0]])


def test_the_reward_sits_on_the_last_model_token_not_on_an_inserted_one() -> None:
    # 3 model tokens: the old rule (position Σ mask − 1 = 2) would put it on an inserted one.
    rewards_BT = terminal_rewards(torch.tensor([1.0]), MASK_BT)
    assert rewards_BT.tolist() == [[0.0, 0.0, 0.0, 0.0, 1.0, 0.0]]


def test_gae_steps_over_inserted_tokens() -> None:
    # γ = 0.9, λ = 0.8 over the model tokens t = 0, 1, 4 (V = 0.2, 0.4, 0.6), reward 1 on t = 4:
    #   t=4: δ = 1 − 0.6 = 0.4                        A = 0.4       R = 1.0
    #   t=1: δ = 0.9·0.6 − 0.4 = 0.14 (V at t=4)      A = 0.14 + 0.72·0.4 = 0.428     R = 0.828
    #   t=0: δ = 0.9·0.4 − 0.2 = 0.16                 A = 0.16 + 0.72·0.428 = 0.46816 R = 0.66816
    # Positions 2, 3 (inserted) and 5 (padding): A = R = 0.
    advantages_BT, returns_BT = gae(
        terminal_rewards(torch.tensor([1.0]), MASK_BT), VALUES_BT, MASK_BT, gamma=0.9, lam=0.8
    )
    torch.testing.assert_close(advantages_BT, torch.tensor([[0.46816, 0.428, 0.0, 0.0, 0.4, 0.0]]))
    torch.testing.assert_close(returns_BT, torch.tensor([[0.66816, 0.828, 0.0, 0.0, 1.0, 0.0]]))
    # The same numbers as the three model tokens side by side, with no insertion.
    compact_BT = torch.ones(1, 3)
    compact, _ = gae(
        terminal_rewards(torch.tensor([1.0]), compact_BT),
        torch.tensor([[0.2, 0.4, 0.6]]),
        compact_BT,
        gamma=0.9,
        lam=0.8,
    )
    torch.testing.assert_close(advantages_BT[MASK_BT.bool()], compact[0])


def test_the_value_loss_and_whitening_skip_inserted_tokens() -> None:
    _, returns_BT = gae(
        terminal_rewards(torch.tensor([1.0]), MASK_BT), VALUES_BT, MASK_BT, gamma=0.9, lam=0.8
    )
    # V = V_old, so the clip does not bind: ½ · Σ_model (V − R)² / 3 over the model tokens,
    # (0.2 − 0.66816)² + (0.4 − 0.828)² + (0.6 − 1.0)² = 0.2191737856 + 0.183184 + 0.16
    # = 0.5623577856 → 0.0937262976; the inserted V = ±9 (against R = 0) would add 81 each.
    loss, stats = value_loss(VALUES_BT, VALUES_BT, returns_BT, MASK_BT, clip=0.2)
    torch.testing.assert_close(loss, torch.tensor(0.0937262976))
    torch.testing.assert_close(stats["value_mean"], torch.tensor(0.4))  # (0.2 + 0.4 + 0.6)/3
    # Whitening over the model tokens 1, 2, 4: mean 7/3, population σ = sqrt(14/9).
    whitened = whiten(torch.tensor([[1.0, 2.0, 50.0, 50.0, 4.0, 0.0]]), MASK_BT)
    sigma = (14 / 9) ** 0.5
    expected = [(1 - 7 / 3) / sigma, (2 - 7 / 3) / sigma, 0.0, 0.0, (4 - 7 / 3) / sigma, 0.0]
    torch.testing.assert_close(whitened, torch.tensor([expected]))
