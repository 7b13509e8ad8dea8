"""Multi-turn rollouts on exact tokens: continuity, masks, normalizers and the KV cache."""

from __future__ import annotations

import torch

from grpo.agents.chat import ChatFormat
from grpo.agents.trajectories import AgentSettings, run_trajectories
from grpo.algo.kl import kl_penalty
from grpo.algo.losses import aggregate, policy_loss
from grpo.models.logprobs import completion_logprobs
from grpo.rollout.engine import SamplingParams

from .helpers import Echo, Spy, assert_scored_as_sampled, tiny_engine

RECORDS = [{"prompt": "12+3="}, {"prompt": "7*8="}]
# Many stop strings: most turns end after a few tokens, so rows take three turns.
PARAMS = SamplingParams(temperature=1.0, max_new_tokens=6, stop_strings=tuple("abcdefghijklmnop"))


def _three_turns(model_dir):
    engine, model, tokenizer = tiny_engine(model_dir)
    spy = Spy(engine)
    settings = AgentSettings(chat=ChatFormat(tokenizer, []), environment=Echo, max_turns=3)
    result = run_trajectories(
        spy, RECORDS, 2, PARAMS, torch.Generator().manual_seed(3), range(4), settings
    )
    return result, spy, model, tokenizer


def test_trained_ids_are_the_sampled_ids_plus_the_inserted_ids(tiny_model_dir) -> None:
    result, spy, model, _ = _three_turns(tiny_model_dir)
    expected = {row: ([], []) for row in range(4)}  # row → (ids, from-model mask)
    for rows, inserted, outputs, _ in spy.calls:
        for row, ids, output in zip(rows, inserted, outputs, strict=True):
            expected[row][0].extend(ids + output.token_ids)
            expected[row][1].extend([0] * len(ids) + [1] * len(output.token_ids))
    rollout = result.rollout
    assert len(spy.calls) == 3 and len(spy.calls[2][0]) >= 1  # some row had three turns
    for row, (ids, mask) in expected.items():
        length = len(ids)
        assert rollout.completion_ids_BT[row, :length].tolist() == ids  # byte for byte
        assert rollout.completion_mask_BT[row].tolist() == mask + [0] * (
            rollout.completion_ids_BT.shape[1] - length
        )
        assert rollout.attention_mask_BT[row].sum() == length
    # The KV-cached turns saw exactly the sequence the trainer scores: same log-probs.
    assert_scored_as_sampled(model, rollout)
    assert result.metrics["agent/turns/mean"] == sum(len(c[0]) for c in spy.calls) / 4
    inserted = int((rollout.attention_mask_BT - rollout.completion_mask_BT).sum())
    assert result.metrics["agent/env_token_frac"] == inserted / int(rollout.attention_mask_BT.sum())


def test_gradients_at_environment_positions_are_exactly_zero(tiny_model_dir) -> None:
    result, _, model, _ = _three_turns(tiny_model_dir)
    rollout = result.rollout
    env_BT = (rollout.attention_mask_BT == 1) & (rollout.completion_mask_BT == 0)
    assert env_BT.any()
    for chunked in (True, False):
        logp_BT, _ = completion_logprobs(
            model,
            rollout.prompt_ids_BP,
            rollout.prompt_mask_BP,
            rollout.completion_ids_BT,
            rollout.completion_mask_BT,
            attention_mask_BT=rollout.attention_mask_BT,
            chunked=chunked,
        )
        logp_BT.retain_grad()
        mask_BT = rollout.completion_mask_BT
        loss, _ = policy_loss(
            logp_BT, logp_BT.detach(), torch.tensor([1.0, -1.0, 0.5, 2.0]), mask_BT
        )
        kl = aggregate(kl_penalty(logp_BT, logp_BT.detach() - 0.1), mask_BT)
        (loss + 0.04 * kl).backward()
        assert (logp_BT.grad[env_BT] == 0).all()
        assert (logp_BT.grad[mask_BT.bool()] != 0).any()


def test_sequence_normalizer_counts_model_tokens_only() -> None:
    # Row 0: 3 model tokens and 2 inserted; row 1: 1 model token and 3 inserted.
    mask_BT = torch.tensor([[1, 1, 0, 0, 1], [1, 0, 0, 0, 0]])
    logp_BT = torch.zeros(2, 5, requires_grad=True)
    loss, _ = policy_loss(logp_BT, logp_BT.detach(), torch.tensor([1.0, 2.0]), mask_BT)
    loss.backward()
    # On-policy ρ = 1: ∂loss/∂logp_it = −A_i / (B·|y_i|), |y_0| = 3, |y_1| = 1 (not 5, 4).
    expected = torch.tensor([[-1 / 6, -1 / 6, 0.0, 0.0, -1 / 6], [-2 / 2, 0.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(logp_BT.grad, expected)
    torch.testing.assert_close(loss, torch.tensor(-1.5))  # −(1·3/3 + 2·1/1)/2


def test_a_turn_prefills_only_its_new_tokens(tiny_model_dir) -> None:
    result, spy, _, _ = _three_turns(tiny_model_dir)
    prompt_width = result.rollout.prompt_ids_BP.shape[1]
    for turn, (rows, inserted, _, forwards) in enumerate(spy.calls):
        if turn == 0:
            assert forwards[0][1] == prompt_width  # the prompts, prefilled once
            continue
        # The insertion, after the row's last sampled token when no decoding pass fed it
        # (rows that ended on the turn's last step): nothing of the history again.
        new_widths = spy.session.fed_widths[turn - 1]
        assert all(w - len(ids) in (0, 1) for w, ids in zip(new_widths, inserted, strict=True))
        assert forwards[0] == (len(rows), max(new_widths))
        assert all(shape == (len(rows), 1) for shape in forwards[1:])  # decoding
