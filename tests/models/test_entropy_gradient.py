"""The entropy bonus's gradient: the chunked LM head (no full-vocabulary tensor kept) gives
the same gradient as autograd through the full logits, at several chunk sizes."""

from __future__ import annotations

import pytest
import torch

from grpo.models.logprobs import chunked_token_logprobs, completion_logprobs, entropy_from_logits


@pytest.mark.parametrize("chunk_rows", [3, 64])  # several chunks (recomputed), one (kept)
def test_chunked_entropy_gradient_matches_full_logits(chunk_rows: int) -> None:
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(10, 8, generator=generator, requires_grad=True)
    weight = torch.randn(17, 8, generator=generator, requires_grad=True)
    tokens = torch.randint(0, 17, (10,), generator=generator)
    coefficients = torch.randn(10, generator=generator)  # d loss / d H per row
    temperature = 0.7

    logits = hidden @ weight.T / temperature
    logp_full = torch.log_softmax(logits, dim=-1).gather(1, tokens[:, None]).squeeze(1)
    loss_full = (logp_full * 0.3).sum() + (entropy_from_logits(logits) * coefficients).sum()
    grads_full = torch.autograd.grad(loss_full, (hidden, weight))

    logp, entropy = chunked_token_logprobs(
        hidden,
        weight,
        tokens,
        temperature=temperature,
        chunk_rows=chunk_rows,
        with_entropy=True,
        entropy_grad=True,
    )
    assert entropy is not None and entropy.requires_grad
    loss = (logp * 0.3).sum() + (entropy * coefficients).sum()
    grads = torch.autograd.grad(loss, (hidden, weight))
    for chunked, full in zip(grads, grads_full, strict=True):
        assert torch.allclose(chunked, full, atol=1e-5)


def test_entropy_has_no_gradient_unless_asked(tiny_model_dir) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    prompt, completion = torch.tensor([[5, 6, 7]]), torch.tensor([[8, 9]])
    ones_p, ones_c = torch.ones_like(prompt), torch.ones_like(completion)
    for chunked in (True, False):
        _, plain = completion_logprobs(
            model, prompt, ones_p, completion, ones_c, with_entropy=True, chunked=chunked
        )
        _, bonus = completion_logprobs(
            model,
            prompt,
            ones_p,
            completion,
            ones_c,
            with_entropy=True,
            chunked=chunked,
            entropy_grad=True,
        )
        assert plain is not None and bonus is not None
        assert not plain.requires_grad and bonus.requires_grad
        assert torch.allclose(plain, bonus.detach())
        bonus.sum().backward()
        assert model.lm_head.weight.grad is not None
        model.zero_grad(set_to_none=True)
