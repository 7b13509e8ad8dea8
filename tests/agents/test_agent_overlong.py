"""DAPO's overlong shaping on multi-turn trajectories: the cap is per turn, so the length
that counts is a row's longest model turn; inserted tool/environment tokens do not count
and do not join two turns into one."""

from __future__ import annotations

import pytest
import torch

from grpo.rollout.turns import Trajectory, TurnOutput, assemble_trajectories
from grpo.rounds.source import model_turn_lengths, with_overlong_penalty


def _trajectory(turns: list[int], inserted: list[int]) -> Trajectory:
    """Model turns of the given lengths (ids 1), each but the last followed by inserted ids (2)."""
    trajectory = Trajectory(prompt_ids=[7, 7])
    for index, length in enumerate(turns):
        trajectory.add_turn(TurnOutput([1] * length, [-1.0] * length, True))
        if index < len(inserted):
            trajectory.add_inserted([2] * inserted[index])
    return trajectory


def test_the_penalty_counts_the_longest_model_turn_only() -> None:
    # rollout.max_new_tokens = 10 per turn, buffer 4 (free up to 6), penalty 0.5:
    #   row 0: turns of 5 and 7 around 20 inserted tokens: longest 7 → −0.5·(7 − 6)/4 = −0.125
    #   row 1: turns of 6, 6 and 6 (18 model tokens, over the cap of one turn) around 30
    #          inserted ones: longest 6 → 0
    #   row 2: one turn of 10 (cut at the cap): −0.5
    #   row 3: turns of 3 and 3 with nothing inserted between them: one run of 6 → 0
    rollout = assemble_trajectories(
        [
            _trajectory([5, 7], [20]),
            _trajectory([6, 6, 6], [15, 15]),
            _trajectory([10], []),
            _trajectory([3, 3], [0]),
        ],
        pad_token_id=0,
        device=torch.device("cpu"),
    )
    turn_length_B = model_turn_lengths(rollout)
    assert turn_length_B is not None and turn_length_B.tolist() == [7, 6, 10, 6]
    results = {
        "reward_B": torch.ones(4),
        "skip_B": torch.zeros(4, dtype=torch.bool),
        "length_B": rollout.completion_mask_BT.sum(dim=1),
        "truncated_B": torch.zeros(4, dtype=torch.bool),
        "env_tokens_B": rollout.real_mask_BT.sum(dim=1) - rollout.completion_mask_BT.sum(dim=1),
        "turn_length_B": turn_length_B,
    }
    assert results["length_B"].tolist() == [12, 18, 10, 6]  # totals: not what the cap is on
    shaped = with_overlong_penalty(results, max_length=10, buffer=4, penalty=0.5)
    assert shaped["overlong_penalty_B"].tolist() == [-0.125, 0.0, -0.5, 0.0]
    assert shaped["reward_B"].tolist() == [0.875, 1.0, 0.5, 1.0]


def test_single_turn_rows_keep_their_completion_length() -> None:
    results = {
        "reward_B": torch.zeros(2),
        "skip_B": torch.zeros(2, dtype=torch.bool),
        "length_B": torch.tensor([7, 10]),
        "truncated_B": torch.zeros(2, dtype=torch.bool),
    }
    shaped = with_overlong_penalty(results, max_length=10, buffer=4, penalty=1.0)
    assert shaped["overlong_penalty_B"].tolist() == [-0.25, -1.0]


def test_multi_turn_rows_without_their_turn_lengths_are_refused() -> None:
    """Their total model tokens against a one-turn cap would punish every long trajectory."""
    results = {
        "reward_B": torch.zeros(1),
        "skip_B": torch.zeros(1, dtype=torch.bool),
        "length_B": torch.tensor([12]),
        "truncated_B": torch.zeros(1, dtype=torch.bool),
        "env_tokens_B": torch.tensor([20]),
    }
    with pytest.raises(ValueError, match="turn_length_B"):
        with_overlong_penalty(results, max_length=10, buffer=4, penalty=1.0)


def test_a_produced_multi_turn_round_is_shaped_by_its_longest_model_turn(
    ascii_model_dir,
) -> None:
    """The round's path: a multi-turn producer, its rewards, the gathered results. Every row
    calls ``add`` (a 70-token turn with its EOS), reads the result (inserted) and answers
    "3" (2 tokens): longest turn 70, 72 model tokens. Cap 80, buffer 16 (free up to 64),
    penalty 1: −(70 − 64)/16 = −0.375 per row (its total, 72, would give −0.5)."""
    from transformers import AutoModelForCausalLM

    from grpo.agents.chat import ChatFormat
    from grpo.agents.parser import parse_xml_json
    from grpo.agents.tools import tool_schema
    from grpo.agents.trajectories import AgentSettings
    from grpo.data.dataset import PromptDataset
    from grpo.rewards.runner import RewardFunction
    from grpo.rollout.engine import SamplingParams
    from grpo.rounds.source import MultiTurn, RoundMaker, gather_rows, produce_and_score
    from grpo.runtime.distributed import Dist

    from .conftest import ScriptedEngine, ascii_tokenizer
    from .test_agent_training import add

    tokenizer = ascii_tokenizer()
    call = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
    assert len(call) + 1 == 70
    engine = ScriptedEngine(
        tokenizer, AutoModelForCausalLM.from_pretrained(ascii_model_dir), [call, "3"]
    )
    settings = AgentSettings(
        chat=ChatFormat(tokenizer, [tool_schema(add)]),
        tools={"add": add},
        parser=parse_xml_json,
        max_turns=2,
    )
    dataset = PromptDataset("inline", ["1+2?"], [tokenizer("1+2?")["input_ids"]], {})
    producer = MultiTurn(engine, SamplingParams(max_new_tokens=80), None, dataset, settings)
    rewards = [RewardFunction(name="zero", fn=lambda prompts, completions, **_: [0.0] * 2)]
    maker = RoundMaker(
        producer, engine, torch.Generator(), rewards, None, 0, 80, 16, 1.0
    )  # max_new_tokens 80, overlong_buffer 16, overlong_penalty 1
    seconds = {"rollout": 0.0, "reward": 0.0}
    local = produce_and_score(maker, [0], 2, slice(0, 2), Dist(), seconds)
    assert local.local_rollout.completion_mask_BT.sum(dim=1).tolist() == [72, 72]
    round_ = gather_rows(maker, local, Dist())
    assert round_.overlong_penalty_B.tolist() == [-0.375, -0.375]
    assert round_.reward_B.tolist() == [-0.375, -0.375]
