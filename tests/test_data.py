import json

import pytest

from grpo.data import DataError, PromptSampler, load_prompt_dataset


@pytest.fixture(scope="module")
def tokenizer():
    from grpo.demo.tokenizer import build_char_tokenizer

    return build_char_tokenizer()


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_long_prompt_is_an_error_naming_the_row(tmp_path, tokenizer) -> None:
    path = _write(
        tmp_path / "d.jsonl",
        [{"prompt": "1+1=", "answer": "2"}, {"prompt": "123456789+1=", "answer": "x"}],
    )
    with pytest.raises(
        DataError, match=r"d.jsonl: row 2: prompt is 12 tokens, over data.max_prompt_tokens = 8"
    ):
        load_prompt_dataset(path, tokenizer, max_prompt_tokens=8)


def test_long_prompt_is_left_truncated_when_asked(tmp_path, tokenizer) -> None:
    path = _write(tmp_path / "d.jsonl", [{"prompt": "123456789+1=", "answer": "x"}])
    dataset = load_prompt_dataset(path, tokenizer, max_prompt_tokens=4, truncate_long_prompts=True)
    assert tokenizer.decode(dataset.prompt_token_ids[0]) == "9+1="


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            '{"prompt": "1+1=", "answer": "2"}\n{"prompt": 5, "answer": "2"}\n',
            "row 2: column 'prompt'",
        ),
        ('{"prompt": "1+1=", "answer": "2"}\n{not json\n', "row 2: invalid JSON"),
        (
            '{"prompt": "1+1=", "answer": "2"}\n{"prompt": "2+2="}\n',
            r"row 2: missing column\(s\) \['answer'\]",
        ),
        ("", "the dataset is empty"),
    ],
)
def test_bad_rows_name_the_row(tmp_path, tokenizer, content, message) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(content)
    with pytest.raises(DataError, match=message):
        load_prompt_dataset(path, tokenizer)


def test_columns_are_passed_through(tmp_path, tokenizer) -> None:
    path = _write(tmp_path / "d.jsonl", [{"prompt": "1+1=", "answer": "2", "level": 1}])
    dataset = load_prompt_dataset(path, tokenizer)
    assert dataset.columns == {"answer": ["2"], "level": [1]}


def test_sampler_covers_each_epoch_and_resumes_exactly() -> None:
    sampler = PromptSampler(size=10, seed=3)
    first_epoch = sampler.next_indices(10)
    assert sorted(first_epoch) == list(range(10))
    partial = sampler.next_indices(4)
    state = sampler.state_dict()
    expected = sampler.next_indices(9)
    resumed = PromptSampler(size=10, seed=3)
    resumed.load_state_dict(state)
    assert resumed.next_indices(9) == expected
    assert partial + expected[:6] != first_epoch  # a new shuffle each epoch


def test_chat_template_wraps_the_prompt(tmp_path, tokenizer) -> None:
    import copy

    chat = copy.deepcopy(tokenizer)
    chat.chat_template = (
        "{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}a:{% endif %}"
    )
    path = _write(tmp_path / "d.jsonl", [{"prompt": "1+1=", "answer": "2"}])
    dataset = load_prompt_dataset(path, chat, chat_template=True, system_prompt="be brief")
    assert dataset.prompts == ["s:be brief\nu:1+1=\na:"]
    assert chat.decode(dataset.prompt_token_ids[0]) == "s:be brief\nu:1+1=\na:"


def test_chat_template_without_one_is_an_error(tmp_path, tokenizer) -> None:
    path = _write(tmp_path / "d.jsonl", [{"prompt": "1+1=", "answer": "2"}])
    with pytest.raises(DataError, match="no chat template"):
        load_prompt_dataset(path, tokenizer, chat_template=True)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (
            [{"prompt": "1+1=", "answer": "2"}, {"question": "2+2=", "answer": "4"}],
            "d.jsonl: row 2: missing the prompt column 'prompt'",
        ),
        (
            [{"prompt": "1+1=", "answer": "2"}, {"prompt": "  ", "answer": "4"}],
            "d.jsonl: row 2: empty prompt",
        ),
    ],
    ids=["missing-prompt", "empty-prompt"],
)
def test_missing_or_empty_prompt_names_file_and_row(tmp_path, tokenizer, rows, message) -> None:
    with pytest.raises(DataError, match=message) as error:
        load_prompt_dataset(_write(tmp_path / "d.jsonl", rows), tokenizer)
    assert "\n" not in str(error.value)


def test_bad_rows_are_skipped_and_counted_when_configured(tmp_path, tokenizer) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(
        '{"prompt": "1+1=", "answer": "2"}\n'
        '{"prompt": "", "answer": "0"}\n'  # row 2: empty
        "{broken\n"  # row 3: not JSON
        '{"prompt": "123456789+1=", "answer": "x"}\n'  # row 4: 12 tokens > 8
        '{"prompt": "2+2="}\n'  # row 5: no answer column
        "\n"
        '{"prompt": "3+3=", "answer": "6"}\n'  # row 7
    )
    dataset = load_prompt_dataset(path, tokenizer, max_prompt_tokens=8, skip_bad_rows=True)
    assert dataset.prompts == ["1+1=", "3+3="] and dataset.columns["answer"] == ["2", "6"]
    assert dataset.skipped == {
        "empty prompt": [2],
        "not a JSON object": [3],
        "over data.max_prompt_tokens = 8": [4],
        "missing column(s) ['answer']": [5],
    }
    assert dataset.describe_skipped() == (
        f"{path}: 4 row(s) skipped: 1 not a JSON object (row 3); 1 empty prompt (row 2); "
        "1 over data.max_prompt_tokens = 8 (row 4); 1 missing column(s) ['answer'] (row 5)"
    )
