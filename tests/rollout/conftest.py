"""A stand-in for the ``vllm`` module, for the vLLM engine's tests on CPU."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import torch


@pytest.fixture
def install_vllm(monkeypatch) -> Callable[[type], Any]:
    """install(LLM class) → the stand-in module: ``import vllm`` gives it, CUDA 'is
    available', and the torchrun variables are a lone process's."""

    def install(llm_class: type) -> Any:
        module = SimpleNamespace(
            LLM=llm_class, SamplingParams=lambda **kwargs: SimpleNamespace(**kwargs)
        )
        monkeypatch.setitem(sys.modules, "vllm", module)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
        for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", "29500")
        return module

    return install
