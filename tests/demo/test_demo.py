"""The demo's splits, its training config and the order of its results table."""

from __future__ import annotations

from pathlib import Path

from grpo.config import load_config
from grpo.demo.run import demo_splits, evaluate_by_kind, write_demo_config


def test_train_dev_and_test_are_distinct_problems_with_no_overlap() -> None:
    train, dev, test = demo_splits()
    assert (len(train), len(dev), len(test)) == (4000, 200, 300)
    prompts = [{row["prompt"] for row in rows} for rows in (train, dev, test)]
    assert [len(p) for p in prompts] == [4000, 200, 300]  # no problem twice within a split
    assert not (prompts[0] & prompts[1] or prompts[0] & prompts[2] or prompts[1] & prompts[2])


def test_the_evaluation_during_training_uses_the_dev_split(tmp_path: Path) -> None:
    paths = {name: tmp_path / f"{name}.jsonl" for name in ("train", "dev")}
    config_path = write_demo_config(
        tmp_path,
        base_dir=tmp_path / "base",
        train_path=paths["train"],
        dev_path=paths["dev"],
        run_dir=tmp_path / "run",
    )
    config = load_config(config_path)
    assert config.eval.path == str(paths["dev"])
    assert config.data.train_path == str(paths["train"])


def test_the_table_lists_the_kinds_alphabetically_and_the_total_last(tiny_model_dir) -> None:
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from grpo.data.dataset import PromptDataset

    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(tiny_model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir)).eval()
    rows = [{"prompt": p, "answer": "0"} for p in ("12+34=", "5*6=", "40-13=", "3+4=")]
    dataset = PromptDataset(
        source="rows",
        prompts=[row["prompt"] for row in rows],
        prompt_token_ids=[tokenizer(row["prompt"])["input_ids"] for row in rows],
        columns={"answer": [row["answer"] for row in rows]},
    )
    by_kind, _ = evaluate_by_kind(model, tokenizer, dataset, max_new_tokens=2)
    assert list(by_kind) == [
        "add 1-digit",
        "add 2-digit",
        "multiply 1-digit",
        "subtract 2-digit",
        "all",
    ]


def test_a_warm_start_is_reused_only_when_its_recipe_and_model_are_there(tmp_path: Path) -> None:
    from grpo.demo.warm_start import record_warm_start, recorded_warm_start, warm_start_recipe

    recipe = warm_start_recipe("arithmetic", target=0.3, chunk=50)
    outcome = {"steps": 700, "probe_accuracy": 0.345}
    record_warm_start(tmp_path, recipe, outcome)
    assert recorded_warm_start(tmp_path, recipe) is None  # no model saved beside it
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert recorded_warm_start(tmp_path, recipe) == outcome
    assert recorded_warm_start(tmp_path, {**recipe, "torch": "0.0"}) is None  # another torch
    assert recorded_warm_start(tmp_path, {**recipe, "chunk": 100}) is None
    assert recorded_warm_start(tmp_path / "elsewhere", recipe) is None
