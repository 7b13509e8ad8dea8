"""The built-in engine's compiled decode: one decode step under ``torch.compile``, over a
static KV cache of fixed shapes (``rollout.compile``).

The eager loop (:mod:`grpo.rollout.hf_engine`) runs each small op of a decode step on its
own, with Python between them. Here one function — the forward pass on the last token,
sampling, the token's log-prob, the EOS check — is compiled once per shape and reused for
every token and every later rollout of that shape; on CUDA it is replayed as a CUDA graph
(``mode="reduce-overhead"``), one launch per token. What it costs and where it differs:

- Shapes are fixed: the cache holds ``bucket(P + T)`` columns (the prompt, then the
  completion; a multiple of 64, so prompts of similar length share one compiled step), and
  a row that ends stays in the batch, masked, until every row has ended: a batch whose
  lengths differ widely does work the eager loop would not.
- The first rollout of each shape pays the compilation (``compile_seconds``).
- Tokens are those of the eager loop for the same uniforms, unless a uniform falls within
  rounding of a boundary of the cumulative distribution: the compiled graph fuses the
  norms, rotary embedding and softmax, so its logits and cumulative sums round
  differently (about 1e-6 relative). The more uniform the distribution over a large
  vocabulary, the likelier such a near-tie (see benchmarks/RESULTS.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from grpo.models.compiled_trunk import CompileTimed
from grpo.rollout.engine import Rollout, SamplingParams, next_token
from grpo.rollout.hf_prefill import Prefill, decoded_rollout

if TYPE_CHECKING:
    from transformers import StaticCache

COLUMN_BUCKET = 64  # cache columns are rounded up to this: one compiled step per bucket


def compilable(model: nn.Module) -> str | None:
    """Why ``model`` cannot decode through the compiled step, or None when it can: every
    layer's cache must be a plain full-attention one (no sliding window, no recurrent
    state)."""
    from transformers import StaticCache
    from transformers.cache_utils import StaticLayer

    config = getattr(model, "config", None)
    if config is None:
        return "the model has no transformers config"
    try:
        cache = StaticCache(config=config, max_cache_len=COLUMN_BUCKET)
    except (ValueError, TypeError, AttributeError) as error:
        return f"no static KV cache for this model ({error})"
    kinds = {type(layer).__name__ for layer in cache.layers if type(layer) is not StaticLayer}
    return f"its cache has {', '.join(sorted(kinds))} layers" if kinds else None


def _decode_step(
    model: nn.Module,
    cache: StaticCache,
    cache_name: str,
    token_B1: torch.Tensor,
    position_B1: torch.Tensor,
    mask_BL: torch.Tensor,
    noise_B: torch.Tensor | None,
    done_B: torch.Tensor,
    eos_K: torch.Tensor,
    pad_token_id: int,
    params: SamplingParams,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The next token after ``token_B1`` (pad where the row is done), its log-prob (0 where
    done) and whether it ends its row: the whole decode step, compiled as one graph."""
    logits_BV = model(
        input_ids=token_B1,
        attention_mask=mask_BL,
        position_ids=position_B1,
        use_cache=True,
        **{cache_name: cache},
    ).logits[:, -1, :]
    token_B, logp_B = next_token(logits_BV, noise_B, params)
    token_B = token_B.masked_fill(done_B, pad_token_id)
    ended_B = ~done_B & torch.isin(token_B, eos_K)
    return token_B, logp_B.masked_fill(done_B, 0.0), ended_B


