"""Multi-turn exact tokens on a real BPE tokenizer and chat template, SmolLM2-135M-Instruct's
(ChatML: ``<|im_start|>`` = 1, ``<|im_end|>`` = 2 = EOS, a default system turn): the ids
trained are the ids sampled, never re-encoded, with the template's own ids around each
inserted message; the end-of-turn token the model sampled stays and the template's newline
after it is inserted; the prefix property is checked at every turn (a break is masked and
counted); a stop string inside a token and a turn cut at its budget.

The tiny model of :mod:`tests.agents.replay` samples known ids through the built-in engine:
"mul" as "m" + "ul" (its text encodes to one other id) and a call whose last token ">."
runs past ``</tool_call>``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from grpo.agents.parser import parse_xml_json
from grpo.agents.trajectories import AgentSettings, TrajectoryBlock, run_trajectories
from grpo.demo.tools_task import mul
from grpo.rollout.engine import RolloutRequest, SamplingParams
from grpo.rollout.hf_engine import TransformersEngine
from grpo.rollout.hf_turns import HFTurnSession
from grpo.rollout.turns import TurnSession

from .helpers import assert_scored_as_sampled
from .replay import SCRIPTS, TOOL_END, call_ids, smollm2_chat

IM_START, IM_END, NEWLINE = 1, 2, 198  # SmolLM2's ids of <|im_start|>, <|im_end|>, "\n"
GROUP = 2


@pytest.fixture(scope="module")
def replay(replay_model_dir: Path) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(replay_model_dir)
    return model, AutoTokenizer.from_pretrained(replay_model_dir)


class ReEncodingEngine(TransformersEngine):
    """The built-in engine run as a chat server runs a conversation: before every turn each
    row's context is decoded and encoded again (no KV cache kept), as a server that takes
    messages rebuilds it. A turn sampled on a re-encoded context breaks the prefix property."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        super().__init__(model, pad_token_id=tokenizer.pad_token_id, eos_token_ids={IM_END})
        self.tokenizer = tokenizer

    def start_turns(self, request: RolloutRequest, max_model_tokens: int) -> TurnSession:
        tokenizer = self.tokenizer

        class Session(HFTurnSession):
            def generate(
                self, rows: list[int], inserted: list[list[int]], max_new_tokens: list[int]
            ) -> list[Any]:
                for row in rows:
                    text = tokenizer.decode(self.history[row])
                    self.history[row] = tokenizer(text, add_special_tokens=False)["input_ids"]
                return super().generate(rows, inserted, max_new_tokens)

        return Session(self, request, max_model_tokens, reuse_cache=False)


def _rollout(
    model: Any,
    tokenizer: Any,
    *,
    stop_strings: tuple[str, ...] = (),
    max_new_tokens: int = 48,
    engine: Any = None,
) -> TrajectoryBlock:
    """Greedy rollouts of both scripts' prompts, G = 2 each, with the mul tool, 2 turns."""
    engine = engine or TransformersEngine(
        model,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids={tokenizer.eos_token_id},
        decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
    )
    settings = AgentSettings(
        chat=smollm2_chat(tokenizer), tools={"mul": mul}, parser=parse_xml_json, max_turns=2
    )
    records = [{"prompt": s.prompt, "answer": s.answer} for s in SCRIPTS]
    params = SamplingParams(
        temperature=0.0, max_new_tokens=max_new_tokens, stop_strings=stop_strings
    )
    rows = range(len(records) * GROUP)
    return run_trajectories(engine, records, GROUP, params, None, rows, settings)


def _row(result: TrajectoryBlock, row: int) -> tuple[list[int], list[int], list[int]]:
    """(prompt ids, completion ids, model mask) of a row, padding left out."""
    rollout = result.rollout
    prompt = rollout.prompt_ids_BP[row][rollout.prompt_mask_BP[row].bool()].tolist()
    real = rollout.attention_mask_BT[row].bool()
    ids = rollout.completion_ids_BT[row][real].tolist()
    return prompt, ids, rollout.completion_mask_BT[row][real].tolist()


