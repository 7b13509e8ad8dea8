"""The built-in rollout engine: sampling from the policy itself with a KV cache.

It samples by inverse CDF from uniforms drawn up front for the *whole* step (see
:mod:`grpo.rollout.engine`), so a row's tokens depend on its global index only, not on how
rows are split across processes or generation chunks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch
from torch import nn

from grpo.rollout.engine import (
    Rollout,
    RolloutEngine,
    RolloutRequest,
    SamplingParams,
    concat_rollouts,
    next_token,
    sampling_noise,
)
from grpo.rollout.hf_compiled import CompiledDecode, compilable
from grpo.rollout.hf_prefill import Prefill, decoded_rollout, prefill_prompts
from grpo.rollout.hf_turns import HFTurnSession
from grpo.rollout.stop_strings import STOP_CHECK_EVERY, cut_after, first_stops
from grpo.rollout.turns import TurnEngine, TurnSession

if TYPE_CHECKING:
    from transformers import DynamicCache


@dataclass
class _LiveRows:
    """The rows still decoding: their index in the outputs (``row_B``) and their state."""

    row_B: torch.Tensor
    done_B: torch.Tensor
    mask_BL: torch.Tensor  # the prompt's mask, then ones for every completion position
    position_B1: torch.Tensor
    noise_BT: torch.Tensor | None

    def keep(self, keep_B: torch.Tensor, kv_cache: DynamicCache) -> None:
        """Keep only the rows ``keep_B``, in the KV cache too."""
        self.row_B, self.done_B = self.row_B[keep_B], self.done_B[keep_B]
        self.mask_BL, self.position_B1 = self.mask_BL[keep_B], self.position_B1[keep_B]
        if self.noise_BT is not None:
            self.noise_BT = self.noise_BT[keep_B]
        kv_cache.batch_select_indices(keep_B.nonzero().flatten())


class _StopLooks:
    """The decode loop's looks for stop strings (:mod:`grpo.rollout.stop_strings`): the rows
    still open at the previous look, and where that look was."""

    def __init__(self, stop_strings: tuple[str, ...], stopped_B: torch.Tensor) -> None:
        self.stop_strings, self.since = stop_strings, 0
        self.open_B = ~stopped_B

    def look(
        self, engine: TransformersEngine, position: int, live: _LiveRows, outputs: tuple
    ) -> None:
        """Cut the rows that hit a stop string since the last look; they leave the batch at
        the next host look, as rows that ended on EOS."""
        tokens_BT, logps_BT, masks_BT, stopped_B = outputs
        rows = self.open_B.nonzero().flatten().tolist()
        stops = first_stops(engine.decode, tokens_BT, masks_BT, rows, self.since, self.stop_strings)
        cut_after(stops, engine.pad_token_id, tokens_BT, logps_BT, masks_BT, stopped_B)
        if stops:
            live.done_B = live.done_B | torch.isin(live.row_B, torch.tensor(list(stops)))
        self.open_B, self.since = ~stopped_B, position + 1


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
        compile: bool | Literal["auto"] = False,
    ) -> None:
        self.model = model
        self.pad_token_id = pad_token_id
        self.eos_token_ids = eos_token_ids
        self.decode = decode  # list[int] -> str, needed only for stop strings
        self.max_sequences_per_batch = max_sequences_per_batch
        self.all_done = all_done
        self.compiled = _compiled_decode(compile, model, all_done is not None)

    @property
    def compile_seconds(self) -> float:
        """Seconds spent compiling the decode step so far (0 when it is not compiled)."""
        return 0.0 if self.compiled is None else self.compiled.compile_seconds

    @property
    def device(self) -> torch.device:
        """The policy's device: where it samples and where its rollouts' tensors live."""
        return next(self.model.parameters()).device

    def sync_weights(self, model: nn.Module) -> None:
        self.model = model

    @torch.no_grad()
    def generate_rows(self, request: RolloutRequest) -> Rollout:
        """The request's rows in chunks of ``max_sequences_per_batch``; each distinct prompt
        of a chunk is prefilled once."""
        model, params = self.model, request.params
        if params.stop_strings and self.decode is None:
            raise ValueError("stop_strings need a decode function")
        noise_BT = None
        if params.temperature > 0:  # drawn for every row of the step, whatever the rows are
            noise_BT = sampling_noise(
                request.total_rows, params.max_new_tokens, request.generator, self.device
            )
        compiled = self.compiled is not None and not params.stop_strings
        chunks = []
        was_training = model.training
        model.eval()
        try:
            for first in range(request.start, request.stop, self.max_sequences_per_batch):
                end = min(first + self.max_sequences_per_batch, request.stop)
                chunk_noise_BT = None if noise_BT is None else noise_BT[first:end]
                prefill = prefill_prompts(
                    model, self.pad_token_id, request, first, end, preallocate=not compiled
                )
                if compiled:
                    chunks.append(
                        self.compiled.decode(
                            model,
                            prefill,
                            params,
                            chunk_noise_BT,
                            self.eos_token_ids,
                            self.pad_token_id,
                        )
                    )
                else:
                    chunks.append(self._decode(prefill, params, chunk_noise_BT))
        finally:
            model.train(was_training)
        return concat_rollouts(chunks, self.pad_token_id)

    def start_turns(self, request: RolloutRequest, max_model_tokens: int) -> TurnSession:
        """Multi-turn sampling that continues from the KV cache (:mod:`grpo.rollout.hf_turns`)."""
        return HFTurnSession(self, request, max_model_tokens)

    def _decode(
        self, prefill: Prefill, params: SamplingParams, noise_BT: torch.Tensor | None
    ) -> Rollout:
        """Sample token after token until every row ended or max_new_tokens is reached.

        Per-token overhead is what limits decoding small batches, so: outputs are written in
        place into (B, T) buffers and the attention mask is allocated once and sliced; the
        host looks at which rows ended every ``sync_every`` tokens only (1 on a CPU, where a
        look is free and ended rows leave sooner; 8 on a GPU, where it stalls the launch
        queue), for stop strings every 8 (:mod:`grpo.rollout.stop_strings`); ended rows then
        leave the batch, KV cache and noise. A row's tokens are those of the plain loop.
        """
        width, logits_BV = params.max_new_tokens, prefill.logits_BV
        rows, device = logits_BV.shape[0], logits_BV.device
        prompt_width = prefill.prompt_mask_BP.shape[1]
        eos_ids = torch.tensor(sorted(self.eos_token_ids), device=device, dtype=torch.long)
        tokens_BT = torch.full((rows, width), self.pad_token_id, dtype=torch.long, device=device)
        logps_BT = torch.zeros((rows, width), dtype=torch.float32, device=device)
        masks_BT = torch.zeros((rows, width), dtype=torch.long, device=device)
        stopped_B = torch.zeros(rows, dtype=torch.bool, device=device)
        live = _LiveRows(
            row_B=torch.arange(rows, device=device),
            done_B=torch.zeros(rows, dtype=torch.bool, device=device),
            mask_BL=torch.cat([prefill.prompt_mask_BP, masks_BT.new_ones(rows, width)], dim=1),
            position_B1=prefill.next_position_B1,
            noise_BT=noise_BT,
        )
        sync_every = 1 if device.type == "cpu" else 8
        outputs = (tokens_BT, logps_BT, masks_BT, stopped_B)
        stops = _StopLooks(params.stop_strings, stopped_B) if params.stop_strings else None
        for position in range(width):
            noise_B = None if live.noise_BT is None else live.noise_BT[:, position]
            token_B, logp_B = next_token(logits_BV, noise_B, params)
            token_B = token_B.masked_fill(live.done_B, self.pad_token_id)
            tokens_BT[live.row_B, position] = token_B
            logps_BT[live.row_B, position] = logp_B.masked_fill(live.done_B, 0.0)
            masks_BT[live.row_B, position] = (~live.done_B).long()
            ended_B = ~live.done_B & torch.isin(token_B, eos_ids)
            stopped_B[live.row_B] |= ended_B
            live.done_B = live.done_B | ended_B
            if stops and ((position + 1) % STOP_CHECK_EVERY == 0 or position == width - 1):
                stops.look(self, position, live, outputs)
            if position == width - 1:  # the last token needs no forward
                break
            if (position + 1) % sync_every == 0 and self._stop_or_compact(live, prefill):
                if stops:  # the rows that ended since the last look may have stopped earlier
                    stops.look(self, position, live, outputs)
                break
            logits_BV = self.model(
                input_ids=tokens_BT[live.row_B, position, None],
                attention_mask=live.mask_BL[:, : prompt_width + position + 1],
                position_ids=live.position_B1,
                use_cache=True,
                **{prefill.cache_name: prefill.kv_cache},
            ).logits[:, -1, :]
            live.position_B1 = live.position_B1 + 1
        return decoded_rollout(prefill, tokens_BT, masks_BT, logps_BT, stopped_B)

    def _stop_or_compact(self, live: _LiveRows, prefill: Prefill) -> bool:
        """True when decoding may stop; else the ended rows leave the batch."""
        finished = bool(live.done_B.all())
        if self.all_done is not None:  # FSDP: every process runs the same forwards, all rows
            return self.all_done(finished)
        if finished:
            return True
        if bool(live.done_B.any()):
            live.keep(~live.done_B, prefill.kv_cache)
        return False


def _compiled_decode(
    compile: bool | Literal["auto"], model: nn.Module, fsdp: bool
) -> CompiledDecode | None:
    """``rollout.compile``: True compiles the decode step (an error where it cannot);
    "auto" only on CUDA, where CUDA graphs remove the per-token launches (on a CPU the
    benchmark shows too little gain for the compile time: benchmarks/RESULTS.md); False
    never."""
    if compile is False:
        return None
    if compile not in (True, "auto"):
        raise ValueError(f'rollout.compile must be true, false or "auto", got {compile!r}')
    device = next(model.parameters()).device
    reason = "an FSDP-sharded model decodes in lockstep, eagerly" if fsdp else compilable(model)
    if compile == "auto":
        return CompiledDecode(cuda_graphs=True) if device.type == "cuda" and not reason else None
    if reason:
        raise ValueError(f"rollout.compile = true: cannot compile this model's decode: {reason}")
    return CompiledDecode(cuda_graphs=device.type == "cuda")