class CompiledDecode:
    """The compiled decode step and one static KV cache per shape, kept across rollouts
    (fixed addresses, so a CUDA graph replays on them)."""

    def __init__(self, cuda_graphs: bool) -> None:
        mode = "reduce-overhead" if cuda_graphs else None
        self.step = CompileTimed(torch.compile(_decode_step, dynamic=False, mode=mode))
        self.caches: dict[tuple[int, int, torch.device], StaticCache] = {}

    @property
    def compile_seconds(self) -> float:
        """Seconds the decode steps that compiled a new graph took (once per shape)."""
        return self.step.seconds

    def static_cache(self, model: nn.Module, prefill: Prefill, columns: int) -> StaticCache:
        """This shape's static cache, holding the prefill's keys and values in its first
        columns (the rest zeroed: never attended to, as the mask is 0 there)."""
        from transformers import StaticCache

        rows, device = prefill.logits_BV.shape[0], prefill.logits_BV.device
        key = (rows, columns, device)
        if key not in self.caches:
            self.caches[key] = StaticCache(config=model.config, max_cache_len=columns)
        cache, prompt_width = self.caches[key], prefill.prompt_mask_BP.shape[1]
        for layer, source in zip(cache.layers, prefill.kv_cache.layers, strict=True):
            if not layer.is_initialized:
                layer.lazy_initialization(source.keys, source.values)
            for static, prompt in ((layer.keys, source.keys), (layer.values, source.values)):
                static.zero_()
                static[:, :, :prompt_width].copy_(prompt)
            layer.cumulative_length.fill_(prompt_width)
        return cache

    def decode(
        self,
        model: nn.Module,
        prefill: Prefill,
        params: SamplingParams,
        noise_BT: torch.Tensor | None,
        eos_token_ids: set[int],
        pad_token_id: int,
    ) -> Rollout:
        """Sample ``params.max_new_tokens`` tokens per row, the first from the prefill's
        logits (eagerly, as the eager loop), every later one by the compiled step; the host
        looks at whether every row ended every 8 tokens."""
        logits_BV, width = prefill.logits_BV, params.max_new_tokens
        rows, device = logits_BV.shape[0], logits_BV.device
        prompt_width = prefill.prompt_mask_BP.shape[1]
        columns = -(-(prompt_width + width) // COLUMN_BUCKET) * COLUMN_BUCKET
        cache = self.static_cache(model, prefill, columns)
        mask_BL = torch.zeros((rows, columns), dtype=torch.long, device=device)
        mask_BL[:, :prompt_width] = prefill.prompt_mask_BP
        mask_BL[:, prompt_width : prompt_width + width] = 1  # causality hides what is ahead
        eos_K = torch.tensor(sorted(eos_token_ids) or [-1], dtype=torch.long, device=device)
        noise_TB = None if noise_BT is None else noise_BT.t().contiguous()
        tokens_BT = torch.full((rows, width), pad_token_id, dtype=torch.long, device=device)
        logps_BT = torch.zeros((rows, width), dtype=torch.float32, device=device)
        done_BT = torch.zeros((rows, width + 1), dtype=torch.bool, device=device)
        token_B, logp_B = next_token(logits_BV, None if noise_TB is None else noise_TB[0], params)
        tokens_BT[:, 0], logps_BT[:, 0] = token_B, logp_B
        done_BT[:, 1] = torch.isin(token_B, eos_K)
        position_B1 = prefill.next_position_B1.clone()
        for position in range(1, width):
            if position % 8 == 0 and bool(done_BT[:, position].all()):
                done_BT[:, position:] = True  # every row ended: the rest is padding
                break
            token_B, logp_B, ended_B = self.step(
                model,
                cache,
                prefill.cache_name,
                tokens_BT[:, position - 1 : position],
                position_B1,
                mask_BL,
                None if noise_TB is None else noise_TB[position],
                done_BT[:, position],
                eos_K,
                pad_token_id,
                params,
            )
            tokens_BT[:, position], logps_BT[:, position] = token_B, logp_B
            torch.logical_or(done_BT[:, position], ended_B, out=done_BT[:, position + 1])
            position_B1.add_(1)
        # A token is real while its row had not ended before it (the EOS token included).
        masks_BT = (~done_BT[:, :-1]).long()
        return decoded_rollout(prefill, tokens_BT, masks_BT, logps_BT, done_BT[:, -1])
