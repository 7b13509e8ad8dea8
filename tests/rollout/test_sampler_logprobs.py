"""The built-in engine records the log-probability of the distribution it sampled from:
after top-k it is renormalised over the kept tokens, log q = log p − log Σ_{top-k} p, a real
mismatch with the trainer's log p; without truncation the two agree."""

from __future__ import annotations

import torch

from grpo.models.logprobs import completion_logprobs
from grpo.rollout.engine import SamplingParams
from grpo.rollout.hf_engine import TransformersEngine


def test_sampler_logprobs_are_renormalised_under_top_k(tiny_model_dir) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    engine = TransformersEngine(
        model, pad_token_id=tokenizer.pad_token_id, eos_token_ids={tokenizer.eos_token_id}
    )
    prompts = [tokenizer("12+7=")["input_ids"], tokenizer("3*4=")["input_ids"]]
    for top_k in (0, 3):
        params = SamplingParams(temperature=0.8, top_k=top_k, max_new_tokens=6)
        rollout = engine.generate(prompts, 2, params, torch.Generator().manual_seed(0))
        mask = rollout.completion_mask_BT.bool()
        with torch.no_grad():
            trainer_logp, _ = completion_logprobs(
                model,
                rollout.prompt_ids_BP,
                rollout.prompt_mask_BP,
                rollout.completion_ids_BT,
                rollout.completion_mask_BT,
                temperature=0.8,
                chunked=False,
            )
            gap = (rollout.sampler_logp_BT - trainer_logp)[mask]
        if top_k == 0:  # the sampler is the policy
            assert gap.abs().max() < 1e-4
            continue
        # log q − log p = −log(mass of the top 3 tokens at that position) > 0.
        ids = torch.cat([rollout.prompt_ids_BP, rollout.completion_ids_BT], dim=1)
        attention = torch.cat([rollout.prompt_mask_BP, rollout.completion_mask_BT], dim=1)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            logits = model(ids, attention_mask=attention, position_ids=positions).logits
        width = rollout.completion_ids_BT.shape[1]
        probs = (logits[:, -width - 1 : -1].float() / 0.8).softmax(dim=-1)
        top_mass = probs.topk(3, dim=-1).values.sum(dim=-1)
        assert torch.allclose(gap, -top_mass.log()[mask], atol=1e-4)
        assert gap.min() > 0
