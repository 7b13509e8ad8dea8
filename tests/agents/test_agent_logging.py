"""What an agent run logs of its trajectories: completions.jsonl holds the conversation
(who wrote each message), the rendered prompt and the per-turn token counts, and with
train.log_token_ids the very ids the update trained on; the report shows it all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from grpo.config import load_config
from grpo.log.metrics import read_completions
from tests.user_code.user_rewards import digit_fraction

from .helpers import Echo

CALL = '<tool_call>{"name":"mul","arguments":{"a":47,"b":38}}</tool_call>'


class Recheck:
    """Opens with the problem, asks once "sure?", then rewards the repeated answer."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.prompt, self.answer, self.asked = row["prompt"], row["answer"], False

    def reset(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": self.prompt}]

    def step(self, text: str) -> tuple[str | None, float | None, bool]:
        if not self.asked:
            self.asked = True
            return "sure?", None, False
        return None, float(text == self.answer), True


def _overfit_tools_model(directory: Path) -> None:
    """The tools demo's tokenizer and a tiny model trained on one trajectory until greedy
    decoding replays it: a call to mul, the result copied, the answer repeated."""
    from grpo.demo.model import build_tiny_llama
    from grpo.demo.tools_task import build_tools_tokenizer, tools_chat
    from grpo.demo.warm_start import supervised_steps

    tokenizer = build_tools_tokenizer()
    chat, eos = tools_chat(tokenizer), tokenizer.eos_token_id
    parts = [
        (chat.prompt_ids([{"role": "user", "content": "47*38"}]), 0),
        ([*chat.encode(CALL), eos], 1),
        (chat.insertion_ids([{"role": "tool", "name": "mul", "content": "1786"}]), 0),
        ([*chat.encode("1786"), eos], 1),
        (chat.insertion_ids([{"role": "user", "content": "sure?"}]), 0),
        ([*chat.encode("1786"), eos], 1),
    ]
    ids = [i for part, _ in parts for i in part]
    mask = [flag for part, flag in parts for _ in part]
    torch.manual_seed(0)
    model = build_tiny_llama(tokenizer, hidden_size=64, layers=2, heads=2)
    losses = supervised_steps(
        model, [(ids, mask)], tokenizer.pad_token_id, steps=150, batch_size=1, lr=5e-3
    )
    assert losses[-1] < 0.01
    model.save_pretrained(str(directory), safe_serialization=True)
    tokenizer.save_pretrained(str(directory))


@pytest.fixture(scope="module")
def replayed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One greedy step of the overfit model through the Recheck environment and mul."""
    from grpo.training.loop import train

    work = tmp_path_factory.mktemp("agent_logging")
    _overfit_tools_model(work / "model")
    data = work / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "47*38", "answer": "1786"}) + "\n")
    overrides = [
        f"model.path='{work / 'model'}'",
        f"data.train_path='{data}'",
        f"agent.environment='{__name__}:Recheck'",
        "agent.tools=['grpo.demo.tools_task:mul']",
        "agent.max_turns=3",
        "rollout.group_size=2",
        "rollout.max_new_tokens=60",
        "rollout.top_k=1",  # greedy: the replayed trajectory, every time
        "train.prompts_per_step=1",
        "train.steps=1",
        "train.completions_every=1",
        f"train.run_dir='{work / 'run'}'",
        "train.progress=false",
        "train.tensorboard=false",
    ]
    train(load_config(None, overrides), verbose=False)
    return work / "run"


def test_completions_hold_the_conversation_the_rendered_prompt_and_turn_counts(
    replayed_run: Path,
) -> None:
    rows = read_completions(replayed_run)
    assert len(rows) == 2
    row = rows[0]
    assert row["prompt"] == "47*38" and row["completion"] == f"{CALL}\n1786\n1786"
    assert row["rendered_prompt"] == "u:47*38\na:"  # as the model read it
    assert row["conversation"] == [
        {"role": "user", "content": "47*38", "author": "environment"},
        {"role": "assistant", "content": CALL, "author": "model"},
        {"role": "tool", "name": "mul", "content": "1786", "author": "tool"},
        {"role": "assistant", "content": "1786", "author": "model"},
        {"role": "user", "content": "sure?", "author": "environment"},
        {"role": "assistant", "content": "1786", "author": "model"},
    ]
    # Per turn: [tokens sampled (EOS included), tokens inserted after it]: the call is 65
    # characters, 23 of them the two tags of one token each, then EOS: 45 tokens; the
    # inserted "t:1786\na:" and "u:sure?\na:" are 9 and 10 characters, one token each.
    assert row["turn_tokens"] == [[45, 9], [5, 10], [5, 0]]
    assert row["rewards"] == {"environment": 1.0} and row["reward"] == 1.0
    assert "completion_ids" not in row  # train.log_token_ids is off by default
    assert rows[1] == row  # greedy: both members of the group replay it


def test_the_report_shows_conversations_by_author_and_the_agent_plots(
    replayed_run: Path,
) -> None:
    from grpo.log.report import PLOTS, write_report

    page = write_report(replayed_run)
    source = page.read_text()
    agent_plots = [plot.file for plot in PLOTS if plot.only_with == "agent/"]
    assert agent_plots == [
        "agent_turns.png",
        "agent_shares.png",
        "agent_errors.png",
        "agent_tool_seconds.png",
    ]
    for file in agent_plots:
        assert f'<img src="{file}"' in source
        assert (page.parent / file).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<h2>Sample conversations</h2>" in source
    assert "<h3>Step 1 (2 conversations logged; the first 2 shown)</h3>" in source
    assert source.count('<div class="conversation">') == 2
    # Each message is labelled and styled by its author, the tool result apart.
    assert (
        '<div class="msg author-tool"><div class="who">tool mul</div><pre>1786</pre></div>'
        in source
    )
    assert (
        '<div class="msg author-environment"><div class="who">environment (user)</div>'
        "<pre>sure?</pre></div>" in source
    )
    assert (
        '<div class="msg author-model"><div class="who">model (assistant) · turn 3: 5 tokens '
        "sampled, 0 inserted after</div><pre>1786</pre></div>" in source
    )
    assert "<pre>u:47*38\na:</pre>" in source  # the rendered prompt, folded
    assert "&lt;tool_call&gt;" in source and "<tool_call>" not in source  # escaped


def _random_agent_config(model_dir: Path, data: Path, run_dir: Path) -> Any:
    return load_config(
        None,
        [
            f"model.path='{model_dir}'",
            f"data.train_path='{data}'",
            f"agent.environment='{Echo.__module__}:Echo'",
            "agent.max_turns=2",
            f"rewards=[{{ function = '{digit_fraction.__module__}:digit_fraction' }}]",
            "rollout.group_size=4",
            "rollout.max_new_tokens=5",
            "rollout.stop_strings=['a', 'e', 'i', 'o', 'u', ' ']",
            "algorithm.dynamic_sampling=true",  # two rounds: the step's last rows are logged
            "algorithm.max_generation_rounds=2",
            "train.prompts_per_step=2",
            "train.steps=2",
            "train.completions_every=1",
            "train.log_token_ids=true",
            f"train.run_dir='{run_dir}'",
            "train.progress=false",
            "train.tensorboard=false",
        ],
    )


def test_logged_token_ids_are_the_ids_the_update_trained_on(
    ascii_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import grpo.training.loop as loop

    seen: list[dict[str, list[list[int]]]] = []
    real_learn = loop.learn

    def recording_learn(learner: Any, scored: Any, selection: Any, dist: Any) -> Any:
        """The real update, after keeping the step's last round's rows as it gets them."""
        rollout, rows = scored.local_rollout, len(scored.final_round.local_prompts)
        real_BT, prompt_BP = rollout.real_mask_BT.bool(), rollout.prompt_mask_BP.bool()
        seen.append(
            {
                "prompt_ids": [
                    rollout.prompt_ids_BP[b][prompt_BP[b]].tolist()
                    for b in range(len(real_BT) - rows, len(real_BT))
                ],
                "completion_ids": [
                    rollout.completion_ids_BT[b][real_BT[b]].tolist()
                    for b in range(len(real_BT) - rows, len(real_BT))
                ],
                "model_mask": [
                    rollout.completion_mask_BT[b][real_BT[b]].tolist()
                    for b in range(len(real_BT) - rows, len(real_BT))
                ],
            }
        )
        return real_learn(learner, scored, selection, dist)

    monkeypatch.setattr(loop, "learn", recording_learn)
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Say {n}{n}"}) + "\n" for n in range(4)))
    result = loop.train(
        _random_agent_config(ascii_model_dir, data, tmp_path / "run"), verbose=False
    )
    assert any(row["groups_trained"] > 0 for row in result.history)
    rows = read_completions(tmp_path / "run")
    assert [row["step"] for row in rows] == [1] * 8 + [2] * 8
    assert len(seen) == 2  # one update a step
    for step, trained in enumerate(seen, start=1):
        logged = [row for row in rows if row["step"] == step]
        for key in ("prompt_ids", "completion_ids", "model_mask"):
            assert [row[key] for row in logged] == trained[key]
    model_tokens = [sum(row["model_mask"]) for row in rows]
    inserted = [len(row["model_mask"]) - sum(row["model_mask"]) for row in rows]
    assert min(model_tokens) > 0 and max(inserted) > 0  # Echo's replies: mask 0
    for row in rows:  # the counts per turn add up to the ids and the mask
        assert sum(m for m, _ in row["turn_tokens"]) == sum(row["model_mask"])
        assert sum(m + i for m, i in row["turn_tokens"]) == len(row["completion_ids"])
