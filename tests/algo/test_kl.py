import math

import pytest
import torch

from grpo import kl_penalty


def test_hand_values() -> None:
    # d = ref − logp = ln 2: k1 = −ln 2, k2 = (ln 2)²/2, k3 = e^{ln 2} − ln 2 − 1 = 1 − ln 2.
    logp, ref = torch.zeros(1, 1), torch.full((1, 1), math.log(2.0))
    assert kl_penalty(logp, ref, "k1").item() == pytest.approx(-math.log(2.0))
    assert kl_penalty(logp, ref, "k2").item() == pytest.approx(math.log(2.0) ** 2 / 2)
    assert kl_penalty(logp, ref, "k3").item() == pytest.approx(1 - math.log(2.0))


def test_k3_nonnegative_and_zero_when_equal() -> None:
    generator = torch.Generator().manual_seed(0)
    logp, ref = (
        -3 * torch.rand(4, 7, generator=generator),
        -3 * torch.rand(4, 7, generator=generator),
    )
    assert (kl_penalty(logp, ref, "k3") >= 0).all()
    assert (kl_penalty(logp, ref, "k2") >= 0).all()
    assert torch.equal(kl_penalty(logp, logp, "k3"), torch.zeros(4, 7))


def test_unknown_kind() -> None:
    with pytest.raises(ValueError, match="kind"):
        kl_penalty(torch.zeros(1, 1), torch.zeros(1, 1), "k9")  # type: ignore[arg-type]
