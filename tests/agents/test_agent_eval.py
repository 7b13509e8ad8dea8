"""``grpo eval`` on multi-turn trajectories: the accuracy reward scores them, the agent
metrics are reported.

In process: a scripted engine whose answer reaches the conversation only through a tool
call, with hand-counted accuracy, tool-call rate and error counts. End to end: ``grpo
eval --config`` with an ``[agent]`` section on the tiny model, its numbers recomputed from
the trajectories it produced.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from grpo.agents.chat import ChatFormat
from grpo.agents.parser import parse_xml_json
from grpo.agents.tools import tool_schema
from grpo.agents.trajectories import AgentSettings
from grpo.eval.evaluate import evaluate_model
from grpo.rewards.runner import RewardFunction

from .conftest import ScriptedEngine, ascii_tokenizer


def mul(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def tool_answer(
    prompts: list[str],
    completions: list[str],
    conversation: list[list[dict]],
    answer: list[str],
    **_: Any,
) -> list[float]:
    """1 when a tool message holds the answer: the model cannot know it otherwise."""
    return [
        float(any(m["role"] == "tool" and m["content"] == a for m in messages))
        for messages, a in zip(conversation, answer, strict=True)
    ]


# Per prompt: the first turn the scripted model writes (its second turn is "done").
FIRST_TURNS = {
    "12*34": '<tool_call>{"name": "mul", "arguments": {"a": 12, "b": 34}}</tool_call>',
    "7*8": '<tool_call>{"name": "mul", "arguments": {"a": 7, "b": 9}}</tool_call>',
    "5*5": "<tool_call>{oops</tool_call>",
    "2*3": '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>',
    "9*9": "81",
}


class PromptScripted(ScriptedEngine):
    """Writes FIRST_TURNS[prompt] on turn 0 and "done" after, each ended by EOS."""

    def __init__(self, tokenizer: Any) -> None:  # no model: the rollout's tensors stay on CPU
        self.tokenizer, self.pad_token_id = tokenizer, tokenizer.pad_token_id

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def text(self, prompt: str, turn: int) -> str:
        return next(t for p, t in FIRST_TURNS.items() if p in prompt) if turn == 0 else "done"


def test_multi_turn_eval_scores_trajectories_and_counts_tool_use(tmp_path) -> None:
    from grpo.data.dataset import load_prompt_dataset

    tokenizer = ascii_tokenizer()
    answers = {"12*34": "408", "7*8": "56", "5*5": "25", "2*3": "6", "9*9": "81"}
    data = tmp_path / "mul.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": p, "answer": a}) + "\n" for p, a in answers.items())
    )
    dataset = load_prompt_dataset(data, tokenizer)
    settings = AgentSettings(
        chat=ChatFormat(tokenizer, [tool_schema(mul)]),
        tools={"mul": mul},
        parser=parse_xml_json,
        max_turns=3,
    )
    correct = RewardFunction(name="tool_answer", fn=tool_answer)
    report = evaluate_model(
        None, tokenizer, dataset, [correct], correct, max_new_tokens=80, samples=2, ks=[1, 2],
        agent=settings, engine=PromptScripted(tokenizer),
    )  # fmt: skip
    # Only 12*34 gets its answer (408) from the tool; 7*8 asked for 7*9 = 63; 5*5 wrote
    # broken JSON; 2*3 called an unknown tool; 9*9 answered in its head (no tool message).
    assert report.greedy_correct == [True, False, False, False, False]
    assert report.greedy_reward_means == {"tool_answer": pytest.approx(1 / 5)}
    expected = {
        "agent/turns/mean": (2 + 2 + 2 + 2 + 1) / 5,  # a call, its result, then "done"
        "agent/tool_calls/mean": 4 / 5,
        "agent/tool_call_frac": 4 / 5,
        "agent/malformed_json/errors": 1.0,
        "agent/unknown_tool/errors": 1.0,
        "agent/raised/errors": 0.0,
        "agent/cut_at_max_turns_frac": 0.0,
    }
    for key, value in expected.items():
        assert report.greedy_agent_metrics[key] == pytest.approx(value), key
    # Sampled: the script ignores the noise, so 2 samples per prompt double the counts.
    assert report.sample_correct_counts == [2, 0, 0, 0, 0]
    assert report.pass_at == {1: pytest.approx(0.2), 2: pytest.approx(0.2)}
    assert report.sampled_agent_metrics["agent/malformed_json/errors"] == 2.0
    summary = report.summary()
    assert summary["agent_greedy"]["agent/tool_call_frac"] == pytest.approx(0.8)
    assert "agent/tool_call_frac (greedy)" in report.table()


class Countdown:
    """Two steps: an observation, then done with reward 0.5."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.prompt, self.left = row["prompt"], 2

    def reset(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": self.prompt}]

    def step(self, text: str) -> tuple[str | None, float | None, bool]:
        self.left -= 1
        return (f"{self.left} more", None, False) if self.left else (None, 0.5, True)


SCORED: list[list[dict]] = []  # what dumped_turns saw, call after call


def dumped_turns(prompts, completions, conversation, **_) -> list[float]:
    """Correct: at least two assistant turns."""
    SCORED.append(conversation)
    return [float(sum(m["role"] == "assistant" for m in c) >= 2) for c in conversation]


def _prompts(tmp_path: Path) -> Path:
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Say {n}"}) + "\n" for n in range(4)))
    return data


STOPS = ["a", "e", "i", "o", "u", " ", "1", "2", "3"]  # turns end early: rows go multi-turn


def test_grpo_eval_runs_the_agent_section(ascii_model_dir, tmp_path) -> None:
    from grpo.cli.main import main

    SCORED.clear()
    config = tmp_path / "grpo.toml"
    config.write_text(
        f'[agent]\nenvironment = "{__name__}:Countdown"\nmax_turns = 3\n'
        f'[[rewards]]\nfunction = "{__name__}:dumped_turns"\naccuracy = true\n'
        f"[rollout]\nstop_strings = {json.dumps(STOPS)}\n"
    )
    out = tmp_path / "eval.json"
    data = _prompts(tmp_path)
    args = ["eval", str(ascii_model_dir), "--data", str(data), "--config", str(config)]
    assert main([*args, "--max-new-tokens", "6", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    greedy = SCORED[0]  # the greedy pass's one scoring call: 4 trajectories
    turns = [sum(m["role"] == "assistant" for m in c) for c in greedy]
    assert len(greedy) == 4 and max(turns) >= 2  # it went multi-turn
    assert result["pass@1_greedy"] == pytest.approx(sum(t >= 2 for t in turns) / 4)
    assert result["agent_greedy"]["agent/turns/mean"] == pytest.approx(sum(turns) / 4)
    # The environment's reward (0.5 once it ran out of turns) is scored as `environment`.
    finished = sum(t == 2 for t in turns)  # Countdown ends a row on its 2nd step
    assert result["reward_means_greedy"]["environment"] == pytest.approx(0.5 * finished / 4)


def test_held_out_accuracy_during_training_is_multi_turn(ascii_model_dir, tmp_path) -> None:
    """The trainer's eval.path evaluator rolls out greedy trajectories under [agent]."""
    from grpo.config import load_config
    from grpo.training.loop import train

    SCORED.clear()
    data = _prompts(tmp_path)
    config = load_config(
        None,
        [
            f"model.path='{ascii_model_dir}'",
            f"data.train_path='{data}'",
            f"eval.path='{data}'",
            "eval.every=1",
            f"agent.environment='{__name__}:Countdown'",
            "agent.max_turns=3",
            "rollout.group_size=2",
            "rollout.max_new_tokens=6",
            f"rollout.stop_strings={STOPS}",
            "train.steps=1",
            "train.prompts_per_step=2",
            f"train.run_dir='{tmp_path / 'run'}'",
            "train.progress=false",
            "train.tensorboard=false",
        ],
    )
    correct = RewardFunction(name="dumped_turns", fn=dumped_turns, accuracy=True)
    result = train(config, reward_functions=[correct], verbose=False)
    evaluated = SCORED[-1]  # the last scoring call: the held-out greedy pass, 4 prompts
    turns = [sum(m["role"] == "assistant" for m in c) for c in evaluated]
    assert len(evaluated) == 4 and max(turns) >= 2
    assert result.history[-1]["eval/accuracy"] == pytest.approx(sum(t >= 2 for t in turns) / 4)


class RowScore:
    """Ends on the first turn with the row's `score` as its reward, whatever the model wrote."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.prompt, self.score = row["prompt"], float(row["score"])

    def reset(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": self.prompt}]

    def step(self, text: str) -> tuple[str | None, float | None, bool]:
        return None, self.score, True


# ≥ 1 is correct: rows 0 and 3, so the accuracy is 2/4; the mean reward is 3.5/4.
ROW_SCORES = [1.0, 0.0, 0.5, 2.0]
# Every character ends a turn, so each turn stops (is not cut) and reaches the environment.
EVERY_CHARACTER = [chr(code) for code in range(32, 127)] + ["\n"]


def _scored_prompts(tmp_path: Path) -> Path:
    data = tmp_path / "scored.jsonl"
    rows = [{"prompt": f"Say {n}", "score": s} for n, s in enumerate(ROW_SCORES)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return data


def test_grpo_eval_of_an_environment_only_run_scores_the_environment(
    ascii_model_dir, tmp_path, capsys
) -> None:
    """No [[rewards]]: the environment's reward is the accuracy reward (≥ 1 = correct)."""
    from grpo.cli.main import main

    config = tmp_path / "grpo.toml"
    config.write_text(
        f'[agent]\nenvironment = "{__name__}:RowScore"\nmax_turns = 2\n'
        f"[rollout]\nstop_strings = {json.dumps(EVERY_CHARACTER)}\n"
    )
    out = tmp_path / "eval.json"
    data = _scored_prompts(tmp_path)
    args = ["eval", str(ascii_model_dir), "--data", str(data), "--config", str(config)]
    code = main([*args, "--samples", "2", "--k", "1,2", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    result = json.loads(out.read_text())
    assert result["correct_reward"] == "environment"
    assert result["pass@1_greedy"] == 0.5
    assert result["pass@k"] == {"1": 0.5, "2": 0.5}  # c = 2, 0, 0, 2 of 2 samples
    assert result["reward_means_greedy"] == {"environment": pytest.approx(3.5 / 4)}
    assert "correct = environment ≥ 1" in printed
    assert re.search(r"pass@1 \(greedy\) +50\.0%", printed)


def test_environment_accuracy_key_makes_it_the_accuracy_beside_other_rewards(
    ascii_model_dir, tmp_path
) -> None:
    """agent.environment_accuracy = true: the environment's reward is the accuracy in
    training (the step's `accuracy`, the held-out `eval/accuracy`) though a reward is set."""
    from grpo.config import load_config
    from grpo.training.loop import train

    data = _scored_prompts(tmp_path)
    config = load_config(
        None,
        [
            f"model.path='{ascii_model_dir}'",
            f"data.train_path='{data}'",
            f"eval.path='{data}'",
            f"agent.environment='{__name__}:RowScore'",
            "agent.environment_accuracy=true",
            "agent.max_turns=2",
            f"rewards=[{{function='{__name__}:dumped_turns'}}]",
            "rollout.group_size=2",
            f"rollout.stop_strings={json.dumps(EVERY_CHARACTER)}",
            "train.steps=1",
            "train.prompts_per_step=4",
            f"train.run_dir='{tmp_path / 'run'}'",
            "train.progress=false",
            "train.tensorboard=false",
        ],
    )
    result = train(config, verbose=False)
    assert result.history[-1]["accuracy"] == 0.5  # 4 of the step's 8 rows score ≥ 1
    assert result.history[-1]["eval/accuracy"] == 0.5  # 2 of the 4 held-out prompts
