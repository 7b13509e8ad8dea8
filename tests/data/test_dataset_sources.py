"""Datasets named the way users name them: a Hub dataset id, a folder of data files laid out
as a Hub repository (its configurations and splits chosen by data.config and data.split), a
save_to_disk folder of splits. The Hub itself, offline, is in tests/models/test_hub_offline.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from grpo.data.dataset import DataError, load_prompt_dataset
from grpo.data.files import is_hub_dataset_id

datasets = pytest.importorskip("datasets")

# Two configurations, as a Hub dataset card declares them.
README = """---
configs:
- config_name: sums
  data_files:
  - split: train
    path: sums/train.parquet
  - split: test
    path: sums/test.parquet
  default: true
- config_name: products
  data_files:
  - split: train
    path: products/train.parquet
  - split: test
    path: products/test.parquet
---
"""


@pytest.fixture(scope="module")
def tokenizer():
    from grpo.demo.tokenizer import build_char_tokenizer

    return build_char_tokenizer()


def _rows(sign: str, numbers: range) -> list[dict[str, str]]:
    answer = {"+": lambda n: n + n, "*": lambda n: n * n}[sign]
    return [{"prompt": f"{n}{sign}{n}=", "answer": str(answer(n))} for n in numbers]


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    folder = tmp_path / "arith"
    for name, sign in (("sums", "+"), ("products", "*")):
        for split, numbers in (("train", range(1, 5)), ("test", range(7, 9))):
            path = folder / name / f"{split}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            datasets.Dataset.from_list(_rows(sign, numbers)).to_parquet(str(path))
    (folder / "README.md").write_text(README)
    return folder


def test_a_folder_of_data_files_is_read_by_configuration_and_split(repository, tokenizer) -> None:
    default = load_prompt_dataset(repository, tokenizer)
    assert default.prompts == ["1+1=", "2+2=", "3+3=", "4+4="]  # the default config, train
    products = load_prompt_dataset(repository, tokenizer, dataset_config="products", split="test")
    assert products.prompts == ["7*7=", "8*8="]
    assert products.columns["answer"] == ["49", "64"]
    assert products.where(1) == f"{repository}: row 2"


def test_an_unknown_configuration_or_split_is_one_line(repository, tokenizer) -> None:
    with pytest.raises(DataError) as error:
        load_prompt_dataset(repository, tokenizer, split="validation")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"{repository}: cannot load it with data.config = '' and split ")
    assert "validation" in message
    with pytest.raises(DataError, match=r"data\.config = 'quotients'"):
        load_prompt_dataset(repository, tokenizer, dataset_config="quotients")


def test_a_save_to_disk_folder_of_splits_gives_the_split_named(tmp_path, tokenizer) -> None:
    splits = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list(_rows("+", range(1, 3))),
            "test": datasets.Dataset.from_list(_rows("*", range(5, 6))),
        }
    )
    splits.save_to_disk(str(tmp_path / "splits"))
    assert load_prompt_dataset(tmp_path / "splits", tokenizer, split="test").prompts == ["5*5="]
    with pytest.raises(DataError, match=r"holds the splits \['test', 'train'\]: .* data.split"):
        load_prompt_dataset(tmp_path / "splits", tokenizer, split="dev")


def test_what_is_taken_for_a_hub_dataset_id(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "local" / "folder").mkdir(parents=True)
    assert is_hub_dataset_id("openai/gsm8k")
    assert is_hub_dataset_id("openai/gsm8k@main")
    assert is_hub_dataset_id("org/data.v2")
    assert not is_hub_dataset_id("local/folder")  # it exists here
    assert not is_hub_dataset_id("data/train.jsonl")  # a data file's name
    assert not is_hub_dataset_id("runs/x/train.parquet")
    assert not is_hub_dataset_id("./org/name")
    assert not is_hub_dataset_id("gsm8k")
