"""The compiled decode step (``rollout.compile``) against the eager loop: the same tokens
for the same uniforms, compiled once per shape, and where it is (not) used."""

from __future__ import annotations

import shutil

import pytest
import torch

from grpo.rollout.engine import SamplingParams
from grpo.rollout.hf_engine import TransformersEngine


def _engines(tiny_model_dir) -> tuple[TransformersEngine, TransformersEngine, list[list[int]]]:
    from transformers import AutoModelForCausalLM

    from grpo.demo.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    # Frequent "EOS" characters, so rows end at many different positions.
    eos_ids = {tokenizer.convert_tokens_to_ids(c) for c in "0123"} | {tokenizer.eos_token_id}
    eager, compiled = (
        TransformersEngine(
            model, pad_token_id=tokenizer.pad_token_id, eos_token_ids=eos_ids, compile=compile
        )
        for compile in (False, True)
    )
    prompts = [tokenizer(p)["input_ids"] for p in ("12+3=", "7*8=", "99-41=", "5+5=")]
    return eager, compiled, prompts


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("c++") is None and shutil.which("g++") is None,
    reason="torch.compile on a CPU builds C++ kernels: no C++ compiler here",
)
def test_compiled_decode_samples_the_eager_loops_tokens(tiny_model_dir) -> None:
    eager, compiled, prompts = _engines(tiny_model_dir)
    for temperature in (1.0, 0.0):
        params = SamplingParams(temperature=temperature, max_new_tokens=24)
        ours, theirs = (
            engine.generate(prompts, 6, params, torch.Generator().manual_seed(3))
            for engine in (compiled, eager)
        )
        assert torch.equal(ours.completion_ids_BT, theirs.completion_ids_BT)
        assert torch.equal(ours.completion_mask_BT, theirs.completion_mask_BT)
        assert torch.equal(ours.stopped_B, theirs.stopped_B)
        assert torch.allclose(ours.sampler_logp_BT, theirs.sampler_logp_BT, atol=1e-5, rtol=0)
        lengths = theirs.completion_mask_BT.sum(dim=1)
        if temperature > 0:  # rows end at different positions and stay in the batch, masked
            assert len(set(lengths.tolist())) > 2 and bool(theirs.stopped_B.any())
    first = compiled.compile_seconds
    assert first > 0
    # Paid once per shape: the same rows again, and prompts of another length within the
    # same 64-column bucket, compile nothing more.
    params = SamplingParams(temperature=1.0, max_new_tokens=24)
    compiled.generate(prompts, 6, params, torch.Generator().manual_seed(4))
    compiled.generate([p + p[:3] for p in prompts], 6, params, torch.Generator().manual_seed(5))
    assert compiled.compile_seconds == first


def test_compile_auto_is_off_on_a_cpu_and_true_refuses_what_it_cannot_compile(
    tiny_model_dir,
) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    auto = TransformersEngine(model, pad_token_id=0, eos_token_ids={1}, compile="auto")
    assert auto.compiled is None and auto.compile_seconds == 0.0
    with pytest.raises(ValueError, match="FSDP-sharded model decodes in lockstep"):
        TransformersEngine(
            model, pad_token_id=0, eos_token_ids={1}, all_done=lambda done: done, compile=True
        )
    with pytest.raises(ValueError, match='true, false or "auto"'):
        TransformersEngine(model, pad_token_id=0, eos_token_ids={1}, compile="yes")
