"""Rollouts: G sampled completions per prompt, as token ids, masks and sampler log-probs.

The interface (:class:`RolloutEngine`) works on token ids so that engines are swappable
(the built-in transformers engine here; vLLM in ``grpo.vllm_engine``). Rows are grouped:
row b belongs to prompt b // G. An engine may be asked for a contiguous block of the rows
only (``rows``): that is how several processes split one step, a group possibly spanning two.

The built-in engine samples by inverse CDF from uniforms drawn up front for the *whole*
step, ``u[b, t]`` for every row b and position t, and uses its own rows' slice: a row's
tokens then depend on its global index only, not on how the rows are split across
processes or generation chunks, so 1 process and N processes roll out the same tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from grpo.logprobs import cache_kwarg, positions_from_mask


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    max_new_tokens: int = 256
    stop_strings: tuple[str, ...] = ()


@dataclass
class Rollout:
    """One step's completions. B = num_prompts · G rows, P prompt columns, T completion columns."""

    prompt_ids_BP: torch.Tensor  # left-padded
    prompt_mask_BP: torch.Tensor  # 1 = real prompt token
    completion_ids_BT: torch.Tensor  # right-padded
    completion_mask_BT: torch.Tensor  # 1 = real completion token, the EOS token included
    sampler_logp_BT: torch.Tensor  # log softmax(logits / τ)[token] as sampled, 0 on padding
    stopped_B: torch.Tensor  # True where the completion ended on EOS or a stop string

    @property
    def truncated_B(self) -> torch.Tensor:
        return ~self.stopped_B


class RolloutEngine(Protocol):
    def generate(
        self,
        prompt_token_ids: list[list[int]],
        group_size: int,
        params: SamplingParams,
        generator: torch.Generator | None = None,
        rows: slice | None = None,
    ) -> Rollout:
        """G completions for each prompt: the rows ``rows`` of the len(prompts)·G (all if None)."""
        ...

    def sync_weights(self, model: nn.Module) -> None:
        """Make the engine sample from ``model``'s current weights (no-op when it is the model)."""
        ...


