import pytest
import torch

from grpo import group_advantages, zero_variance_groups


def test_seeds_worked_example_four_of_eight_correct() -> None:
    # Seeds: mean 0.5, population σ 0.5 → each success (1 − 0.5)/0.5 = +1.0, each failure −1.0.
    rewards = torch.tensor([[1.0, 1, 1, 1, 0, 0, 0, 0]])
    advantages = group_advantages(rewards, eps=1e-4)
    expected = 0.5 / (0.5 + 1e-4)
    assert torch.allclose(advantages, torch.tensor([[expected] * 4 + [-expected] * 4]))
    assert torch.allclose(advantages.abs(), torch.ones(1, 8), atol=1e-3)


@pytest.mark.parametrize("value", [0.0, 1.0, 0.3])
def test_all_equal_group_is_exactly_zero_and_flagged(value: float) -> None:
    rewards = torch.full((1, 8), value)
    for scale in ("group", "batch", "none"):
        assert torch.equal(group_advantages(rewards, scale=scale), torch.zeros(1, 8))
    assert zero_variance_groups(rewards).tolist() == [True]


def test_population_standard_deviation() -> None:
    # r = 1,2,3,4: mean 2.5, population σ = sqrt(1.25) = 1.1180 (Bessel's would be 1.2910).
    advantages = group_advantages(torch.tensor([[1.0, 2.0, 3.0, 4.0]]), eps=0.0)
    sigma = 1.25**0.5
    assert torch.allclose(advantages, torch.tensor([[-1.5, -0.5, 0.5, 1.5]]) / sigma)


def test_none_is_centering_only() -> None:
    rewards = torch.tensor([[2.0, 0.0, 1.0], [5.0, 5.0, 8.0]])
    assert torch.allclose(
        group_advantages(rewards, scale="none"), rewards - rewards.mean(dim=1, keepdim=True)
    )


def test_batch_scale_uses_group_mean_and_batch_sigma() -> None:
    rewards = torch.tensor([[0.0, 2.0], [4.0, 4.0]])
    # Group means 1 and 4; population σ of {0,2,4,4}: mean 2.5, variance 11/4 = 2.75.
    expected = torch.tensor([[-1.0, 1.0], [0.0, 0.0]]) / (2.75**0.5 + 1e-4)
    assert torch.allclose(group_advantages(rewards, scale="batch"), expected)


def test_zero_variance_groups_per_group() -> None:
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    assert zero_variance_groups(rewards).tolist() == [True, False, True]


def test_loop_and_vectorised_agree_over_seeds() -> None:
    for seed in range(5):
        rewards = torch.rand(6, 5, generator=torch.Generator().manual_seed(seed))
        looped = []
        for group in rewards.tolist():
            mean = sum(group) / len(group)
            sigma = (sum((r - mean) ** 2 for r in group) / len(group)) ** 0.5
            looped.append([(r - mean) / (sigma + 1e-4) for r in group])
        assert torch.allclose(group_advantages(rewards), torch.tensor(looped), atol=1e-5)


def test_bad_shape_and_scale_are_errors() -> None:
    with pytest.raises(ValueError, match="num_groups"):
        group_advantages(torch.zeros(8))
    with pytest.raises(ValueError, match="scale"):
        group_advantages(torch.zeros(1, 2), scale="bogus")  # type: ignore[arg-type]


def test_leave_one_out_by_hand() -> None:
    from grpo import leave_one_out_advantages

    # G = 4, r = (1, 0, 0, 1): for r_0 the others' mean is 1/3 → 2/3; for r_1 it is 2/3 → −2/3.
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [3.0, 1.0, 2.0, 6.0]])
    # Row 2: others' means (1+2+6)/3 = 3, (3+2+6)/3 = 11/3, (3+1+6)/3 = 10/3, (3+1+2)/3 = 2.
    expected = torch.tensor([[2 / 3, -2 / 3, -2 / 3, 2 / 3], [0.0, -8 / 3, -4 / 3, 4.0]])
    assert torch.allclose(leave_one_out_advantages(rewards), expected)
    # The same as G/(G−1) times the centred reward, and what scale="rloo" returns.
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    assert torch.allclose(group_advantages(rewards, scale="rloo"), centred * 4 / 3)
    assert torch.equal(leave_one_out_advantages(torch.full((2, 3), 0.7)), torch.zeros(2, 3))


def test_leave_one_out_needs_two_completions() -> None:
    from grpo import leave_one_out_advantages

    with pytest.raises(ValueError, match="G ≥ 2"):
        leave_one_out_advantages(torch.tensor([[1.0], [0.0]]))


def test_variants_on_the_same_rewards() -> None:
    # Two groups of G = 2: (0, 1) and (0, 3); group means 0.5 and 1.5.
    rewards = torch.tensor([[0.0, 1.0], [0.0, 3.0]])
    assert torch.allclose(
        group_advantages(rewards, scale="none"), torch.tensor([[-0.5, 0.5], [-1.5, 1.5]])
    )
    # Group σ: 0.5 and 1.5 → ±1 in both groups.
    assert torch.allclose(
        group_advantages(rewards, scale="group", eps=0.0), torch.tensor([[-1.0, 1.0]] * 2)
    )
    # Batch σ of {0, 1, 0, 3}: mean 1, variance (1 + 0 + 1 + 4)/4 = 1.5.
    assert torch.allclose(
        group_advantages(rewards, scale="batch", eps=0.0),
        torch.tensor([[-0.5, 0.5], [-1.5, 1.5]]) / 1.5**0.5,
    )
    # Leave-one-out with G = 2: r_i − r_j.
    assert torch.allclose(
        group_advantages(rewards, scale="rloo"), torch.tensor([[-1.0, 1.0], [-3.0, 3.0]])
    )