def _tool_insertion(answer: str) -> str:
    """What ChatML puts after a turn's <|im_end|> for a tool message, up to the next turn."""
    return f"\n<|im_start|>tool\n{answer}<|im_end|>\n<|im_start|>assistant\n"


def test_multi_turn_ids_are_the_sampled_ids_and_the_templates_own(replay) -> None:
    model, tokenizer = replay
    result = _rollout(model, tokenizer)
    chat = smollm2_chat(tokenizer)
    for row in range(len(SCRIPTS) * GROUP):
        script = SCRIPTS[row // GROUP]
        prompt, ids, mask = _row(result, row)
        call = [*call_ids(script, chat), IM_END]  # the <|im_end|> it sampled stays
        inserted = chat.insertion_ids([{"role": "tool", "name": "mul", "content": script.answer}])
        answer = [*chat.encode(script.answer), IM_END]
        assert ids == call + inserted + answer
        assert mask == [1] * len(call) + [0] * len(inserted) + [1] * len(answer)
        # The template's newline after <|im_end|> is inserted as its own token, then the
        # tool turn and the next assistant header, special tokens as their ids.
        assert tokenizer.decode(inserted) == _tool_insertion(script.answer)
        assert inserted[:2] == [NEWLINE, IM_START] and inserted.count(IM_END) == 1
        # Read as text, the whole sequence is the template's rendering of the conversation
        # (default system turn, the two model turns as written, the tool's result).
        messages = [{k: m[k] for k in ("role", "content")} for m in result.conversations[row]]
        rendered = tokenizer.apply_chat_template(messages, tokenize=False)
        assert tokenizer.decode(prompt + ids) + "\n" == rendered
        assert result.turn_tokens[row] == [[len(call), len(inserted)], [len(answer), 0]]
    assert result.metrics["agent/prefix_breaks"] == 0.0
    assert result.metrics["agent/turns/mean"] == 2.0 and result.metrics["agent/tool_call_frac"] == 1
    # The KV-cached turns saw exactly the sequence the trainer scores: the same log-probs.
    assert_scored_as_sampled(model, result.rollout)


def test_sampled_ids_are_never_re_encoded(replay) -> None:
    """The model wrote "mul" as "m" + "ul"; that text encodes to one id, "mul". Code that
    decoded the turn and encoded its text again would train on other ids than it sampled."""
    model, tokenizer = replay
    chat = smollm2_chat(tokenizer)
    script = SCRIPTS[0]
    sampled = call_ids(script, chat)
    text = tokenizer.decode(sampled)
    assert text == script.call_text and chat.encode(text) != sampled  # the drift is real
    m_ul = chat.encode("m") + chat.encode("ul")
    result = _rollout(model, tokenizer)
    for row in range(GROUP):  # the script's rows
        _, ids, mask = _row(result, row)
        assert ids[: len(sampled)] == sampled and mask[: len(sampled)] == [1] * len(sampled)
        assert ids[ids.index(m_ul[0]) : ids.index(m_ul[0]) + 2] == m_ul
        assert chat.encode("mul")[0] not in ids
        assert result.conversations[row][1]["content"] == text  # the message is the text
    assert result.metrics["agent/prefix_breaks"] == 0.0


def test_an_engine_that_re_encodes_the_context_is_a_counted_masked_prefix_break(
    replay,
) -> None:
    model, tokenizer = replay
    result = _rollout(model, tokenizer, engine=ReEncodingEngine(model, tokenizer))
    rollout = result.rollout
    # Turn 2 of the "m" + "ul" rows was sampled on "mul" as one id: not the ids trained.
    assert result.metrics["agent/prefix_breaks"] == float(GROUP)
    chat = smollm2_chat(tokenizer)
    for row in range(len(SCRIPTS) * GROUP):
        script = SCRIPTS[row // GROUP]
        _, ids, mask = _row(result, row)
        assert len(result.turn_tokens[row]) == 2  # each row ran its two turns
        assert ids[: len(call_ids(script, chat))] == call_ids(script, chat)  # kept, for the logs
        if script.split_mul:
            assert not rollout.completion_mask_BT[row].any()  # no token of it trains
        else:  # its ids encode to themselves: the re-encoded context is the same
            assert sum(mask) == sum(model for model, _ in result.turn_tokens[row])


def test_a_stop_string_inside_a_token_keeps_the_token_and_inserts_the_end_of_turn(
    replay,
) -> None:
    """``</tool_call>`` ends inside the sampled token ">.": the turn stops there with the
    whole token kept, without <|im_end|>; the template's <|im_end|> is inserted (not
    trained) before the tool's message, as the template renders the turn."""
    model, tokenizer = replay
    chat = smollm2_chat(tokenizer)
    result = _rollout(model, tokenizer, stop_strings=(TOOL_END,))
    script = SCRIPTS[1]
    for row in range(GROUP, 2 * GROUP):  # the script's rows
        prompt, ids, mask = _row(result, row)
        call = call_ids(script, chat)
        assert tokenizer.convert_ids_to_tokens(call[-1]) == ">."  # past the stop string
        tool = [{"role": "tool", "name": "mul", "content": script.answer}]
        inserted = [IM_END, *chat.insertion_ids(tool)]
        answer = [*chat.encode(script.answer), IM_END]
        assert ids == call + inserted + answer
        assert mask == [1] * len(call) + [0] * len(inserted) + [1] * len(answer)
        assert result.conversations[row][1]["content"] == script.call_text  # "." and all
        assert result.conversations[row][2]["content"] == script.answer  # the call ran
        messages = [{k: m[k] for k in ("role", "content")} for m in result.conversations[row]]
        rendered = tokenizer.apply_chat_template(messages, tokenize=False)
        assert tokenizer.decode(prompt + ids) + "\n" == rendered
    assert result.metrics["agent/prefix_breaks"] == 0.0


def test_a_turn_cut_at_max_new_tokens_ends_the_row_without_an_end_of_turn(replay) -> None:
    """Cut mid-call at 5 tokens: the row ends there (its call is never run), nothing is
    inserted, the 5 ids train as sampled and the row counts as truncated (stopped False)."""
    model, tokenizer = replay
    chat = smollm2_chat(tokenizer)
    result = _rollout(model, tokenizer, max_new_tokens=5)
    for row in range(len(SCRIPTS) * GROUP):
        _, ids, mask = _row(result, row)
        assert ids == call_ids(SCRIPTS[row // GROUP], chat)[:5] and IM_END not in ids
        assert mask == [1] * 5
        assert result.turn_tokens[row] == [[5, 0]]
        assert [m["role"] for m in result.conversations[row]] == ["user", "assistant"]
    assert not result.rollout.stopped_B.any()
    assert result.metrics["agent/tool_calls/mean"] == 0.0
    assert result.metrics["agent/prefix_breaks"] == 0.0


def test_an_agent_run_on_smollm2s_tokenizer_logs_the_ids_it_trained_on(
    replay_model_dir: Path, tmp_path: Path
) -> None:
    """``grpo train`` with ``[agent]`` (the mul tool, 2 turns) and ``train.log_token_ids``:
    completions.jsonl holds, per row, the ids the update trained on, and they are the
    prompt as the template renders it, then the sampled ids (the "m" + "ul" kept, each
    turn's <|im_end|> kept and trained) and the template's ids around the tool message."""
    from transformers import AutoTokenizer

    from grpo.config import load_config
    from grpo.log.metrics import read_completions, read_metrics
    from grpo.training.loop import train

    overrides = [
        f"model.path='{replay_model_dir}'",
        f"data.train_path='{replay_model_dir / 'prompts.jsonl'}'",
        "agent.tools=['grpo.demo.tools_task:mul']",
        "agent.max_turns=2",
        "rewards=[{ function = 'grpo.demo.tools_task:final_answer' }]",
        f"rollout.group_size={GROUP}",
        "rollout.max_new_tokens=48",
        "rollout.top_k=1",  # the replayed turns, every time
        f"train.prompts_per_step={len(SCRIPTS)}",
        "train.steps=1",
        "train.completions_every=1",
        "train.log_token_ids=true",
        f"train.run_dir='{tmp_path / 'run'}'",
        "train.progress=false",
        "train.tensorboard=false",
    ]
    train(load_config(None, overrides), verbose=False)
    tokenizer = AutoTokenizer.from_pretrained(replay_model_dir)
    chat = smollm2_chat(tokenizer)
    rows = read_completions(tmp_path / "run")
    assert len(rows) == len(SCRIPTS) * GROUP
    for row in rows:
        script = next(s for s in SCRIPTS if s.prompt == row["prompt"])
        call = [*call_ids(script, chat), IM_END]
        tool = [{"role": "tool", "name": "mul", "content": script.answer}]
        inserted = chat.insertion_ids(tool)
        answer = [*chat.encode(script.answer), IM_END]
        assert row["prompt_ids"] == chat.prompt_ids([{"role": "user", "content": script.prompt}])
        assert row["completion_ids"] == call + inserted + answer
        assert row["model_mask"] == [1] * len(call) + [0] * len(inserted) + [1] * len(answer)
        assert row["turn_tokens"] == [[len(call), len(inserted)], [len(answer), 0]]
        assert row["reward"] == 1.0  # the tool's product, said after the call
    (metrics,) = read_metrics(tmp_path / "run")
    assert metrics["agent/prefix_breaks"] == 0.0 and metrics["agent/turns/mean"] == 2.0


@pytest.mark.slow
def test_smollm2_itself_samples_two_turns_on_exact_tokens(
    smollm2_gguf: Path, smollm2_tokenizer: Any
) -> None:
    """The pretrained model (dequantized from its GGUF), the mul tool and an environment that
    answers a turn without a call, 2 turns at temperature 1: each row's ids are its turns as
    sampled and, between them, the template's ids for what answered (after <|im_end|>, which
    the model sampled or which was inserted), the KV-cached turns' log-probs are the
    trainer's on the assembled sequence, and no prefix broke."""
    from grpo.models.loading import eos_token_ids, load_reference

    from .helpers import Echo, Spy

    tokenizer = smollm2_tokenizer
    model = load_reference(str(smollm2_gguf), torch.device("cpu"), dtype="float32")
    engine = TransformersEngine(
        model,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids=eos_token_ids(model, tokenizer),
        decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
    )
    spy = Spy(engine)
    chat = smollm2_chat(tokenizer)
    settings = AgentSettings(
        chat=chat, tools={"mul": mul}, parser=parse_xml_json, environment=Echo, max_turns=2
    )
    records = [{"prompt": "Say hello in one word."}, {"prompt": "What is 12*34? Just the number."}]
    params = SamplingParams(temperature=1.0, max_new_tokens=32)
    generator = torch.Generator().manual_seed(0)
    result = run_trajectories(spy, records, 2, params, generator, range(4), settings)
    assert len(spy.calls) == 2  # some row ended its first turn and was answered
    expected: dict[int, list[int]] = {row: [] for row in range(4)}
    for rows, inserted, outputs, _ in spy.calls:
        for row, ids, output in zip(rows, inserted, outputs, strict=True):
            expected[row] += ids + output.token_ids
    for row in range(4):
        prompt, ids, mask = _row(result, row)
        assert ids == expected[row]
        messages = [{k: m[k] for k in ("role", "content")} for m in result.conversations[row]]
        turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        if len(turns) == 2:  # what answered turn 1, as the template inserts it
            first = result.turn_tokens[row][0][0]
            answer = messages[turns[0] + 1 : turns[1]]
            closing = chat.turn_closing(ids[:first])
            assert ids[first : first + result.turn_tokens[row][0][1]] == closing + (
                chat.insertion_ids(answer)
            )
            assert mask[first - 1 : first + 1] == [1, 0]
        if result.rollout.stopped_B[row]:  # every turn ended on <|im_end|>: the template's text
            rendered = tokenizer.apply_chat_template(messages, tokenize=False)
            assert tokenizer.decode(prompt + ids) + "\n" == rendered
    assert result.metrics["agent/prefix_breaks"] == 0.0
    assert_scored_as_sampled(model, result.rollout, atol=2e-3)
