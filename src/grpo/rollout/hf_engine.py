"""The built-in rollout engine: sampling from the policy itself with a KV cache.

It samples by inverse CDF from uniforms drawn up front for the *whole* step (see
:mod:`grpo.rollout.engine`), so a row's tokens depend on its global index only, not on how
rows are split across processes or generation chunks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from grpo.models.logprobs import positions_from_mask
from grpo.models.wrappers import cache_kwarg
from grpo.rollout.engine import (
    Rollout,
    RolloutEngine,
    RolloutRequest,
    SamplingParams,
    concat_rollouts,
    left_pad,
    next_token,
    sampling_noise,
)
from grpo.rollout.hf_turns import HFTurnSession
from grpo.rollout.turns import TurnEngine, TurnSession


@dataclass
class _Prefill:
    """A chunk's prompts after their forward pass, one row per completion."""

    logits_BV: torch.Tensor  # the next-token logits after each row's prompt
    prompt_ids_BP: torch.Tensor
    prompt_mask_BP: torch.Tensor
    next_position_B1: torch.Tensor
    kv_cache: Any
    cache_name: str  # the model's keyword for it


def preallocate_cache(kv_cache: Any, new_tokens: int) -> None:
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

        def update(self, key_states, value_states, *args, **kwargs):
            end = self.length + key_states.shape[-2]
            if end > self.key_buffer.shape[-2]:  # more tokens than planned: grow as before
                return super().update(key_states, value_states, *args, **kwargs)
            self.key_buffer[:, :, self.length : end] = key_states
            self.value_buffer[:, :, self.length : end] = value_states
            self.length = end
            self.keys = self.key_buffer[:, :, :end]
            self.values = self.value_buffer[:, :, :end]
            return self.keys, self.values

    for index, layer in enumerate(layers):
        if type(layer) is DynamicLayer and layer.is_initialized and layer.keys.dim() == 4:
            layers[index] = PreallocatedLayer(layer.keys, layer.values)


