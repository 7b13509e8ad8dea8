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
