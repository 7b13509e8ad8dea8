"""``train.compile``: the decoder stack of the policy and of the reference model under
``torch.compile`` (dynamic shapes), for the training passes only.

The training passes run the decoder on a micro-batch of whole sequences, forward and
backward: many small element-wise ops (norms, rotary embedding, activations and their
gradients) around the matmuls, which the compiled graph fuses. Sampling keeps calling the
decoder eagerly (its own compiled step is ``rollout.compile``). The first passes of a run
pay the compilation (minutes on a small CPU; ``compile_seconds``); sequence lengths vary from
step to step, which the dynamic shapes absorb without compiling again. Values and
gradients equal the eager ones up to rounding (fused ops reassociate).
"""

from __future__ import annotations

import time
from typing import Any
from weakref import WeakKeyDictionary

import torch
from torch import nn


class CompileTimed:
    """Calls ``compiled`` (``module`` compiled) and adds to ``seconds`` the calls that
    compiled a new graph; ``module`` is there for look-ups (its cache keyword, its type)."""

    def __init__(self, compiled: Any, module: nn.Module | None = None) -> None:
        self.compiled, self.module, self.seconds = compiled, module, 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from torch._dynamo.utils import counters

        graphs, started = counters["stats"]["unique_graphs"], time.perf_counter()
        out = self.compiled(*args, **kwargs)
        if counters["stats"]["unique_graphs"] != graphs:
            self.seconds += time.perf_counter() - started
        return out


_COMPILED: WeakKeyDictionary[nn.Module, CompileTimed] = WeakKeyDictionary()


def compile_decoder(decoder: nn.Module) -> None:
    """From now on the training passes run ``decoder`` (a causal LM's decoder stack)
    compiled; sampling still calls it eagerly."""
    if decoder not in _COMPILED:
        _COMPILED[decoder] = CompileTimed(torch.compile(decoder, dynamic=True), decoder)


def training_decoder(decoder: nn.Module) -> nn.Module | CompileTimed:
    """The compiled ``decoder`` when :func:`compile_decoder` was called on it, else itself."""
    return _COMPILED.get(decoder, decoder)


def trunk_compile_seconds() -> float:
    """Seconds spent compiling the training passes' decoders, over every model so far."""
    return sum(timed.seconds for timed in _COMPILED.values())
