"""Rollouts: G sampled completions per prompt, as token ids, masks and sampler log-probs.

The interface (:class:`RolloutEngine`) works on token ids so that engines are swappable
(the built-in transformers engine here; vLLM in ``grpo.vllm_engine``). Rows are grouped:
row b belongs to prompt b // G.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

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
    ) -> Rollout: ...

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


class TransformersEngine:
    """Samples from the policy itself with a KV cache; no second copy of the weights.

    Each prompt is prefilled once and its cache repeated G times, so the prompt costs one
    forward pass per group rather than G.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        pad_token_id: int,
        eos_token_ids: set[int],
        decode=None,
        max_sequences_per_batch: int = 512,
    ) -> None:
        self.model = model
        self.pad_token_id = pad_token_id
        self.eos_token_ids = eos_token_ids
        self.decode = decode  # list[int] -> str, needed only for stop strings
        self.max_sequences_per_batch = max_sequences_per_batch

    def sync_weights(self, model: nn.Module) -> None:
        self.model = model

    def generate(
        self,
        prompt_token_ids: list[list[int]],
        group_size: int,
        params: SamplingParams,
        generator: torch.Generator | None = None,
    ) -> Rollout:
        if params.stop_strings and self.decode is None:
            raise ValueError("stop_strings need a decode function")
        prompts_per_chunk = max(1, self.max_sequences_per_batch // group_size)
        chunks = [
            self._generate_chunk(
                prompt_token_ids[i : i + prompts_per_chunk], group_size, params, generator
            )
            for i in range(0, len(prompt_token_ids), prompts_per_chunk)
        ]
        return _concat_rollouts(chunks, self.pad_token_id)

    @torch.no_grad()
    def _generate_chunk(
        self,
        prompts: list[list[int]],
        group_size: int,
        params: SamplingParams,
        generator: torch.Generator | None,
    ) -> Rollout:
        model = self.model
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
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
            kv_cache.batch_repeat_interleave(group_size)
            logits_BV = logits_NV.repeat_interleave(group_size, dim=0)
            prompt_ids_BP = prompt_ids_NP.repeat_interleave(group_size, dim=0)
            prompt_mask_BP = prompt_mask_NP.repeat_interleave(group_size, dim=0)
            next_position_B1 = positions_NP[:, -1:].repeat_interleave(group_size, dim=0) + 1
            attention_mask_BL = prompt_mask_BP
            batch = prompt_ids_BP.shape[0]
            eos_ids = torch.tensor(sorted(self.eos_token_ids), device=device, dtype=torch.long)

            tokens, logps, masks = [], [], []
            done_B = torch.zeros(batch, dtype=torch.bool, device=device)
            stopped_B = torch.zeros(batch, dtype=torch.bool, device=device)
            for _ in range(params.max_new_tokens):
                if params.temperature == 0:  # greedy decoding, for evaluation
                    logp_BV = torch.log_softmax(logits_BV.float(), dim=-1)
                    token_B = logp_BV.argmax(dim=-1)
                else:
                    scaled_BV = logits_BV.float() / params.temperature
                    logp_BV = torch.log_softmax(scaled_BV, dim=-1)
                    probs_BV = filter_logits(scaled_BV, params.top_k, params.top_p).softmax(dim=-1)
                    token_B = torch.multinomial(probs_BV, 1, generator=generator).squeeze(1)
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
                if bool(done_B.all()):
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
