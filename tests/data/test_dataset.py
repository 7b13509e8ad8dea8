import json

import pytest

from grpo.data.dataset import DataError, load_prompt_dataset


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


# --- formats, column mapping, GSM8K and MATH conventions ---------------------------------

DATA = __import__("pathlib").Path(__file__).parent  # the sample files sit beside this test
ROWS = [
    {"prompt": "1+1=", "answer": "2", "level": 1},
    {"prompt": "2+3=", "answer": "5", "level": 2},
]


def _assert_rows(dataset) -> None:
    assert dataset.prompts == ["1+1=", "2+3="]
    assert [str(a) for a in dataset.columns["answer"]] == ["2", "5"]
    assert dataset.columns["level"] == [1, 2]


def test_reads_csv_tsv_and_a_json_array(tmp_path, tokenizer) -> None:
    (tmp_path / "d.csv").write_text("prompt,answer,level\n1+1=,2,1\n2+3=,5,2\n")
    (tmp_path / "d.tsv").write_text("prompt\tanswer\tlevel\n1+1=\t2\t1\n2+3=\t5\t2\n")
    (tmp_path / "d.json").write_text(json.dumps(ROWS))
    for name in ("d.csv", "d.tsv", "d.json"):
        _assert_rows(load_prompt_dataset(tmp_path / name, tokenizer))


def test_reads_parquet_and_save_to_disk_folders(tmp_path, tokenizer) -> None:
    datasets = pytest.importorskip("datasets")
    table = datasets.Dataset.from_list(ROWS)
    table.to_parquet(str(tmp_path / "d.parquet"))
    table.save_to_disk(str(tmp_path / "saved"))
    _assert_rows(load_prompt_dataset(tmp_path / "d.parquet", tokenizer))
    _assert_rows(load_prompt_dataset(tmp_path / "saved", tokenizer))
    datasets.DatasetDict({"train": table, "test": table}).save_to_disk(str(tmp_path / "splits"))
    with pytest.raises(DataError, match=r"holds the splits \['test', 'train'\]: point at one"):
        load_prompt_dataset(tmp_path / "splits", tokenizer)
    _assert_rows(load_prompt_dataset(tmp_path / "splits" / "train", tokenizer))


def test_unknown_format_and_missing_prompt_column_are_clear_errors(tmp_path, tokenizer) -> None:
    (tmp_path / "d.txt").write_text("1+1=\n")
    with pytest.raises(DataError, match=r"d.txt: unknown dataset format '.txt'"):
        load_prompt_dataset(tmp_path / "d.txt", tokenizer)
    path = _write(tmp_path / "d.jsonl", ROWS)
    with pytest.raises(
        DataError, match=r"no column 'question' \(data.prompt_column\); its columns are"
    ):
        load_prompt_dataset(path, tokenizer, prompt_column="question")


def test_column_map_renames_for_the_rewards_and_names_a_missing_column(tmp_path, tokenizer) -> None:
    path = _write(
        tmp_path / "d.jsonl", [{"q": "1+1=", "target": "2"}, {"q": "2+3=", "target": "5"}]
    )
    dataset = load_prompt_dataset(
        path, tokenizer, prompt_column="q", column_map={"answer": "target"}
    )
    assert dataset.columns == {"target": ["2", "5"], "answer": ["2", "5"]}
    _write(path, [{"q": "1+1=", "target": "2"}, {"q": "2+3=", "goal": "5"}])
    with pytest.raises(
        DataError, match=r"row 2: missing column\(s\).*target \(data.column_map.answer\)"
    ):
        load_prompt_dataset(path, tokenizer, prompt_column="q", column_map={"answer": "target"})


def test_gsm8k_convention_reads_the_answer_after_the_hashes(tokenizer) -> None:
    from grpo.rewards import numeric_answer

    dataset = load_prompt_dataset(
        DATA / "gsm8k_sample.jsonl",
        tokenizer,
        prompt_column="question",
        answer_format="gsm8k",
        max_prompt_tokens=1000,
    )
    assert dataset.columns["answer"] == ["29", "135", "17", "180", "250"]
    assert dataset.prompts[2].startswith("Tom reads 18 pages a day.")
    completions = ["... so 29 pencils. #### 29", "#### 134", "17 days", "It is $180.", "250"]
    scores = numeric_answer(dataset.prompts, completions, dataset.columns["answer"])
    assert scores == [1.0, 0.0, 1.0, 1.0, 1.0]


def test_math_convention_reads_the_last_boxed_answer_of_the_solution(tokenizer) -> None:
    from grpo.rewards import math_equivalence

    dataset = load_prompt_dataset(
        DATA / "math_sample.jsonl",
        tokenizer,
        prompt_column="problem",
        column_map={"answer": "solution"},
        answer_format="math",
        max_prompt_tokens=1000,
    )
    assert dataset.columns["answer"] == ["\\frac{11}{12}", "8", "9", "8\\sqrt{2}", "\\dfrac{3}{8}"]
    assert dataset.columns["level"][0] == "Level 1"
    assert dataset.columns["solution"][1].endswith("$x = \\boxed{8}$.")
    completions = ["\\boxed{11/12}", "x = \\boxed{8}", "\\boxed{6}", "\\boxed{8\\sqrt{2}}", "0.375"]
    scores = math_equivalence(dataset.prompts, completions, dataset.columns["answer"])
    assert scores == [1.0, 1.0, 0.0, 1.0, 1.0]


def test_answer_format_names_the_row_without_an_answer(tmp_path, tokenizer) -> None:
    path = _write(
        tmp_path / "d.jsonl", [{"q": "1+1=", "answer": "2 #### 2"}, {"q": "a", "answer": "2"}]
    )
    with pytest.raises(
        DataError, match=r"row 2: data.answer_format = 'gsm8k' but its answer has no"
    ):
        load_prompt_dataset(path, tokenizer, prompt_column="q", answer_format="gsm8k")
    with pytest.raises(DataError, match=r"'math' reads the 'answer' column, which it lacks"):
        load_prompt_dataset(
            _write(tmp_path / "e.jsonl", [{"q": "1", "solution": "\\boxed{1}"}]),
            tokenizer,
            prompt_column="q",
            answer_format="math",
        )