def left_pad(sequences: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack token lists right-aligned: (ids_BP, mask_BP)."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        if seq:
            ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
            mask[row, width - len(seq) :] = 1
    return ids, mask


def step_rows(num_prompts: int, group_size: int, rows: slice | None) -> tuple[int, int]:
    """``rows`` as (start, stop) within the num_prompts·G rows of a step (all when None)."""
    total = num_prompts * group_size
    start, stop, stride = (rows or slice(None)).indices(total)
    if stride != 1 or start >= stop:
        raise ValueError(f"rows must be a non-empty contiguous block of the {total}, got {rows}")
    return start, stop


def sampling_noise(
    rows: int, positions: int, generator: torch.Generator | None, device: torch.device
) -> torch.Tensor:
    """Uniforms u[b, t] in [0, 1) for every row and position of a step, from ``generator``."""
    noise_device = generator.device if generator is not None else device
    return torch.rand((rows, positions), generator=generator, device=noise_device).to(device)


def sample_from_uniform(probs_BV: torch.Tensor, u_B: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling: the first token v with Σ_{w ≤ v} p_w > u · Σ_w p_w.

    Exact sampling from ``probs_BV`` (unnormalised, zeros allowed) given u ~ U[0, 1); a token
    of probability 0 (filtered out by top-k/top-p) is never picked.
    """
    cdf_BV = probs_BV.float().cumsum(dim=-1)
    total_B1 = cdf_BV[:, -1:]
    # Strictly below the total, so some cumulative value exceeds it even after rounding.
    target_B1 = torch.minimum(
        u_B[:, None] * total_B1, torch.nextafter(total_B1, torch.zeros_like(total_B1))
    )
    token_B = torch.searchsorted(cdf_BV, target_B1, right=True).squeeze(1)
    token_B = token_B.clamp(max=probs_BV.shape[-1] - 1)
    # The cumulative sum does not rise at a zero; a parallel scan's rounding could still
    # make it look so on a GPU: such a pick falls back to the most likely token.
    picked_B = probs_BV.gather(1, token_B[:, None]).squeeze(1)
    return torch.where(picked_B > 0, token_B, probs_BV.argmax(dim=-1))


def filter_logits(logits_BV: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set logits outside the top-k and outside the top-p nucleus to −inf."""
    if top_k > 0 and top_k < logits_BV.shape[-1]:
        kth_BV = torch.topk(logits_BV, top_k, dim=-1).values[:, -1:]
        logits_BV = logits_BV.masked_fill(logits_BV < kth_BV, float("-inf"))
    if top_p < 1.0:
        sorted_BV, order_BV = torch.sort(logits_BV, dim=-1, descending=True)
        cumulative_BV = sorted_BV.softmax(dim=-1).cumsum(dim=-1)
        # Drop a token when the mass before it already reaches top_p; the first always stays.
        drop_sorted_BV = (cumulative_BV - sorted_BV.softmax(dim=-1)) >= top_p
        drop_BV = drop_sorted_BV.scatter(-1, order_BV, drop_sorted_BV)
        logits_BV = logits_BV.masked_fill(drop_BV, float("-inf"))
    return logits_BV


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


class TransformersEngine:
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
        decode=None,
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

    def generate(
        self,
        prompt_token_ids: list[list[int]],
        group_size: int,
        params: SamplingParams,
        generator: torch.Generator | None = None,
        rows: slice | None = None,
    ) -> Rollout:
        if params.stop_strings and self.decode is None:
            raise ValueError("stop_strings need a decode function")
        start, stop = step_rows(len(prompt_token_ids), group_size, rows)
        noise_BT = None
        if params.temperature > 0:  # drawn for every row of the step, whatever `rows` is
            device = next(self.model.parameters()).device
            total = len(prompt_token_ids) * group_size
            noise_BT = sampling_noise(total, params.max_new_tokens, generator, device)
        chunk = self.max_sequences_per_batch
        chunks = [
            self._generate_chunk(
                prompt_token_ids,
                group_size,
                first,
                min(first + chunk, stop),
                params,
                None if noise_BT is None else noise_BT[first : min(first + chunk, stop)],
            )
            for first in range(start, stop, chunk)
        ]
        return _concat_rollouts(chunks, self.pad_token_id)

    @torch.no_grad()
    def _generate_chunk(
        self,
        prompt_token_ids: list[list[int]],
        group_size: int,
        first_row: int,
        end_row: int,
        params: SamplingParams,
        noise_BT: torch.Tensor | None,
    ) -> Rollout:
        """Rows [first_row, end_row) of the step; each distinct prompt is prefilled once."""
        model = self.model
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        first_prompt = first_row // group_size
        prompts = prompt_token_ids[first_prompt : (end_row - 1) // group_size + 1]
        # Row b's prompt, as an index into `prompts` (a group may be cut at either end).
        select_B = torch.arange(first_row, end_row, device=device) // group_size - first_prompt
        try:
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
            preallocate_cache(kv_cache, params.max_new_tokens)
            logits_BV = logits_NV[select_B]
            prompt_ids_BP = prompt_ids_NP[select_B]
            prompt_mask_BP = prompt_mask_NP[select_B]
            next_position_B1 = positions_NP[select_B, -1:] + 1
            attention_mask_BL = prompt_mask_BP
            batch = prompt_ids_BP.shape[0]
            eos_ids = torch.tensor(sorted(self.eos_token_ids), device=device, dtype=torch.long)

            tokens, logps, masks = [], [], []
            done_B = torch.zeros(batch, dtype=torch.bool, device=device)
            stopped_B = torch.zeros(batch, dtype=torch.bool, device=device)
            for position in range(params.max_new_tokens):
                if noise_BT is None:  # greedy decoding, for evaluation
                    logp_BV = torch.log_softmax(logits_BV.float(), dim=-1)
                    token_B = logp_BV.argmax(dim=-1)
                else:
                    scaled_BV = logits_BV.float() / params.temperature
                    logp_BV = torch.log_softmax(scaled_BV, dim=-1)
                    probs_BV = filter_logits(scaled_BV, params.top_k, params.top_p).softmax(dim=-1)
                    token_B = sample_from_uniform(probs_BV, noise_BT[:, position])
                token_B = torch.where(done_B, self.pad_token_id, token_B)
                tokens.append(token_B)
                logps.append(
                    torch.where(done_B, 0.0, logp_BV.gather(1, token_B[:, None]).squeeze(1))
                )
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
                logits_BV = model(
                    input_ids=token_B[:, None],
                    attention_mask=attention_mask_BL,
                    position_ids=next_position_B1,
                    use_cache=True,
                    **{cache_name: kv_cache},
                ).logits[:, -1, :]
                next_position_B1 = next_position_B1 + 1
            return Rollout(
                prompt_ids_BP=prompt_ids_BP,
                prompt_mask_BP=prompt_mask_BP,
                completion_ids_BT=torch.stack(tokens, dim=1),
                completion_mask_BT=torch.stack(masks, dim=1),
                sampler_logp_BT=torch.stack(logps, dim=1),
                stopped_B=stopped_B,
            )
        finally:
            model.train(was_training)

    def _hits_stop_string(
        self, tokens: list[torch.Tensor], done_B: torch.Tensor, stop_strings: tuple[str, ...]
    ) -> torch.Tensor:
        ids_BT = torch.stack(tokens, dim=1).tolist()
        hits = [
            (not done) and any(s in self.decode(row) for s in stop_strings)
            for row, done in zip(ids_BT, done_B.tolist(), strict=True)
        ]
        return torch.tensor(hits, dtype=torch.bool, device=done_B.device)


def _concat_rollouts(chunks: list[Rollout], pad_id: int) -> Rollout:
    if len(chunks) == 1:
        return chunks[0]

    def pad_to(t: torch.Tensor, width: int, value: float, left: bool) -> torch.Tensor:
        extra = width - t.shape[1]
        if extra == 0:
            return t
        filler = torch.full((t.shape[0], extra), value, dtype=t.dtype, device=t.device)
        return torch.cat([filler, t] if left else [t, filler], dim=1)

    p = max(c.prompt_ids_BP.shape[1] for c in chunks)
    t = max(c.completion_ids_BT.shape[1] for c in chunks)
    return Rollout(
        prompt_ids_BP=torch.cat([pad_to(c.prompt_ids_BP, p, pad_id, True) for c in chunks]),
        prompt_mask_BP=torch.cat([pad_to(c.prompt_mask_BP, p, 0, True) for c in chunks]),
        completion_ids_BT=torch.cat(
            [pad_to(c.completion_ids_BT, t, pad_id, False) for c in chunks]
        ),
        completion_mask_BT=torch.cat([pad_to(c.completion_mask_BT, t, 0, False) for c in chunks]),
        sampler_logp_BT=torch.cat([pad_to(c.sampler_logp_BT, t, 0.0, False) for c in chunks]),
        stopped_B=torch.cat([c.stopped_B for c in chunks]),
    )
