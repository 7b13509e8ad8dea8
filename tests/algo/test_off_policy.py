"""Hand-computed values of the off-policy objective: which log-probs the ratio is taken
against, the behaviour weights, and how the sampler correction combines with each mode."""

from __future__ import annotations

import math

import pytest
import torch

from grpo.algo.corrections import CorrectionSettings, correction_sums, sampler_correction
from grpo.algo.losses import policy_loss
from grpo.algo.off_policy import (
    behaviour_weights,
    off_policy_terms,
    rejection_mask,
    resolve_off_policy,
)

MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0]])  # the last column is padding


def _log(values: list[float]) -> torch.Tensor:
    return torch.tensor([values]).log()


def test_auto_is_decoupled_only_when_samples_can_be_stale() -> None:
    assert resolve_off_policy("auto", "sync", 0) == "none"
    assert resolve_off_policy("auto", "sync", 3) == "none"  # max_staleness is unused in sync
    assert resolve_off_policy("auto", "async", 0) == "none"  # k = 0 must train as sync
    assert resolve_off_policy("auto", "async", 1) == "decoupled"
    assert resolve_off_policy("sampler", "async", 0) == "sampler"  # explicit values stay
    with pytest.raises(ValueError, match="off_policy must be"):
        resolve_off_policy("areal", "async", 1)


def test_behaviour_weight_is_the_truncated_proximal_over_behaviour_ratio() -> None:
    # π_prox/π_behav = 2, 0.5, 5 (capped at C = 2); padding gets 0 whatever it holds.
    prox, behav = _log([2.0, 0.5, 5.0, 7.0]), torch.zeros(1, 4)
    weights = behaviour_weights(prox, behav, MASK, cap=2.0)
    assert torch.allclose(weights, torch.tensor([[2.0, 0.5, 2.0, 0.0]]))
    assert torch.allclose(behaviour_weights(prox, behav, MASK, cap=10.0)[0, 2], torch.tensor(5.0))


def test_none_is_the_synchronous_objective() -> None:
    logp, prox, behav = _log([1.1, 1.0, 1.0, 1.0]), _log([1.0] * 4), _log([0.5, 1.0, 4.0, 1.0])
    plain = off_policy_terms(logp, prox, behav, MASK, "none", CorrectionSettings())
    assert plain.anchor_logp_BT is prox and plain.weights_BT is None and plain.correction is None
    tis = CorrectionSettings("tis", is_cap=2.0)
    corrected = off_policy_terms(logp, prox, behav, MASK, "none", tis)
    expected = sampler_correction(prox, behav, MASK, tis).weights_BT  # r = 2, 1, 0.25
    assert torch.equal(corrected.weights_BT, expected)
    assert torch.allclose(expected, torch.tensor([[2.0, 1.0, 0.25, 0.0]]))


def test_sampler_clips_the_ratio_against_the_behaviour_policy() -> None:
    # ρ = π_θ/π_behav = 1.5, 0.9, 1.1 with A = 1, 1, −1 and ε = 0.2: the objective per token
    # is min(1.5, 1.2) = 1.2 (clipped), 0.9, −1.1; the token mean is 1/3.
    logp = _log([1.5, 0.9, 1.1, 1.0]).requires_grad_(True)
    prox, behav = torch.zeros(1, 4), torch.zeros(1, 4)
    terms = off_policy_terms(logp, prox, behav, MASK, "sampler", CorrectionSettings())
    assert terms.anchor_logp_BT is behav and terms.weights_BT is None
    advantages = torch.tensor([[1.0, 1.0, -1.0, 1.0]])
    loss, stats = policy_loss(logp, terms.anchor_logp_BT, advantages, MASK, aggregation="token")
    assert loss.item() == pytest.approx(-1.0 / 3.0)
    assert stats["clip_frac_high"].item() == pytest.approx(1.0 / 3.0)
    (grad,) = torch.autograd.grad(loss, logp)
    # ∂/∂logp of −(1/3) Σ A ρ on unclipped tokens: −Aρ/3; the clipped token gets nothing.
    assert torch.allclose(grad, torch.tensor([[0.0, -0.3, 1.1 / 3.0, 0.0]]))


def test_sampler_corrections_are_masks_on_the_current_ratio() -> None:
    logp, prox, behav = _log([1.5, 0.9, 1.1, 1.0]), torch.zeros(1, 4), torch.zeros(1, 4)
    keep = {
        # tis: ρ > C is dropped (prime-rl's clamp(ρ, 0, C) has the same gradient)
        CorrectionSettings("tis", is_cap=1.3): [0.0, 1.0, 1.0, 0.0],
        CorrectionSettings("mis", mask_low=0.95, mask_high=1.2): [0.0, 0.0, 1.0, 0.0],
        # Π ρ = 1.485: inside [0.5, 2] keeps the whole row, inside [0.5, 1.4] drops it.
        CorrectionSettings("seq_mis", mask_low=0.5, mask_high=2.0): [1.0, 1.0, 1.0, 0.0],
        CorrectionSettings("seq_mis", mask_low=0.5, mask_high=1.4): [0.0, 0.0, 0.0, 0.0],
        # geometric mean 1.485^(1/3) = 1.141
        CorrectionSettings("geo_mask", geo_low=0.9, geo_high=1.1): [0.0, 0.0, 0.0, 0.0],
        CorrectionSettings("geo_mask", geo_low=0.9, geo_high=1.2): [1.0, 1.0, 1.0, 0.0],
    }
    for settings, expected in keep.items():
        terms = off_policy_terms(logp, prox, behav, MASK, "sampler", settings)
        assert terms.weights_BT.tolist() == [expected], settings
    # The mask follows π_θ, not π_prox: with π_θ = π_behav nothing is dropped, though
    # π_prox/π_behav = 1.5 on the first token.
    tis = CorrectionSettings("tis", is_cap=1.3)
    same = off_policy_terms(behav, logp, behav, MASK, "sampler", tis)
    assert same.weights_BT.tolist() == [[1.0, 1.0, 1.0, 0.0]]