class TransformersEngine(RolloutEngine, TurnEngine):
    """Samples from the policy itself with a KV cache; no second copy of the weights.

    Each prompt is prefilled once per chunk and its cache shared by its rows, so the prompt
    costs one forward pass per group rather than G. ``all_done`` decides when decoding may
    stop: by default when this process's rows are all finished; with an FSDP-sharded model
    every process must run as many forward passes as the others (each one gathers
    parameters from all of them), so there it answers for all processes together.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        pad_token_id: int,
        eos_token_ids: set[int],
        decode: Callable[[list[int]], str] | None = None,
        max_sequences_per_batch: int = 512,
        all_done: Callable[[bool], bool] | None = None,
    ) -> None:
        self.model = model
        self.pad_token_id = pad_token_id
        self.eos_token_ids = eos_token_ids
        self.decode = decode  # list[int] -> str, needed only for stop strings
        self.max_sequences_per_batch = max_sequences_per_batch
        self.all_done = all_done

    def sync_weights(self, model: nn.Module) -> None:
        self.model = model

    def generate_rows(self, request: RolloutRequest) -> Rollout:
        params = request.params
        if params.stop_strings and self.decode is None:
            raise ValueError("stop_strings need a decode function")
        noise_BT = None
        if params.temperature > 0:  # drawn for every row of the step, whatever the rows are
            device = next(self.model.parameters()).device
            noise_BT = sampling_noise(
                request.total_rows, params.max_new_tokens, request.generator, device
            )
        chunk, stop = self.max_sequences_per_batch, request.stop
        chunks = [
            self._generate_chunk(
                request,
                first,
                min(first + chunk, stop),
                None if noise_BT is None else noise_BT[first : min(first + chunk, stop)],
            )
            for first in range(request.start, stop, chunk)
        ]
        return concat_rollouts(chunks, self.pad_token_id)

    @torch.no_grad()
    def _generate_chunk(
        self, request: RolloutRequest, first_row: int, end_row: int, noise_BT: torch.Tensor | None
    ) -> Rollout:
        """Rows [first_row, end_row) of the step; each distinct prompt is prefilled once."""
        model, params = self.model, request.params
        was_training = model.training
        model.eval()
        try:
            prefill = self._prefill(request, first_row, end_row)
            return self._decode(prefill, params, noise_BT)
        finally:
            model.train(was_training)

    def start_turns(self, request: RolloutRequest, max_model_tokens: int) -> TurnSession:
        """Multi-turn sampling that continues from the KV cache (:mod:`grpo.rollout.hf_turns`)."""
        return HFTurnSession(self, request, max_model_tokens)

    def _prefill(
        self, request: RolloutRequest, first_row: int, end_row: int, preallocate: bool = True
    ) -> _Prefill:
        """One forward pass over the chunk's distinct prompts; its cache, rows selected."""
        model, group_size = self.model, request.group_size
        device = next(model.parameters()).device
        first_prompt = first_row // group_size
        prompts = request.prompt_token_ids[first_prompt : (end_row - 1) // group_size + 1]
        # Row b's prompt, as an index into `prompts` (a group may be cut at either end).
        select_B = torch.arange(first_row, end_row, device=device) // group_size - first_prompt
        prompt_ids_NP, prompt_mask_NP = left_pad(prompts, self.pad_token_id)
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
        return _Prefill(
            logits_BV=logits_NV[select_B],
            prompt_ids_BP=prompt_ids_NP[select_B],
            prompt_mask_BP=prompt_mask_NP[select_B],
            next_position_B1=positions_NP[select_B, -1:] + 1,
            kv_cache=kv_cache,
            cache_name=cache_name,
        )

    def _decode(
        self, prefill: _Prefill, params: SamplingParams, noise_BT: torch.Tensor | None
    ) -> Rollout:
        """Sample token after token until every row ended or max_new_tokens is reached."""
        logits_BV, next_position_B1 = prefill.logits_BV, prefill.next_position_B1
        attention_mask_BL = prefill.prompt_mask_BP
        batch, device = logits_BV.shape[0], logits_BV.device
        eos_ids = torch.tensor(sorted(self.eos_token_ids), device=device, dtype=torch.long)
        tokens, logps, masks = [], [], []
        done_B = torch.zeros(batch, dtype=torch.bool, device=device)
        stopped_B = torch.zeros(batch, dtype=torch.bool, device=device)
        for position in range(params.max_new_tokens):
            noise_B = None if noise_BT is None else noise_BT[:, position]
            token_B, logp_BV = next_token(logits_BV, noise_B, params)
            token_B = torch.where(done_B, self.pad_token_id, token_B)
            tokens.append(token_B)
            logps.append(torch.where(done_B, 0.0, logp_BV.gather(1, token_B[:, None]).squeeze(1)))
            masks.append((~done_B).long())
            ended_B = ~done_B & torch.isin(token_B, eos_ids)
            if params.stop_strings:
                ended_B |= ~done_B & self._hits_stop_string(tokens, done_B, params.stop_strings)
            stopped_B |= ended_B
            done_B |= ended_B
            finished = bool(done_B.all())
            if self.all_done(finished) if self.all_done is not None else finished:
                break
            if position == params.max_new_tokens - 1:  # the last token needs no forward
                break
            attention_mask_BL = torch.cat(
                [attention_mask_BL, torch.ones_like(token_B)[:, None]], dim=1
            )
            logits_BV = self.model(
                input_ids=token_B[:, None],
                attention_mask=attention_mask_BL,
                position_ids=next_position_B1,
                use_cache=True,
                **{prefill.cache_name: prefill.kv_cache},
            ).logits[:, -1, :]
            next_position_B1 = next_position_B1 + 1
        return Rollout(
            prompt_ids_BP=prefill.prompt_ids_BP,
            prompt_mask_BP=prefill.prompt_mask_BP,
            completion_ids_BT=torch.stack(tokens, dim=1),
            completion_mask_BT=torch.stack(masks, dim=1),
            sampler_logp_BT=torch.stack(logps, dim=1),
            stopped_B=stopped_B,
        )

    def _hits_stop_string(
        self, tokens: list[torch.Tensor], done_B: torch.Tensor, stop_strings: tuple[str, ...]
    ) -> torch.Tensor:
        ids_BT = torch.stack(tokens, dim=1).tolist()
        hits = [
            (not done) and any(s in self.decode(row) for s in stop_strings)
            for row, done in zip(ids_BT, done_B.tolist(), strict=True)
        ]
        return torch.tensor(hits, dtype=torch.bool, device=done_B.device)
