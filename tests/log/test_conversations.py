"""completions.jsonl's conversation fields and token ids, and how the report shows them."""

import json

import torch

from grpo.log.conversations import message_label, token_id_fields, transcript
from grpo.log.metrics import MetricsLog, markdown_table
from grpo.log.samples import conversation_html
from grpo.rewards import RewardScores
from grpo.rollout.engine import Rollout

PAD = 0
CONVERSATION = [
    {"role": "user", "content": "2+2?", "author": "dataset"},
    {"role": "assistant", "content": "<tool_call>x</tool_call>", "author": "model"},
    {"role": "tool", "name": "add", "content": "4", "author": "tool"},
    {"role": "assistant", "content": "4", "author": "model"},
    {"role": "user", "content": "right", "author": "environment"},
]


def _rollout(multi_turn: bool) -> Rollout:
    """Two rows: prompts [5, 6] and [7] (left-padded); row 0's completion is model 11,
    inserted 21 22, model 12 (multi-turn), row 1's is model 13 (right-padded)."""
    completion_ids = torch.tensor([[11, 21, 22, 12], [13, PAD, PAD, PAD]])
    real = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]])
    return Rollout(
        prompt_ids_BP=torch.tensor([[5, 6], [PAD, 7]]),
        prompt_mask_BP=torch.tensor([[1, 1], [0, 1]]),
        completion_ids_BT=completion_ids,
        completion_mask_BT=torch.tensor([[1, 0, 0, 1], [1, 0, 0, 0]]) if multi_turn else real,
        sampler_logp_BT=torch.zeros(2, 4),
        stopped_B=torch.tensor([True, True]),
        attention_mask_BT=real if multi_turn else None,
    )


def test_token_ids_leave_out_padding_and_mark_the_models_tokens() -> None:
    assert token_id_fields(_rollout(multi_turn=True)) == [
        {"prompt_ids": [5, 6], "completion_ids": [11, 21, 22, 12], "model_mask": [1, 0, 0, 1]},
        {"prompt_ids": [7], "completion_ids": [13], "model_mask": [1]},
    ]
    single = token_id_fields(_rollout(multi_turn=False))  # every completion id is the model's
    assert single[0]["completion_ids"] == [11, 21, 22, 12] and single[0]["model_mask"] == [1] * 4


def _log_one_step(tmp_path, token_ids: bool) -> list[dict]:
    tmp_path.mkdir()
    log = MetricsLog(tmp_path, tensorboard=False, completions_every=1, token_ids=token_ids)
    scores = RewardScores(
        total_B=torch.tensor([1.0, 0.0]),
        per_function={"acc": torch.tensor([1.0, 0.0])},
        skip_B=torch.zeros(2, dtype=torch.bool),
        metrics={},
    )
    columns = {
        "answer": ["4", "4"],  # a dataset column: not copied to the log
        "conversation": [CONVERSATION, CONVERSATION[:2]],
        "rendered_prompt": ["u:2+2?\na:", "u:2+2?\na:"],
        "turn_tokens": [[[3, 2], [1, 0]], [[1, 0]]],
    }
    log.completions(
        3,
        ["2+2?", "2+2?"],
        ["<tool_call>x</tool_call>\n4", "<tool_call>x</tool_call>"],
        scores,
        torch.tensor([1.0, -1.0]),
        columns=columns,
        rollout=_rollout(multi_turn=True),
    )
    return [json.loads(line) for line in (tmp_path / "completions.jsonl").read_text().splitlines()]


def test_the_completion_table_holds_the_conversation_and_with_the_flag_the_ids(tmp_path) -> None:
    rows = _log_one_step(tmp_path / "ids", token_ids=True)
    assert rows[0] == {
        "step": 3,
        "prompt": "2+2?",
        "completion": "<tool_call>x</tool_call>\n4",
        "reward": 1.0,
        "rewards": {"acc": 1.0},
        "advantage": 1.0,
        "rendered_prompt": "u:2+2?\na:",
        "conversation": CONVERSATION,
        "turn_tokens": [[3, 2], [1, 0]],
        "prompt_ids": [5, 6],
        "completion_ids": [11, 21, 22, 12],
        "model_mask": [1, 0, 0, 1],
    }
    assert rows[1]["model_mask"] == [1]
    without = _log_one_step(tmp_path / "plain", token_ids=False)
    assert [
        {k: v for k, v in row.items() if "_ids" not in k and k != "model_mask"} for row in rows
    ] == without


def test_tables_for_tensorboard_and_trackers_show_the_labelled_conversation() -> None:
    row = {"prompt": "2+2?", "completion": "4", "reward": 1.0, "rewards": {}, "advantage": 0.0}
    assert transcript(row) == "4"  # single-turn: the completion
    row["conversation"] = CONVERSATION
    assert transcript(row).splitlines() == [
        "[dataset (user)] 2+2?",
        "[model (assistant)] <tool_call>x</tool_call>",
        "[tool add] 4",
        "[model (assistant)] 4",
        "[environment (user)] right",
    ]
    assert (
        markdown_table([row])
        .splitlines()[2]
        .startswith(
            "| 2+2? | [dataset (user)] 2+2?<br>[model (assistant)] <tool_call>x</tool_call><br>"
        )
    )
    assert message_label({"role": "system", "content": "boom", "author": "grpo"}) == "grpo (system)"


def test_a_conversation_is_shown_by_author_escaped_with_turn_counts() -> None:
    row = {
        "reward": 1.0,
        "rewards": {"acc": 1.0},
        "advantage": -0.5,
        "rendered_prompt": "<bos>u:2+2?\na:",
        "conversation": [*CONVERSATION, {"role": "user", "content": "?", "author": "someone"}],
        "turn_tokens": [[3, 2], [1, 5]],
    }
    page = conversation_html(row)
    assert page.startswith(
        '<div class="conversation"><p class="meta">reward 1, acc 1 · advantage -0.5</p>'
        "<details><summary>rendered prompt (as the model read it)</summary>"
        "<pre>&lt;bos&gt;u:2+2?\na:</pre></details>"
    )
    assert (
        '<div class="msg author-model"><div class="who">model (assistant) · turn 1: 3 tokens '
        "sampled, 2 inserted after</div><pre>&lt;tool_call&gt;x&lt;/tool_call&gt;</pre></div>"
        in page
    )
    assert "turn 2: 1 tokens sampled, 5 inserted after" in page
    assert '<div class="msg author-tool"><div class="who">tool add</div><pre>4</pre>' in page
    assert '<div class="msg author-other"><div class="who">someone (user)</div>' in page