def test_decoupled_clips_against_prox_and_weights_by_the_behaviour_ratio() -> None:
    # At the update's first pass π_θ = π_prox: ρ = 1, the objective per token is w·A, and
    # w = min(π_prox/π_behav, 2) = 2, 0.5, 2 (5 capped).
    prox, behav = _log([2.0, 0.5, 5.0, 1.0]), torch.zeros(1, 4)
    logp = prox.clone().requires_grad_(True)
    terms = off_policy_terms(logp, prox, behav, MASK, "decoupled", CorrectionSettings())
    assert terms.anchor_logp_BT is prox and terms.correction is None
    assert torch.allclose(terms.weights_BT, torch.tensor([[2.0, 0.5, 2.0, 0.0]]))
    loss, _ = policy_loss(logp, prox, torch.ones(1), MASK, weights_BT=terms.weights_BT)
    assert loss.item() == pytest.approx(-(2.0 + 0.5 + 2.0) / 3.0)
    (grad,) = torch.autograd.grad(loss, logp)
    assert torch.allclose(grad, -torch.tensor([[2.0, 0.5, 2.0, 0.0]]) / 3.0)


def test_decoupled_keeps_only_the_rejection_of_the_sampler_correction() -> None:
    prox, behav = _log([2.0, 0.5, 5.0, 1.0]), torch.zeros(1, 4)  # r = 2, 0.5, 5
    expected = {
        # tis drops r > C instead of truncating it (AReaL-lite's behav_imp_weight_cap mask):
        # r · 1[r ≤ 2]; never min(r, C)² (the weight is applied once).
        CorrectionSettings("tis", is_cap=2.0): [2.0, 0.5, 0.0, 0.0],
        CorrectionSettings("mis", mask_low=0.6, mask_high=2.0): [2.0, 0.0, 0.0, 0.0],
        CorrectionSettings("seq_mis", mask_low=0.5, mask_high=6.0): [2.0, 0.5, 2.0, 0.0],  # R = 5
        CorrectionSettings("seq_mis", mask_low=0.5, mask_high=4.0): [0.0, 0.0, 0.0, 0.0],
    }
    for settings, weights in expected.items():
        terms = off_policy_terms(prox, prox, behav, MASK, "decoupled", settings)
        assert torch.allclose(terms.weights_BT, torch.tensor([weights])), settings
        assert terms.correction is not None
        assert torch.equal(terms.correction.weights_BT, terms.weights_BT)  # what is logged


def test_the_metrics_count_what_the_combined_weight_dropped() -> None:
    prox, behav = _log([2.0, 0.5, 5.0, 1.0]), torch.zeros(1, 4)
    settings = CorrectionSettings("tis", is_cap=2.0)
    terms = off_policy_terms(prox, prox, behav, MASK, "decoupled", settings)
    sums = correction_sums(terms.correction, prox, behav, MASK, settings)
    assert sums["sampler/masked_frac"] == 1.0 and sums["sampler/capped_frac"] == 1.0
    assert sums["sampler/is_weight_mean"] == pytest.approx(2.5)  # Σ of 2, 0.5, 0
    assert sums["sampler/is_ratio_max"] == pytest.approx(5.0)
    k3 = sum(r - 1 - math.log(r) for r in (2.0, 0.5, 5.0))
    assert sums["sampler/kl_k3"] == pytest.approx(k3, rel=1e-5)


def test_rejection_mask_of_each_correction() -> None:
    log_ratio, behav, mask = torch.tensor([[0.4, 1.0, 2.5]]).log(), torch.zeros(1, 3), MASK[:, :3]
    none = sampler_correction(log_ratio, behav, mask, CorrectionSettings())
    assert rejection_mask(none, CorrectionSettings()).tolist() == [[1.0, 1.0, 1.0]]
    tis = CorrectionSettings("tis", is_cap=2.0)
    capped = sampler_correction(log_ratio, behav, mask, tis)
    assert rejection_mask(capped, tis).tolist() == [[1.0, 1.0, 0.0]]


def test_an_unknown_mode_is_refused() -> None:
    zeros = torch.zeros(1, 4)
    with pytest.raises(ValueError, match="off_policy must be one of"):
        off_policy_terms(zeros, zeros, zeros, MASK, "areal", CorrectionSettings())  # type: ignore[arg-type]
