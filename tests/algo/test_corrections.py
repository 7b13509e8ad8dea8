"""Hand-computed values of the sampler corrections, GSPO's sequence ratio and DAPO's
overlong penalty."""

from __future__ import annotations

import math

import pytest
import torch

from grpo.algo.corrections import (
    CorrectionSettings,
    correction_sums,
    geometric_mean_ratio,
    geometric_sequence_mask,
    masked_is_weights,
    sampler_correction,
    sampler_kl_k3,
    sequence_log_ratio,
    token_ratio,
    truncated_is_weights,
)
from grpo.algo.losses import policy_loss, sequence_ratio
from grpo.algo.overlong import overlong_penalty


def _logps_for(ratios: list[list[float]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(old_logp, sampler_logp) whose token ratios π_old/π_s are ``ratios``."""
    old = torch.tensor(ratios).log()
    return old, torch.zeros_like(old)


def test_tis_weights_on_chosen_ratios() -> None:
    old, sampler = _logps_for([[0.25, 1.0, 1.9, 2.0, 2.1, 50.0]])
    ratio = token_ratio(old, sampler, torch.ones_like(old))
    assert torch.allclose(ratio, torch.tensor([[0.25, 1.0, 1.9, 2.0, 2.1, 50.0]]))
    weights = truncated_is_weights(ratio, cap=2.0)
    assert torch.allclose(weights, torch.tensor([[0.25, 1.0, 1.9, 2.0, 2.0, 2.0]]))
    # Through the dispatcher: the same, and 0 on padding whatever its log-probs hold.
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    correction = sampler_correction(old, sampler, mask, CorrectionSettings("tis", is_cap=2.0))
    assert torch.allclose(correction.weights_BT, torch.tensor([[0.25, 1.0, 1.9, 2.0, 2.0, 0.0]]))
    assert float(correction.weights_BT.max()) <= 2.0


def test_mis_masks_at_the_boundaries() -> None:
    # Exactly at lo and hi the token stays (with its ratio as weight); just outside it goes.
    ratios = torch.tensor([0.4999, 0.5, 1.0, 2.0, 2.0001])
    assert torch.equal(masked_is_weights(ratios, 0.5, 2.0), torch.tensor([0.0, 0.5, 1.0, 2.0, 0.0]))
    old, sampler = _logps_for([[0.4, 0.5, 2.0, 3.0]])
    settings = CorrectionSettings("mis", mask_low=0.5, mask_high=2.0)
    weights = sampler_correction(old, sampler, torch.ones_like(old), settings).weights_BT
    assert torch.allclose(weights, torch.tensor([[0.0, 0.5, 2.0, 0.0]]))


def test_sequence_mis_uses_the_product_ratio() -> None:
    # Row 0: ratios 1.5 · 1.2 = 1.8 (inside [0.5, 2]); row 1: 1.5 · 1.5 = 2.25 (outside);
    # row 2: 0.8 then padding (a padded token's log-prob never counts): 0.8, inside.
    old = torch.tensor([[1.5, 1.2], [1.5, 1.5], [0.8, 100.0]]).log()
    mask = torch.tensor([[1, 1], [1, 1], [1, 0]])
    assert torch.allclose(
        sequence_log_ratio(old, torch.zeros_like(old), mask).exp(), torch.tensor([1.8, 2.25, 0.8])
    )
    correction = sampler_correction(
        old, torch.zeros_like(old), mask, CorrectionSettings("seq_mis", mask_low=0.5, mask_high=2.0)
    )
    expected = torch.tensor([[1.8, 1.8], [0.0, 0.0], [0.8, 0.0]])
    assert torch.allclose(correction.weights_BT, expected)


def test_geometric_mask_keeps_the_band_and_ignores_padding() -> None:
    # Geometric means: exp((0.01 + 0.01)/2) ≈ 1.01005 (just outside 1.01), exp((0.01 − 0.01)/2)
    # = 1, and exp(0.005) with a wild padded token that must not count.
    old = torch.tensor([[0.01, 0.01], [0.01, -0.01], [0.005, 9.0]])
    mask = torch.tensor([[1, 1], [1, 1], [1, 0]])
    geo = geometric_mean_ratio(old, torch.zeros_like(old), mask)
    assert torch.allclose(geo, torch.tensor([math.exp(0.01), 1.0, math.exp(0.005)]))
    assert torch.equal(geometric_sequence_mask(geo, 0.99, 1.01), torch.tensor([0.0, 1.0, 1.0]))
    weights = sampler_correction(
        old, torch.zeros_like(old), mask, CorrectionSettings("geo_mask")
    ).weights_BT
    assert torch.equal(weights, torch.tensor([[0.0, 0.0], [1.0, 1.0], [1.0, 0.0]]))


def test_k3_and_the_metric_sums() -> None:
    # Ratios 1, e and 3 (capped at 2): k3 = 0, e − 2, 2 − log 3.
    old, sampler = _logps_for([[1.0, math.e, 3.0]])
    assert torch.allclose(
        sampler_kl_k3(torch.tensor([1.0, math.e, 3.0])),
        torch.tensor([0.0, math.e - 2.0, 2.0 - math.log(3.0)]),
    )
    settings = CorrectionSettings("tis", is_cap=2.0)
    mask = torch.ones_like(old)
    correction = sampler_correction(old, sampler, mask, settings)
    sums = correction_sums(correction, old, sampler, mask, settings)
    assert sums["sampler/kl_k3"] == pytest.approx(math.e - 2.0 + 2.0 - math.log(3.0))
    assert sums["sampler/is_ratio_mean"] == pytest.approx(1.0 + math.e + 3.0)  # a sum
    assert sums["sampler/is_ratio_max"] == pytest.approx(3.0)
    assert sums["sampler/is_weight_max"] == pytest.approx(2.0)
    assert sums["sampler/is_weight_mean"] == pytest.approx(1.0 + 2.0 + 2.0)
    assert sums["sampler/capped_frac"] == 2.0 and sums["sampler/masked_frac"] == 0.0


def test_gspo_ratio_and_gradient_on_two_sequences() -> None:
    # Sequence 0: log-ratios 0.1 and 0.3 → s_0 = exp(0.2) ≈ 1.2214, A_0 = +1.
    # Sequence 1: log-ratio −0.2 (one token, the second is padding) → s_1 = exp(−0.2), A_1 = −1.
    old = torch.zeros(2, 2)
    logp = torch.tensor([[0.1, 0.3], [-0.2, 5.0]], requires_grad=True)
    mask = torch.tensor([[1, 1], [1, 0]])
    s = sequence_ratio(logp, old, mask)
    assert torch.allclose(s, torch.tensor([math.exp(0.2), math.exp(-0.2)]))
    # Wide clip (nothing clips): loss = −(1/2)(s_0·1 + s_1·(−1)),
    # ∂loss/∂logp_it = −A_i s_i / (2|y_i|).
    loss, _ = policy_loss(
        logp, old, torch.tensor([1.0, -1.0]), mask, clip_low=0.5, clip_high=0.5,
        ratio_level="sequence",
    )  # fmt: skip
    assert loss.item() == pytest.approx(-(math.exp(0.2) - math.exp(-0.2)) / 2)
    (grad,) = torch.autograd.grad(loss, logp)
    g0, g1 = -math.exp(0.2) / 4, math.exp(-0.2) / 2
    assert torch.allclose(grad, torch.tensor([[g0, g0], [g1, 0.0]]))
    # GSPO's own clip (3e-4 / 4e-4): s_0 = 1.22 > 1 + 4e-4 with A > 0 and s_1 = 0.82 < 1 − 3e-4
    # with A < 0 are both clipped: the loss is constant, −(1/2)((1 + 4e-4) − (1 − 3e-4)).
    loss, stats = policy_loss(
        logp, old, torch.tensor([1.0, -1.0]), mask, clip_low=3e-4, clip_high=4e-4,
        ratio_level="sequence",
    )  # fmt: skip
    assert loss.item() == pytest.approx(-(1 + 4e-4 - (1 - 3e-4)) / 2, abs=1e-7)  # float32
    assert torch.equal(torch.autograd.grad(loss, logp)[0], torch.zeros(2, 2))
    assert stats["clip_frac_high"].item() == pytest.approx(2 / 3)  # 2 of 3 kept tokens
    assert stats["clip_frac_low"].item() == pytest.approx(1 / 3)


def test_weights_multiply_the_token_objective() -> None:
    # ρ = 1 everywhere, A = 1: the objective per token is its weight; sequence mean of
    # ((2 + 0)/2 + 0.5/1)/2 = 0.75.
    zeros, mask = torch.zeros(2, 2), torch.tensor([[1, 1], [1, 0]])
    weights = torch.tensor([[2.0, 0.0], [0.5, 7.0]])
    loss, _ = policy_loss(zeros, zeros, torch.ones(2), mask, weights_BT=weights)
    assert loss.item() == pytest.approx(-0.75)


def test_overlong_penalty_at_the_buffer_edges() -> None:
    # Cap 8, buffer 4: free up to 4 tokens; 5 → −1/4·p, 6 → −2/4·p, 8 (the cap) → −p.
    lengths = torch.tensor([1, 4, 5, 6, 7, 8])
    penalty = overlong_penalty(lengths, max_length=8, buffer=4, penalty=0.5)
    assert torch.equal(penalty, torch.tensor([0.0, 0.0, -0.125, -0.25, -0.375, -0.5]))
    assert torch.equal(overlong_penalty(lengths, 8, 0), torch.zeros(6))  # off
    assert torch.equal(overlong_penalty(torch.tensor([7, 8]), 8, 8), torch.tensor([-0.875, -1.0]))
