"""The prompt once per group: the one-pass log-probs and gradients, with fewer prompt tokens run."""

from __future__ import annotations

import copy

import pytest
import torch

from grpo.models.logprobs import completion_logprobs
from grpo.models.shared_prompt import prompt_groups, sharing_blocker

PROMPT_LENGTHS = [4, 2, 3]  # three prompts, left-padded to 4 columns
GROUP = 3


def _grouped_batch(vocab: int) -> tuple[torch.Tensor, ...]:
    """3 prompts × G = 3 rows; completions right-padded to 5 columns, lengths 1 to 5."""
    generator = torch.Generator().manual_seed(0)
    lengths = torch.tensor(PROMPT_LENGTHS).repeat_interleave(GROUP)
    prompt_mask = (torch.arange(4)[None, :] >= 4 - lengths[:, None]).long()
    prompts = torch.randint(3, vocab, (len(PROMPT_LENGTHS), 4), generator=generator)
    prompt_ids = prompts.repeat_interleave(GROUP, dim=0) * prompt_mask
    prompt_ids[4, 0] = 5  # a padding id that differs inside a group: ignored
    completion_lengths = torch.tensor([5, 1, 3, 2, 5, 4, 1, 2, 5])
    completion_mask = (torch.arange(5)[None, :] < completion_lengths[:, None]).long()
    completion_ids = torch.randint(3, vocab, (9, 5), generator=generator) * completion_mask
    return prompt_ids, prompt_mask, completion_ids, completion_mask


def _model(tiny_model_dir) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)


def _logps_and_grads(model, batch, share: bool, **kwargs) -> tuple[torch.Tensor, ...]:
    """Log-probs, entropy, and the gradient of Σ w·logp for every trainable parameter."""
    model.zero_grad(set_to_none=True)
    logp, entropy = completion_logprobs(
        model, *batch, temperature=0.7, with_entropy=True, share_prompt=share, **kwargs
    )
    weights = torch.linspace(-1.0, 1.0, logp.numel()).reshape(logp.shape)
    (logp * weights).sum().backward()
    grads = [p.grad.clone() for p in model.parameters() if p.requires_grad]
    return logp.detach(), entropy, *grads


def _assert_same(shared: tuple[torch.Tensor, ...], plain: tuple[torch.Tensor, ...]) -> None:
    assert len(shared) == len(plain)
    for a, b in zip(shared, plain, strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-5), (a - b).abs().max()


def _embedding_calls(model) -> list[tuple[int, ...]]:
    """The (rows, columns) of every forward, recorded at the token embedding."""
    calls: list[tuple[int, ...]] = []
    embed = model.get_input_embeddings()
    embed.register_forward_hook(lambda _m, args, _out: calls.append(tuple(args[0].shape)))
    return calls


def test_prompt_groups_of_a_hand_built_batch() -> None:
    ids = torch.tensor([[0, 5, 6], [9, 5, 6], [0, 5, 6], [5, 5, 6], [5, 5, 6]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 1], [0, 1, 1], [1, 1, 1], [1, 1, 1]])
    first, group = prompt_groups(ids, mask)
    # Rows 0-2 share "5 6" (padding ids ignored); rows 3-4 share "5 5 6".
    assert first.tolist() == [0, 3]
    assert group.tolist() == [0, 0, 0, 1, 1]
    assert prompt_groups(ids[2:4], mask[2:4]) is None  # two different prompts: nothing shared


@pytest.mark.parametrize("chunked", [True, False])
def test_logprobs_and_gradients_equal_the_one_pass(tiny_model_dir, chunked: bool) -> None:
    model = _model(tiny_model_dir)
    batch = _grouped_batch(model.config.vocab_size)
    calls = _embedding_calls(model)
    shared = _logps_and_grads(model, batch, True, chunked=chunked)
    # The 3 prompts once (4 columns), then the 9 completions less their last token.
    assert calls == [(3, 4), (9, 4)]
    _assert_same(shared, _logps_and_grads(model, batch, False, chunked=chunked))
    assert calls[2:] == [(9, 9)]


def test_a_group_split_across_micro_batches(tiny_model_dir) -> None:
    model = _model(tiny_model_dir)
    rows = slice(2, 7)  # the last row of group 0, all of group 1, the first of group 2
    batch = tuple(t[rows] for t in _grouped_batch(model.config.vocab_size))
    assert prompt_groups(batch[0], batch[1])[1].tolist() == [0, 1, 1, 1, 2]
    _assert_same(_logps_and_grads(model, batch, True), _logps_and_grads(model, batch, False))


def test_the_reference_pass_under_inference_mode(tiny_model_dir) -> None:
    model = _model(tiny_model_dir).eval()
    batch = _grouped_batch(model.config.vocab_size)
    with torch.inference_mode():
        shared, _ = completion_logprobs(model, *batch, share_prompt=True)
        plain, _ = completion_logprobs(model, *batch)
    assert torch.allclose(shared, plain, atol=1e-6)


def test_lora_adapters_get_the_one_pass_gradients(tiny_model_dir) -> None:
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear")
    model = peft.get_peft_model(_model(tiny_model_dir), config)
    for name, parameter in model.named_parameters():  # B = 0 at init: make the adapters act
        if "lora_B" in name:
            torch.nn.init.normal_(parameter, std=0.1)
    batch = _grouped_batch(model.config.vocab_size)
    _assert_same(_logps_and_grads(model, batch, True), _logps_and_grads(model, batch, False))


def test_gradient_checkpointing_falls_back_to_the_one_pass(tiny_model_dir) -> None:
    model = _model(tiny_model_dir)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    assert "gradient checkpointing" in sharing_blocker(model)
    with torch.no_grad():  # no backward to replay: the cache is kept, sharing works
        assert sharing_blocker(model) is None
    batch = _grouped_batch(model.config.vocab_size)
    calls = _embedding_calls(model)
    fallback = _logps_and_grads(model, batch, True)
    assert calls == [(9, 9)]
    _assert_same(fallback, _logps_and_grads(copy.deepcopy(model), batch, False))


def test_a_wrapper_with_a_module_is_not_shared(tiny_model_dir) -> None:
    wrapper = torch.nn.Module()
    wrapper.module = _model(tiny_model_dir)  # what DDP looks like to the check
    assert sharing_blocker(wrapper) == "DDP runs one forward per backward"
