"""The built-in engine's decode loop against the plain loop it replaced.

The plain loop (below) runs every row to the end of the batch: the full batch in every
forward, the attention mask grown by concatenation, a growing KV cache, a full-vocabulary
log-softmax per token. The engine's loop writes into preallocated buffers, lets ended rows
leave the batch and the cache, and computes the token's log-probability as z − logsumexp(z).
For the same uniforms, each row's tokens, mask and end must be exactly the plain loop's, and
its log-probabilities equal within float tolerance (different reduction order).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from grpo.rollout.engine import (
    RolloutRequest,
    SamplingParams,
    filter_logits,
    sample_from_uniform,
    sampling_noise,
)
from grpo.rollout.hf_engine import TransformersEngine
from grpo.rollout.hf_prefill import prefill_prompts


def _plain_loop(engine: TransformersEngine, request: RolloutRequest, noise_BT) -> dict:
    """The loop before the per-token overhead was cut (kept here as the reference)."""
    params = request.params
    prefill = prefill_prompts(
        engine.model, engine.pad_token_id, request, request.start, request.stop, preallocate=False
    )
    logits_BV, position_B1 = prefill.logits_BV, prefill.next_position_B1
    mask_BL = prefill.prompt_mask_BP
    rows = logits_BV.shape[0]
    eos = torch.tensor(sorted(engine.eos_token_ids))
    done_B, stopped_B = torch.zeros(rows, dtype=torch.bool), torch.zeros(rows, dtype=torch.bool)
    tokens, logps, masks = [], [], []
    for position in range(params.max_new_tokens):
        if noise_BT is None:
            logp_BV = torch.log_softmax(logits_BV.float(), dim=-1)
            token_B = logp_BV.argmax(dim=-1)
        else:
            scaled = filter_logits(logits_BV.float() / params.temperature, params.top_k, 1.0)
            logp_BV = torch.log_softmax(scaled, dim=-1)
            token_B = sample_from_uniform(scaled.softmax(dim=-1), noise_BT[:, position])
        token_B = torch.where(done_B, engine.pad_token_id, token_B)
        tokens.append(token_B)
        logps.append(torch.where(done_B, 0.0, logp_BV.gather(1, token_B[:, None]).squeeze(1)))
        masks.append((~done_B).long())
        ended_B = ~done_B & torch.isin(token_B, eos)
        if params.stop_strings:
            texts = [engine.decode(row) for row in torch.stack(tokens, dim=1).tolist()]
            hits = torch.tensor([any(s in t for s in params.stop_strings) for t in texts])
            ended_B |= ~done_B & hits
        stopped_B |= ended_B
        done_B |= ended_B
        if bool(done_B.all()) or position == params.max_new_tokens - 1:
            break
        mask_BL = torch.cat([mask_BL, torch.ones_like(token_B)[:, None]], dim=1)
        logits_BV = engine.model(
            input_ids=token_B[:, None],
            attention_mask=mask_BL,
            position_ids=position_B1,
            use_cache=True,
            **{prefill.cache_name: prefill.kv_cache},
        ).logits[:, -1, :]
        position_B1 = position_B1 + 1
    return {
        "ids": torch.stack(tokens, dim=1),
        "mask": torch.stack(masks, dim=1),
        "logp": torch.stack(logps, dim=1),
        "stopped": stopped_B,
    }


def _engine(tiny_model_dir, eos_text: str):
    from transformers import AutoModelForCausalLM

    from grpo.demo.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    # Frequent "EOS" characters, so rows end at many different positions.
    eos_ids = {tokenizer.convert_tokens_to_ids(c) for c in eos_text}
    engine = TransformersEngine(
        model,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids=eos_ids | {tokenizer.eos_token_id},
        decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
    )
    prompts = [tokenizer(p)["input_ids"] for p in ("12+3=", "7*8=", "99-41=", "5+5=")]
    return engine, prompts


def _forward_batch_sizes(engine: TransformersEngine) -> list[int]:
    sizes: list[int] = []
    original = engine.model.forward

    def recording(*args, **kwargs):
        sizes.append(int(kwargs["input_ids"].shape[0]))
        return original(*args, **kwargs)

    engine.model.forward = recording
    return sizes


@pytest.mark.parametrize(
    ("temperature", "stop_strings"), [(1.0, ()), (0.0, ()), (1.0, ("7",))], ids=str
)
def test_the_engine_loop_equals_the_plain_loop_with_ended_rows_leaving(
    tiny_model_dir, temperature: float, stop_strings: tuple[str, ...]
) -> None:
    torch.manual_seed(0)
    engine, prompts = _engine(tiny_model_dir, eos_text="0123")
    params = SamplingParams(temperature=temperature, max_new_tokens=24, stop_strings=stop_strings)
    request = RolloutRequest(prompts, 6, params, None, 0, len(prompts) * 6)
    noise_BT = None
    if temperature > 0:
        noise_BT = sampling_noise(24, 24, torch.Generator().manual_seed(3), torch.device("cpu"))
    with torch.no_grad():
        plain = _plain_loop(engine, request, noise_BT)
    sizes = _forward_batch_sizes(engine)
    seeded = dataclasses.replace(request, generator=torch.Generator().manual_seed(3))
    ours = engine.generate_rows(seeded)  # its noise is noise_BT: the same seed
    width = ours.completion_ids_BT.shape[1]
    assert width == plain["ids"].shape[1]
    assert torch.equal(ours.completion_ids_BT, plain["ids"])
    assert torch.equal(ours.completion_mask_BT, plain["mask"])
    assert torch.equal(ours.stopped_B, plain["stopped"])
    assert torch.allclose(ours.sampler_logp_BT, plain["logp"], atol=1e-5, rtol=0)
    lengths = plain["mask"].sum(dim=1)
    if temperature > 0:  # sampled rows end at different positions: the batch shrinks
        assert len(set(lengths.tolist())) > 2
        prefill, decode = sizes[0], sizes[1:]
        assert prefill == 4  # each distinct prompt once
        assert decode[-1] < 24 and decode == sorted(decode, reverse=True)
        # the forward after token k runs exactly the rows that did not end by token k; a
        # row cut by a stop string leaves at the next look (every 8 tokens), not at once
        for k, size in enumerate(decode):
            live = int((lengths > k + 1).sum())
            assert size == live if not stop_strings else live <= size <= 24


def test_stop_strings_are_looked_for_every_8_tokens(tiny_model_dir) -> None:
    engine, prompts = _engine(tiny_model_dir, eos_text="")
    calls: list[int] = []
    decode = engine.decode
    engine.decode = lambda ids: calls.append(len(ids)) or decode(ids)
    params = SamplingParams(temperature=1.0, max_new_tokens=24, stop_strings=("7",))
    request = RolloutRequest(prompts, 6, params, torch.Generator().manual_seed(3), 0, 24)
    ours = engine.generate_rows(request)
    stopped = int(ours.stopped_B.sum())
    assert 0 < stopped < 24
    # 3 looks (after tokens 8, 16, 24) at the rows still open, plus up to 8 prefixes to find
    # where each stopped row stopped: far fewer than a decode per row and token (24 × 24).
    assert len(calls) <= 3 * 24 + stopped * 8 < 24 * 24 / 2


def test_a_preallocated_cache_keeps_the_selected_rows(tiny_model_dir) -> None:
    from transformers import AutoModelForCausalLM, DynamicCache

    from grpo.rollout.hf_prefill import preallocate_cache

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    prompts = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]])
    cache = DynamicCache()
    with torch.no_grad():
        model(input_ids=prompts, use_cache=True, past_key_values=cache)
        full_keys = cache.layers[0].keys.clone()
        preallocate_cache(cache, 4)
        cache.batch_select_indices(torch.tensor([0, 2]))
        layer = cache.layers[0]
        assert torch.equal(layer.keys, full_keys[[0, 2]])
        out = model(
            input_ids=torch.tensor([[20], [21]]),
            position_ids=torch.tensor([[4], [4]]),
            use_cache=True,
            past_key_values=cache,
        )
    assert out.logits.shape[0] == 2 and layer.keys.shape[2] == 5
    assert layer.keys.data_ptr() == layer.key_buffer.data_ptr()  # still the one buffer
