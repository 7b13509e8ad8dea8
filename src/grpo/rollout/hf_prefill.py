"""The built-in engine's prefill: a block's distinct prompts through the model once, then
a KV cache row per completion.

Shared by the whole-completion decode loop (:mod:`grpo.rollout.hf_engine`) and the turn
sessions (:mod:`grpo.rollout.hf_turns`), so neither reaches into the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from grpo.algo.groups import group_of
from grpo.models.logprobs import positions_from_mask
from grpo.models.wrappers import cache_kwarg
from grpo.rollout.engine import Rollout, RolloutRequest, left_pad

if TYPE_CHECKING:
    from transformers import DynamicCache


@dataclass
class Prefill:
    """A block's prompts after their forward pass, one row per completion."""

    logits_BV: torch.Tensor  # the next-token logits after each row's prompt
    prompt_ids_BP: torch.Tensor
    prompt_mask_BP: torch.Tensor
    next_position_B1: torch.Tensor
    kv_cache: DynamicCache
    cache_name: str  # the model's keyword for it


def prefill_prompts(
    model: nn.Module,
    pad_token_id: int,
    request: RolloutRequest,
    first_row: int,
    end_row: int,
    preallocate: bool = True,
) -> Prefill:
    """Rows [first_row, end_row) of ``request``: one forward pass over their distinct
    prompts, the cache's rows then selected, one per completion. ``preallocate``: room in
    the cache for ``request.params.max_new_tokens`` more tokens (see :func:`preallocate_cache`)."""
    group_size = request.group_size
    device = next(model.parameters()).device
    first_prompt = group_of(first_row, group_size)
    prompts = request.prompt_token_ids[first_prompt : group_of(end_row - 1, group_size) + 1]
    # Row b's prompt, as an index into `prompts` (a group may be cut at either end).
    select_B = group_of(torch.arange(first_row, end_row, device=device), group_size) - first_prompt
    prompt_ids_NP, prompt_mask_NP = left_pad(prompts, pad_token_id)
    prompt_ids_NP, prompt_mask_NP = prompt_ids_NP.to(device), prompt_mask_NP.to(device)
    cache_name = cache_kwarg(model)
    from transformers import DynamicCache

    kv_cache = DynamicCache()
    positions_NP = positions_from_mask(prompt_mask_NP)
    logits_NV = model(
        input_ids=prompt_ids_NP,
        attention_mask=prompt_mask_NP,
        position_ids=positions_NP,
        use_cache=True,
        logits_to_keep=1,
        **{cache_name: kv_cache},
    ).logits[:, -1, :]
    kv_cache.batch_select_indices(select_B)
    if preallocate:
        preallocate_cache(kv_cache, request.params.max_new_tokens)
    return Prefill(
        logits_BV=logits_NV[select_B],
        prompt_ids_BP=prompt_ids_NP[select_B],
        prompt_mask_BP=prompt_mask_NP[select_B],
        next_position_B1=positions_NP[select_B, -1:] + 1,
        kv_cache=kv_cache,
        cache_name=cache_name,
    )


def decoded_rollout(
    prefill: Prefill,
    tokens_BT: torch.Tensor,
    masks_BT: torch.Tensor,
    logps_BT: torch.Tensor,
    stopped_B: torch.Tensor,
) -> Rollout:
    """The prefilled rows and what a decode loop wrote for them, as a Rollout: the
    completion columns up to the last one some row wrote into (at least one)."""
    used = max(int(masks_BT.sum(dim=1).max()), 1)
    return Rollout(
        prompt_ids_BP=prefill.prompt_ids_BP,
        prompt_mask_BP=prefill.prompt_mask_BP,
        completion_ids_BT=tokens_BT[:, :used],
        completion_mask_BT=masks_BT[:, :used],
        sampler_logp_BT=logps_BT[:, :used],
        stopped_B=stopped_B,
    )


def preallocate_cache(kv_cache: DynamicCache, new_tokens: int) -> None:
    """Give each full-attention layer of a prefilled ``DynamicCache`` room for ``new_tokens``.

    A ``DynamicLayer`` grows by concatenation, copying the whole cache at every decoded token
    (O(T²) copying over a completion); a pre-allocated layer writes each token in place.
    Other layer kinds (sliding windows, quantized…) are left as they are.
    """
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:  # an older transformers without cache layers
        return
    layers = getattr(kv_cache, "layers", None)
    if not layers or new_tokens <= 0:
        return

    class PreallocatedLayer(DynamicLayer):
        def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
            super().__init__()
            batch, heads, length, width = keys.shape
            self.key_buffer = keys.new_empty(batch, heads, length + new_tokens, width)
            self.value_buffer = values.new_empty(batch, heads, length + new_tokens, width)
            self.key_buffer[:, :, :length] = keys
            self.value_buffer[:, :, :length] = values
            self.length, self.device, self.is_initialized = length, keys.device, True
            self.keys, self.values = keys, values

        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
        ) -> tuple[torch.Tensor, torch.Tensor]:
            end = self.length + key_states.shape[-2]
            if end > self.key_buffer.shape[-2]:  # more tokens than planned: grow as before
                keys, values = super().update(key_states, value_states, *args, **kwargs)
                self.key_buffer, self.value_buffer, self.length = keys, values, end
                return keys, values
            self.key_buffer[:, :, self.length : end] = key_states
            self.value_buffer[:, :, self.length : end] = value_states
            self.length = end
            self.keys = self.key_buffer[:, :, :end]
            self.values = self.value_buffer[:, :, :end]
            return self.keys, self.values

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            """Keep the rows ``indices`` (finished rows leave the decode batch)."""
            self.key_buffer = self.key_buffer[indices]
            self.value_buffer = self.value_buffer[indices]
            self.keys = self.key_buffer[:, :, : self.length]
            self.values = self.value_buffer[:, :, : self.length]

    for index, layer in enumerate(layers):
        if type(layer) is DynamicLayer and layer.is_initialized and layer.keys.dim() == 4:
            layers[index] = PreallocatedLayer(layer.keys, layer.values)
