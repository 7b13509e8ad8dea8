"""Turn-by-turn sampling for the built-in engine, continuing from its KV cache.

The session keeps one KV cache for its live rows. A turn (:meth:`HFTurnSession.generate`)
first feeds each row's new tokens (the environment's insertion, after any token the model
sampled last and the cache has not seen yet) in one forward pass on top of the cache:
only the new tokens are computed, never the history again. Rows of different lengths sit
side by side with *holes*: a row with fewer new tokens than the widest, or one whose turn
ended while others still decode, gets padding slots with attention mask 0, and its
position ids count its real tokens only, so every row sees exactly its own sequence, as
the trainer's forward pass over the assembled trajectory will. Rows a turn leaves out are
dropped from the cache: finished trajectories cost nothing more.

Sampling uses the engine's inverse-CDF draw from uniforms ``u[b, t]`` drawn up front for
every row of the step and every model token it may sample (``t`` counts the row's model
tokens over all its turns), so a row's tokens depend on its global index only.

``reuse_cache=False`` recomputes each turn from scratch (the whole history prefilled
again): the baseline of ``benchmarks/multi_turn_rollout.py``.

With the engine's ``all_done`` set (an FSDP-sharded policy) every forward pass is voted on
by all processes and run by all of them (:mod:`grpo.rollout.lockstep`): a turn decodes
until every process's rows have ended it, and a closed session joins the others' passes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import torch
from torch import nn

from grpo.algo.groups import group_of
from grpo.models.logprobs import positions_from_mask
from grpo.rollout import lockstep
from grpo.rollout.engine import RolloutRequest, left_pad, next_token, sampling_noise
from grpo.rollout.hf_prefill import prefill_prompts
from grpo.rollout.turns import TurnOutput, TurnSession, check_turn_rows

if TYPE_CHECKING:
    from transformers import DynamicCache


class HFSessionEngine(Protocol):
    """What a session uses of the built-in engine (``TransformersEngine``)."""

    model: nn.Module
    pad_token_id: int
    eos_token_ids: set[int]
    decode: Callable[[list[int]], str] | None  # ids → text; needed only for stop strings
    all_done: Callable[[bool], bool] | None  # FSDP: processes run every forward together

    @property
    def device(self) -> torch.device: ...


class HFTurnSession(TurnSession):
    """A :class:`TurnSession` on a ``TransformersEngine`` (see the module docstring)."""

    def __init__(
        self,
        engine: HFSessionEngine,
        request: RolloutRequest,
        max_model_tokens: int,
        reuse_cache: bool = True,
    ) -> None:
        self.engine, self.request, self.reuse_cache = engine, request, reuse_cache
        self.model = engine.model
        self.device = engine.device
        self.all_done = engine.all_done
        rows = request.stop - request.start
        self.noise_BT = None
        if request.params.temperature > 0:  # the whole step's noise, this block's rows
            noise = sampling_noise(
                request.total_rows, max_model_tokens, request.generator, self.device
            )
            self.noise_BT = noise[request.start : request.stop]
        self.max_model_tokens = max_model_tokens
        G = request.group_size
        prompts = request.prompt_token_ids
        self.history = [list(prompts[group_of(request.start + r, G)]) for r in range(rows)]
        self.live = list(range(rows))  # the session rows in the cache, in cache order
        self.sampled = [0] * rows  # model tokens sampled so far: the row's noise column
        self.pending: list[list[int]] = [[] for _ in range(rows)]  # sampled, not yet fed
        self.fed_widths: list[list[int]] = []  # real tokens each feeding pass computed, by row
        self.cache: DynamicCache | None = None  # made by the first turn's prefill
        self.cache_name = ""  # the model's keyword for the cache, known at the prefill
        self.mask_BL = torch.zeros(0)
        self.next_position_B = torch.zeros(0)
        self.logits_BV = torch.zeros(0)

    @torch.no_grad()
    def generate(
        self, rows: list[int], inserted: list[list[int]], max_new_tokens: list[int]
    ) -> list[TurnOutput]:
        if not rows:
            return []
        was_training = self.model.training
        self.model.eval()
        try:
            if self.cache is None:
                self._agree(need=True)
                self._prefill_prompts()
            elif not self.reuse_cache:
                self._agree(need=True)
                self._recompute(rows)
            self._select(rows)
            blocks = [self.pending[r] + list(ids) for r, ids in zip(rows, inserted, strict=True)]
            for row, ids in zip(rows, inserted, strict=True):
                self.history[row] += ids  # the pending token is in the history already
                self.pending[row] = []
            if self._agree(need=any(blocks)):
                if any(blocks):
                    self._feed(blocks)
                else:  # another process feeds its rows
                    self._idle_forward()
            return self._decode(max_new_tokens)
        finally:
            self.model.train(was_training)

    def context(self, row: int) -> list[int]:
        return self.history[row]  # every id fed to the cache, or waiting as the pending one

    def close(self) -> None:
        self.cache = None
        if self.all_done is not None:
            was_training = self.model.training
            self.model.eval()
            try:
                lockstep.wait_for_all(self.all_done, self._idle_forward)
            finally:
                self.model.train(was_training)

    # --- lockstep (FSDP) ---------------------------------------------------------------

    def _agree(self, need: bool) -> bool:
        """Whether a forward pass runs now: ``need`` alone, or in lockstep the processes' vote."""
        if self.all_done is None:
            return need
        return lockstep.vote(self.all_done, need=need) == lockstep.FORWARD

    def _idle_forward(self) -> None:
        lockstep.idle_forward(self.model, self.engine.pad_token_id, self.device)

    # --- the cache ---------------------------------------------------------------------

    def _prefill_prompts(self) -> None:
        """Turn 1: each distinct prompt once (:func:`prefill_prompts`), its cache per row."""
        request = self.request
        # No pre-allocated cache layers: rows are selected and turns grow it past any plan.
        prefill = prefill_prompts(
            self.model,
            self.engine.pad_token_id,
            request,
            request.start,
            request.stop,
            preallocate=False,
        )
        self.cache, self.cache_name = prefill.kv_cache, prefill.cache_name
        self.mask_BL = prefill.prompt_mask_BP
        self.next_position_B = prefill.next_position_B1[:, 0]
        self.logits_BV = prefill.logits_BV

    def _recompute(self, rows: list[int]) -> None:
        """The baseline: forget the cache and prefill each row's whole history again."""
        sequences = [self.history[r] for r in rows]
        for row in rows:
            self.pending[row] = []
        ids_BL, mask_BL = left_pad(sequences, self.engine.pad_token_id)
        ids_BL, mask_BL = ids_BL.to(self.device), mask_BL.to(self.device)
        from transformers import DynamicCache

        self.cache = DynamicCache()
        positions_BL = positions_from_mask(mask_BL)
        self.logits_BV = self._forward(ids_BL, mask_BL, positions_BL)[:, -1, :]
        self.mask_BL, self.next_position_B = mask_BL, positions_BL[:, -1] + 1
        self.live = list(rows)

    def _select(self, rows: list[int]) -> None:
        """Keep only ``rows`` in the cache (finished rows leave it for good)."""
        positions = check_turn_rows(rows, self.live)
        if len(positions) == len(self.live):
            return
        index_B = torch.tensor(positions, device=self.device)
        self.cache.batch_select_indices(index_B)
        self.mask_BL, self.logits_BV = self.mask_BL[index_B], self.logits_BV[index_B]
        self.next_position_B = self.next_position_B[index_B]
        self.live = list(rows)

    def _forward(
        self, ids_BU: torch.Tensor, mask_BL: torch.Tensor, positions_BU: torch.Tensor
    ) -> torch.Tensor:
        """The model on ``ids_BU`` after the cache (``mask_BL`` covers cache + new)."""
        return self.model(
            input_ids=ids_BU,
            attention_mask=mask_BL,
            position_ids=positions_BU,
            use_cache=True,
            **{self.cache_name: self.cache},
        ).logits

    def _feed(self, blocks: list[list[int]]) -> None:
        """One forward pass over each row's new tokens (left-aligned, padding masked)."""
        width = max(len(block) for block in blocks)
        rows = len(blocks)
        ids_BU = torch.full((rows, width), self.engine.pad_token_id, dtype=torch.long)
        mask_BU = torch.zeros((rows, width), dtype=torch.long)
        for row, block in enumerate(blocks):
            if block:
                ids_BU[row, : len(block)] = torch.tensor(block, dtype=torch.long)
                mask_BU[row, : len(block)] = 1
        ids_BU, mask_BU = ids_BU.to(self.device), mask_BU.to(self.device)
        positions_BU = self.next_position_B[:, None] + torch.arange(width, device=self.device)
        self.mask_BL = torch.cat([self.mask_BL, mask_BU], dim=1)
        logits_BUV = self._forward(ids_BU, self.mask_BL, positions_BU)
        lengths_B = mask_BU.sum(dim=1)
        last_B = (lengths_B - 1).clamp(min=0)
        new_logits_BV = logits_BUV[torch.arange(rows, device=self.device), last_B]
        self.logits_BV = torch.where((lengths_B > 0)[:, None], new_logits_BV, self.logits_BV)
        self.next_position_B = self.next_position_B + lengths_B
        self.fed_widths.append([len(block) for block in blocks])

    # --- decoding ----------------------------------------------------------------------

    def _decode(self, max_new_tokens: list[int]) -> list[TurnOutput]:
        """Sample one turn for every live row (holes for rows that ended before others)."""
        params, device, engine = self.request.params, self.device, self.engine
        live = self.live
        batch = len(live)
        budgets = [
            min(budget, self.max_model_tokens - self.sampled[r])
            for r, budget in zip(live, max_new_tokens, strict=True)
        ]
        budget_B = torch.tensor(budgets, device=device)
        count_B = torch.zeros(batch, dtype=torch.long, device=device)
        column_B = torch.tensor([self.sampled[r] for r in live], device=device)
        done_B = budget_B <= 0
        stopped_B = torch.zeros(batch, dtype=torch.bool, device=device)
        eos_ids = torch.tensor(sorted(engine.eos_token_ids), device=device, dtype=torch.long)
        turn: list[list[int]] = [[] for _ in live]
        logps: list[list[float]] = [[] for _ in live]
        logits_BV = self.logits_BV
        # In lockstep a turn runs until no process needs another pass (done_B bounds ours).
        steps = range(max(budgets, default=0)) if self.all_done is None else itertools.count()
        for _ in steps:
            noise_B = None
            if self.noise_BT is not None:
                index_B = torch.tensor(live, device=device)
                columns = (column_B + count_B).clamp(max=self.noise_BT.shape[1] - 1)
                noise_B = self.noise_BT[index_B, columns]
            token_B, picked_B = next_token(logits_BV, noise_B, params)
            active_B = ~done_B
            for b in active_B.nonzero().flatten().tolist():
                turn[b].append(int(token_B[b]))
                logps[b].append(float(picked_B[b]))
            count_B = count_B + active_B.long()
            ended_B = active_B & torch.isin(token_B, eos_ids)
            if params.stop_strings:
                ended_B |= active_B & self._hits_stop_string(turn, params.stop_strings, device)
            stopped_B |= ended_B
            done_B = done_B | ended_B | (count_B >= budget_B)
            if not self._agree(need=not bool(done_B.all())):
                # the tokens just sampled wait for the next turn's pass
                for b in active_B.nonzero().flatten().tolist():
                    self.pending[live[b]] = [turn[b][-1]]
                break
            feed_B = torch.where(active_B, token_B, engine.pad_token_id)
            self.mask_BL = torch.cat([self.mask_BL, active_B.long()[:, None]], dim=1)
            logits_BV = self._forward(feed_B[:, None], self.mask_BL, self.next_position_B[:, None])
            logits_BV = logits_BV[:, -1, :]
            self.next_position_B = self.next_position_B + active_B.long()
        self.logits_BV = logits_BV
        for b, row in enumerate(live):
            self.sampled[row] += len(turn[b])
            self.history[row] += turn[b]
        stopped = stopped_B.tolist()
        return [TurnOutput(turn[b], logps[b], stopped[b]) for b in range(batch)]

    def _hits_stop_string(
        self, turn: list[list[int]], stop_strings: tuple[str, ...], device: torch.device
    ) -> torch.Tensor:
        decode = self.engine.decode
        hits = [bool(ids) and any(s in decode(ids) for s in stop_strings) for ids in turn]
        return torch.tensor(hits, dtype=torch.bool, device=device)
