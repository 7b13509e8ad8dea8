"""Chunked completion log-probs: the unchunked values and gradients, without (N, V) logits."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from grpo.models.logprobs import chunked_token_logprobs, completion_logprobs, token_logprobs


def test_a_hand_computed_case() -> None:
    # logits = h Wᵀ: row 0 → [1, 0, 1], row 1 → [0, 2, 2].
    hidden = torch.tensor([[1.0, 0.0], [0.0, 2.0]], requires_grad=True)
    weight = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    logp, entropy = chunked_token_logprobs(
        hidden, weight, torch.tensor([0, 2]), chunk_rows=1, with_entropy=True
    )
    e = math.e
    assert logp.tolist() == pytest.approx([1 - math.log(2 * e + 1), 2 - math.log(1 + 2 * e**2)])
    p0 = torch.tensor([e, 1, e]) / (2 * e + 1)  # softmax of row 0
    assert entropy[0].item() == pytest.approx(float(-(p0 * p0.log()).sum()), abs=1e-6)
    # ∂ logp₀ / ∂h₀ = W[y] − Σ_v p_v W[v] = [1/(2e+1), −(1+e)/(2e+1)].
    logp[0].backward()
    expected = [1 / (2 * e + 1), -(1 + e) / (2 * e + 1)]
    assert hidden.grad[0].tolist() == pytest.approx(expected, abs=1e-6)
    assert hidden.grad[1].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("chunk_rows", [1, 3, 64])
def test_values_and_gradients_equal_the_full_logits(chunk_rows: int) -> None:
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(10, 8, generator=generator, requires_grad=True)
    weight = torch.randn(50, 8, generator=generator, requires_grad=True)
    tokens = torch.randint(0, 50, (10,), generator=generator)
    upstream = torch.randn(10, generator=generator)  # a loss's gradient w.r.t. each log-prob

    logp, entropy = chunked_token_logprobs(
        hidden, weight, tokens, temperature=0.7, chunk_rows=chunk_rows, with_entropy=True
    )
    (logp * upstream).sum().backward()
    chunked_grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad, weight.grad = None, None

    logits = hidden @ weight.T / 0.7
    expected = token_logprobs(logits, tokens)
    (expected * upstream).sum().backward()
    assert torch.allclose(logp, expected, atol=1e-5)
    probs = logits.softmax(-1)
    assert torch.allclose(entropy, -(probs * probs.log()).sum(-1), atol=1e-5)
    assert torch.allclose(chunked_grads[0], hidden.grad, atol=1e-5)
    assert torch.allclose(chunked_grads[1], weight.grad, atol=1e-5)


@pytest.mark.parametrize("chunk_rows", [16, 64])
def test_at_most_one_chunk_of_probabilities_is_kept_for_backward(chunk_rows: int) -> None:
    rows, vocab, width = 64, 1000, 8
    hidden = torch.randn(rows, width, requires_grad=True)
    weight = torch.randn(vocab, width, requires_grad=True)
    saved_sizes: list[int] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        saved_sizes.append(tensor.numel())
        return tensor

    tokens = torch.zeros(rows, dtype=torch.long)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        logp, _ = chunked_token_logprobs(hidden, weight, tokens, chunk_rows=chunk_rows)
    logp.sum().backward()
    if chunk_rows < rows:  # several chunks: only W (1000 × 8), h and per-row values are kept
        assert max(saved_sizes) == vocab * width
    else:  # one chunk: its probabilities (64 × 1000), within the chunk budget
        assert max(saved_sizes) == rows * vocab


def test_completion_logprobs_chunked_equal_unchunked_with_padding(tiny_model_dir) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    twin = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(1)
    vocab = model.config.vocab_size
    prompt_mask = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 0, 1]])  # left-padded
    completion_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])  # right-padded
    prompt_ids = torch.randint(3, vocab, (3, 3), generator=generator) * prompt_mask
    completion_ids = torch.randint(3, vocab, (3, 4), generator=generator) * completion_mask
    upstream = torch.randn(3, 4, generator=generator)

    results = []
    for net, chunked in ((model, True), (twin, False)):
        logp, entropy = completion_logprobs(
            net,
            prompt_ids,
            prompt_mask,
            completion_ids,
            completion_mask,
            temperature=0.8,
            with_entropy=True,
            chunked=chunked,
        )
        (logp * upstream * completion_mask).sum().backward()
        results.append((logp * completion_mask, entropy * completion_mask))
    (logp_chunked, entropy_chunked), (logp_full, entropy_full) = results
    assert torch.allclose(logp_chunked, logp_full, atol=1e-5)
    assert torch.allclose(entropy_chunked, entropy_full, atol=1e-5)
    assert (logp_chunked[completion_mask == 0] == 0).all()  # padding is not scored
    for (name, p1), p2 in zip(model.named_parameters(), twin.parameters(), strict=True):
        assert torch.allclose(p1.grad, p2.grad, atol=1e-6), name
