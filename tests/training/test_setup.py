"""The set-up is the edge where config sections become the plain values of the layers
below: each key reaches its loader, sampler or display unchanged."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from grpo.config import Config, CurriculumConfig, ModelConfig, TrainConfig, load_config
from grpo.data.dataset import load_dataset_for
from grpo.data.sampler import CurriculumSettings
from grpo.models.loading import LoraSpec, lora_spec
from grpo.training.setup import _curriculum_settings, _progress

DATA = Path(__file__).resolve().parents[1] / "data"  # the sample files of tests/data


def test_data_keys_reach_the_loader() -> None:
    from grpo.demo.tokenizer import build_char_tokenizer

    config = load_config(
        None,
        [
            "--model.path=m",
            f"--data.train_path={DATA / 'math_sample.jsonl'}",
            "--data.prompt_column=problem",
            '--data.column_map={ answer = "solution" }',
            "--data.answer_format=math",
            "--data.max_prompt_tokens=1000",
            '--rewards=[{ function = "grpo.rewards:math_equivalence" }]',
        ],
    )
    dataset = load_dataset_for(config.data.train_path, build_char_tokenizer(), config.data)
    assert dataset.columns["answer"][1] == "8"


def test_the_sampler_settings_are_the_curriculum_keys_with_their_defaults() -> None:
    defaults = CurriculumConfig()
    for field in dataclasses.fields(CurriculumSettings):
        assert getattr(CurriculumSettings(), field.name) == getattr(defaults, field.name)
    config = CurriculumConfig(enabled=True, strength=2.0, exploration=0.3, half_life_steps=7.0)
    settings = _curriculum_settings(config)
    assert (settings.enabled, settings.strength, settings.exploration) == (True, 2.0, 0.3)
    assert settings.half_life_steps == 7.0


def test_lora_keys_become_a_spec_and_rank_0_none() -> None:
    assert lora_spec(ModelConfig()) is None
    model = ModelConfig(lora_rank=8, lora_alpha=32.0, lora_dropout=0.1, lora_target_modules=["q"])
    assert lora_spec(model) == LoraSpec(rank=8, alpha=32.0, dropout=0.1, target_modules=("q",))


@pytest.mark.parametrize(
    ("progress", "quiet", "shown", "mode"),
    [(True, False, True, "bar"), (True, True, True, "quiet"), (False, False, True, "off"),
     (True, False, False, "off")],
)  # fmt: skip
def test_progress_keys_pick_the_display(progress, quiet, shown, mode, monkeypatch) -> None:
    monkeypatch.setattr("grpo.log.progress.on_terminal", lambda: True)
    train = TrainConfig(steps=3, progress=progress, quiet=quiet)
    display = _progress(Config(train=train), 0, shown=shown)()
    display.close()
    assert (display.mode, display.total_steps) == (mode, 3)
