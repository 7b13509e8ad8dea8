"""A tiny model whose character tokenizer has all of printable ASCII (tool calls need
``<``, ``{`` and quotes), and a scripted turn engine that "samples" given texts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from grpo.rollout.engine import RolloutRequest
from grpo.rollout.turns import TurnEngine, TurnOutput, TurnSession

ASCII = [chr(code) for code in range(32, 127)] + ["\n"]


def ascii_tokenizer() -> Any:
    from grpo.demo.tokenizer import build_char_tokenizer

    return build_char_tokenizer(alphabet=ASCII)


@pytest.fixture(scope="session")
def ascii_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from grpo.demo.model import build_tiny_llama
    from grpo.demo.tokenizer import build_char_tokenizer

    directory = tmp_path_factory.mktemp("ascii_model")
    tokenizer = build_char_tokenizer(directory, alphabet=ASCII)
    build_tiny_llama(tokenizer, hidden_size=32, layers=2, heads=2, directory=directory)
    return directory


class ScriptedEngine(TurnEngine):
    """Every row writes ``scripts[k]`` on its turn k, ended by EOS (log-prob −1 per token);
    a subclass may choose the text from the row's prompt (:meth:`text`)."""

    def __init__(self, tokenizer: Any, model: Any, scripts: list[str]) -> None:
        self.tokenizer, self.model, self.scripts = tokenizer, model, scripts
        self.pad_token_id = tokenizer.pad_token_id

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def text(self, prompt: str, turn: int) -> str:
        return self.scripts[min(turn, len(self.scripts) - 1)]

    def start_turns(self, request: RolloutRequest, max_model_tokens: int) -> TurnSession:
        engine, turns = self, {}
        prompts = [self.tokenizer.decode(ids) for ids in request.prompt_token_ids]

        class Session(TurnSession):
            def generate(
                self, rows: list[int], inserted: list[list[int]], max_new_tokens: list[int]
            ) -> list[TurnOutput]:
                outputs = []
                for row in rows:
                    turn = turns.get(row, 0)
                    turns[row] = turn + 1
                    prompt = prompts[(request.start + row) // request.group_size]
                    text = engine.text(prompt, turn)
                    ids = engine.tokenizer(text, add_special_tokens=False)["input_ids"]
                    ids = [*ids, engine.tokenizer.eos_token_id]
                    outputs.append(TurnOutput(ids, [-1.0] * len(ids), True))
                return outputs

        return Session()


# --- SmolLM2: the real BPE tokenizer and chat template ---------------------------------------


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_tokenizer_dir: Path) -> Any:
    """SmolLM2-135M-Instruct's tokenizer (BPE, 49,152 ids, ChatML template with a default
    system turn), as ``grpo`` loads it from the GGUF."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(smollm2_tokenizer_dir))


@pytest.fixture(scope="session")
def replay_model_dir(smollm2_tokenizer: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model with SmolLM2's tokenizer that replays the scripts of
    :mod:`tests.agents.replay` (and their prompts.jsonl)."""
    from .replay import build_replaying_llama

    directory = tmp_path_factory.mktemp("smollm2_replay")
    build_replaying_llama(smollm2_tokenizer, directory)
    return directory
