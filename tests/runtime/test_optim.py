"""AdamW: the fused kernel where torch has one, the same update as the default loop."""

from __future__ import annotations

import torch

from grpo.runtime.optim import adamw, adamw_kind


def _parameters(seed: int) -> list[torch.nn.Parameter]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=generator)) for shape in [(5, 3), (7,)]]


def test_the_kind_follows_the_setting() -> None:
    parameters = _parameters(0)
    assert adamw_kind(parameters, fused=True) == {"fused": True}  # torch ≥ 2.4 fuses on CPU
    assert adamw_kind(parameters, fused=False) == {}
    assert adamw_kind([], fused=True) == {}


def test_fused_steps_equal_the_default_loop_up_to_rounding() -> None:
    runs = []
    for fused in (True, False):
        parameters = _parameters(0)
        optimizer = adamw(parameters, lr=0.1, betas=(0.9, 0.99), weight_decay=0.01, fused=fused)
        generator = torch.Generator().manual_seed(1)
        for _ in range(3):
            for p in parameters:
                p.grad = torch.randn(p.shape, generator=generator)
            optimizer.step()
        runs.append(parameters)
    for fused, plain in zip(*runs, strict=True):
        assert torch.allclose(fused, plain, atol=1e-6)


def test_the_first_fused_step_is_lr_times_the_gradient_sign() -> None:
    # Adam's first step: m̂ = g, v̂ = g², so w ← w·(1 − lr·λ) − lr·g/(|g| + ε).
    (parameter,) = _parameters(0)[:1]
    before = parameter.detach().clone()
    parameter.grad = (torch.arange(15.0) - 7.5).reshape(5, 3)  # no zero, none ≈ ε
    adamw([parameter], lr=0.1, betas=(0.9, 0.99), weight_decay=0.5, fused=True).step()
    sign = parameter.grad.sign()
    expected = before * (1 - 0.1 * 0.5) - 0.1 * sign
    assert torch.allclose(parameter.detach(), expected, atol=1e-6)
