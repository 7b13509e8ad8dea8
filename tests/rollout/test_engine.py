import pytest
import torch

from grpo.rollout.engine import (
    Rollout,
    RolloutEngine,
    RolloutRequest,
    SamplingParams,
    concat_rollouts,
    filter_logits,
    left_pad,
)
from grpo.rollout.hf_engine import TransformersEngine


def test_left_pad() -> None:
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_filter_logits_top_k_and_top_p() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isinf(filter_logits(logits, 2, 1.0)[0, 2:]).all()
    kept = ~torch.isinf(filter_logits(logits, 0, 0.7))
    assert kept.tolist() == [[True, True, False, False]]  # 0.5 < 0.7, 0.5 + 0.3 ≥ 0.7


def _rollout(prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> Rollout:
    prompt_ids_BP = torch.tensor(prompt_ids)
    completion_ids_BT = torch.tensor(completion_ids)
    return Rollout(
        prompt_ids_BP=prompt_ids_BP,
        prompt_mask_BP=torch.ones_like(prompt_ids_BP),
        completion_ids_BT=completion_ids_BT,
        completion_mask_BT=torch.ones_like(completion_ids_BT),
        sampler_logp_BT=-completion_ids_BT.float(),
        stopped_B=torch.ones(len(prompt_ids), dtype=torch.bool),
    )


def test_concat_rollouts_pads_prompts_left_and_completions_right() -> None:
    short_prompt = _rollout([[5]], [[6, 7, 8]])
    long_prompt = _rollout([[1, 2, 3], [4, 5, 6]], [[9], [10]])
    both = concat_rollouts([short_prompt, long_prompt], pad_token_id=0)
    assert both.prompt_ids_BP.tolist() == [[0, 0, 5], [1, 2, 3], [4, 5, 6]]
    assert both.prompt_mask_BP.tolist() == [[0, 0, 1], [1, 1, 1], [1, 1, 1]]
    assert both.completion_ids_BT.tolist() == [[6, 7, 8], [9, 0, 0], [10, 0, 0]]
    assert both.completion_mask_BT.tolist() == [[1, 1, 1], [1, 0, 0], [1, 0, 0]]
    assert both.sampler_logp_BT.tolist() == [[-6, -7, -8], [-9, 0, 0], [-10, 0, 0]]
    assert both.stopped_B.tolist() == [True, True, True]
    assert concat_rollouts([short_prompt], pad_token_id=0) is short_prompt


class _RecordingEngine(RolloutEngine):
    def __init__(self) -> None:
        self.requests: list[RolloutRequest] = []

    def generate_rows(self, request: RolloutRequest) -> Rollout:
        self.requests.append(request)
        return _rollout([[1]], [[2]])


def test_generate_validates_rows_once_for_every_engine() -> None:
    engine, params = _RecordingEngine(), SamplingParams()
    engine.generate([[1], [2], [3]], 2, params, None, rows=slice(1, 4))
    engine.generate([[1], [2], [3]], 2, params)
    (part, whole) = engine.requests
    assert (part.start, part.stop, part.total_rows) == (1, 4, 6)
    assert (whole.start, whole.stop) == (0, 6)
    for rows in (slice(0, 6, 2), slice(4, 4), slice(7, 9)):
        with pytest.raises(ValueError, match="contiguous block of the 6"):
            engine.generate([[1], [2], [3]], 2, params, None, rows=rows)
    assert len(engine.requests) == 2  # an invalid block never reaches the engine


def _engine(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from grpo.demo.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    engine = TransformersEngine(
        model,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids={tokenizer.eos_token_id},
        decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
    )
    return engine, model, tokenizer


def test_rollout_shapes_masks_and_logprobs(tiny_model_dir) -> None:
    from grpo.models.logprobs import completion_logprobs

    engine, model, tokenizer = _engine(tiny_model_dir)
    prompts = [tokenizer("12+3=")["input_ids"], tokenizer("7*8=")["input_ids"]]
    params = SamplingParams(temperature=0.7, max_new_tokens=8)
    rollout = engine.generate(prompts, 3, params, torch.Generator().manual_seed(0))
    assert rollout.completion_ids_BT.shape[0] == 6
    assert (
        rollout.prompt_ids_BP[:3].tolist() == [rollout.prompt_ids_BP[0].tolist()] * 3
    )  # rows grouped
    mask = rollout.completion_mask_BT
    # A mask is 1…1 then 0…0; a stopped row ends on EOS, a truncated one runs full length.
    for row in range(6):
        length = int(mask[row].sum())
        assert mask[row, :length].all() and not mask[row, length:].any()
        if rollout.stopped_B[row]:
            assert rollout.completion_ids_BT[row, length - 1] == tokenizer.eos_token_id
        else:
            assert length == 8
    logp, _ = completion_logprobs(
        model,
        rollout.prompt_ids_BP,
        rollout.prompt_mask_BP,
        rollout.completion_ids_BT,
        mask,
        temperature=0.7,
    )
    assert torch.allclose(
        logp * mask, rollout.sampler_logp_BT, atol=1e-4
    )  # the KV-cache path agrees


def test_stop_strings_end_a_completion(tiny_model_dir) -> None:
    engine, _, tokenizer = _engine(tiny_model_dir)
    prompts = [tokenizer("1+1=")["input_ids"]]
    params = SamplingParams(
        temperature=1.0, max_new_tokens=30, stop_strings=("1", "2", "3", "4", "5")
    )
    rollout = engine.generate(prompts, 8, params, torch.Generator().manual_seed(0))
    for row, ids in enumerate(rollout.completion_ids_BT.tolist()):
        kept = ids[: int(rollout.completion_mask_BT[row].sum())]
        text = tokenizer.decode(kept, skip_special_tokens=True)
        assert not any(c in "12345" for c in text[:-1])  # nothing runs past a stop string
        if rollout.stopped_B[row]:
            assert kept[-1] == tokenizer.eos_token_id or text[-1] in "12345"


def test_same_generator_seed_same_rollout(tiny_model_dir) -> None:
    engine, _, tokenizer = _engine(tiny_model_dir)
    prompts = [tokenizer("9-4=")["input_ids"]]
    params = SamplingParams(max_new_tokens=5)
    a = engine.generate(prompts, 4, params, torch.Generator().manual_seed(1))
    b = engine.generate(prompts, 4, params, torch.Generator().manual_seed(1))
    assert torch.equal(a.completion_ids_BT, b.completion_ids_BT)


def test_preallocated_cache_writes_in_place_and_matches_a_growing_one(tiny_model_dir) -> None:
    from transformers import AutoModelForCausalLM, DynamicCache

    from grpo.rollout.hf_prefill import preallocate_cache

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    prompt = torch.tensor([[5, 6, 7, 8]])
    next_tokens = [9, 10, 11]
    logits = []
    for preallocate in (False, True):
        cache = DynamicCache()
        with torch.no_grad():
            model(input_ids=prompt, use_cache=True, past_key_values=cache)
            if preallocate:
                preallocate_cache(cache, len(next_tokens))
                buffer = cache.layers[0].key_buffer
            steps = []
            for position, token in enumerate(next_tokens, start=prompt.shape[1]):
                out = model(
                    input_ids=torch.tensor([[token]]),
                    position_ids=torch.tensor([[position]]),
                    use_cache=True,
                    past_key_values=cache,
                )
                steps.append(out.logits[0, -1])
        logits.append(torch.stack(steps))
        assert cache.get_seq_length() == prompt.shape[1] + len(next_tokens)
    assert cache.layers[0].keys.data_ptr() == buffer.data_ptr()  # a view of the one buffer
    assert torch.allclose(logits[0], logits[1], atol=1e-5)
