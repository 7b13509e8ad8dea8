"""The tools demo's task: the mul tool, the demo's chat template, its splits and reward."""

from __future__ import annotations

import pytest

from grpo.agents.tools import tool_schema
from grpo.demo.tools_task import (
    build_tools_tokenizer,
    call_text,
    final_answer,
    make_tool_splits,
    mul,
    tools_chat,
    trace_ids,
    warm_start_traces,
)


def test_the_tool_multiplies_and_offers_two_integer_arguments() -> None:
    assert mul(47, 38) == 1786  # 47·38 = 1880 − 94
    parameters = tool_schema(mul)["function"]["parameters"]
    assert parameters["properties"] == {"a": {"type": "integer"}, "b": {"type": "integer"}}
    assert parameters["required"] == ["a", "b"]


def test_the_template_renders_a_prompt_in_ten_tokens_and_a_tool_result_in_nine() -> None:
    chat = tools_chat(build_tools_tokenizer())
    prompt = chat.prompt_ids([{"role": "user", "content": "47*38"}])
    assert chat.tokenizer.decode(prompt) == "u:47*38\na:"
    assert len(prompt) == 10  # one token per character
    inserted = chat.insertion_ids([{"role": "tool", "name": "mul", "content": "1786"}])
    assert chat.tokenizer.decode(inserted) == "t:1786\na:"
    assert len(inserted) == 9


def test_a_tool_trace_is_69_ids_of_which_50_are_the_models() -> None:
    chat = tools_chat(build_tools_tokenizer())
    ids, mask = trace_ids(chat, {"prompt": "47*38", "answer": "1786"}, use_tool=True)
    text = chat.tokenizer.decode(ids)
    call = '<tool_call>{"name":"mul","arguments":{"a":47,"b":38}}</tool_call>'
    assert call_text("47*38") == call
    assert text == f"u:47*38\na:{call}<eos>t:1786\na:1786<eos>"
    # prompt 10; call: 2 tags + 42 JSON characters + EOS = 45; tool 9; answer 4 + EOS = 5
    assert len(ids) == 10 + 45 + 9 + 5 == 69
    assert mask == [0] * 10 + [1] * 45 + [0] * 9 + [1] * 5
    direct, direct_mask = trace_ids(chat, {"prompt": "47*38", "answer": "1786"}, use_tool=False)
    assert chat.tokenizer.decode(direct) == "u:47*38\na:1786<eos>"
    assert direct_mask == [0] * 10 + [1] * 5


def test_the_warm_start_calls_on_low_first_factors_and_guesses_on_high_ones() -> None:
    chat = tools_chat(build_tools_tokenizer())
    train, _, _ = make_tool_splits(2000, 10, 10)
    traces = warm_start_traces(chat, train)
    tag = chat.tokenizer.convert_tokens_to_ids("<tool_call>")
    called = {True: [], False: []}
    for row, (ids, _) in zip(train, traces, strict=True):
        called[row["prompt"][0] in "1234"].append(tag in ids)
    low, high = called[True], called[False]
    assert sum(low) / len(low) == pytest.approx(0.9, abs=0.03)
    assert sum(high) / len(high) == pytest.approx(0.1, abs=0.03)


def test_the_splits_are_disjoint_products_of_two_digit_numbers() -> None:
    train, dev, test = make_tool_splits(4000, 200, 300)
    prompts = [{row["prompt"] for row in rows} for rows in (train, dev, test)]
    assert [len(p) for p in prompts] == [4000, 200, 300]
    assert not (prompts[0] & prompts[1] or prompts[0] & prompts[2] or prompts[1] & prompts[2])
    a, b = (int(x) for x in test[0]["prompt"].split("*"))
    assert 10 <= a <= 99 and 10 <= b <= 99 and test[0]["answer"] == str(a * b)
    with pytest.raises(ValueError, match="8100"):
        make_tool_splits(8000, 100, 1)


def test_only_the_last_turn_counts_and_a_call_is_no_answer() -> None:
    def talk(*turns: str) -> list[dict]:
        return [{"role": "user", "content": "47*38"}] + [
            {"role": "assistant", "content": turn} for turn in turns
        ]

    call = call_text("47*38")
    conversations = [talk(call, "1786"), talk("1786"), talk("1786", "12"), talk(call), talk()]
    scores = final_answer(["47*38"] * 5, [""] * 5, conversations, ["1786"] * 5)
    assert scores == [1.0, 1.0, 0.0, 0.0, 0.0]


def test_the_table_gives_each_kind_then_all_last() -> None:
    from grpo.demo.tools_demo import by_kind

    rows = [{"prompt": p} for p in ("12*30", "55*10", "49*99", "90*90")]
    shares = by_kind(rows, [True, True, False, False])
    assert list(shares) == ["first factor 10-49", "first factor 50-99", "all"]
    assert shares == {"first factor 10-49": 0.5, "first factor 50-99": 0.5, "all": 0.5}
    assert by_kind(rows, [True, False, True, False])["first factor 10-49"] == 1.0


def test_a_stopped_run_reports_the_steps_it_did() -> None:
    from grpo.demo.run import steps_done

    assert steps_done([{"step": 0, "eval/accuracy": 0.3}, {"step": 1}, {"step": 83}]) == 83
    assert steps_done([]) == 0
