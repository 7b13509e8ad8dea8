"""A ``.gguf`` file converted once into plain Hugging Face folders in grpo's cache.

transformers reads the whole file each time it is asked for the config, the tokenizer or
the weights: the vocabulary and merges are parsed anew every time, and the weights
dequantized. For SmolLM2-135M that is 30-60 s on a CPU core, paid by every process that
loads it (the policy, ``grpo eval``, each async rollout worker, a resume). The first load
writes what it made under ``<cache>/gguf/<file stem>-<key>/``:

- ``config.json``: the config transformers derives from the file's metadata;
- ``tokenizer/``: the tokenizer, its BOS, EOS and pad as the file's metadata names them
  (:func:`grpo.models.gguf_loading.match_gguf_special_tokens`), its chat template;
- ``float32/``, ``bfloat16/``, …: the dequantized weights in that dtype, as safetensors.

Every later load reads those folders, in seconds. ``<key>`` hashes the file's absolute path,
size and modification time and the transformers version: a changed file, or a transformers
that may convert differently, converts anew. The cache is ``$GRPO_CACHE``, else
``$XDG_CACHE_HOME/grpo``, else ``~/.cache/grpo``; the weights take 4 bytes per parameter in
float32 (540 MB for SmolLM2-135M), and deleting the folder only costs a new conversion.
Processes that convert the same file at once (torchrun ranks, test workers) wait for one
another on a file lock; each folder appears whole or not at all.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn


def grpo_cache_dir() -> Path:
    """Where grpo keeps what it fetches and converts: ``$GRPO_CACHE``, else
    ``$XDG_CACHE_HOME/grpo``, else ``~/.cache/grpo``."""
    if os.environ.get("GRPO_CACHE"):
        return Path(os.environ["GRPO_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "grpo"


def gguf_cache_folder(gguf_file: Path) -> Path:
    """The folder that holds what was converted from ``gguf_file``."""
    import transformers

    path = gguf_file.resolve()
    stat = path.stat()
    identity = f"{path}\n{stat.st_size}\n{stat.st_mtime_ns}\n{transformers.__version__}"
    key = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return grpo_cache_dir() / "gguf" / f"{path.stem}-{key}"


def cached_gguf_config(gguf_file: Path) -> Any:
    """The config transformers derives from the file (``AutoConfig``), converted once."""
    from transformers import AutoConfig

    def convert(partial: Path) -> None:
        config = AutoConfig.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
        config.save_pretrained(str(partial))

    return AutoConfig.from_pretrained(str(_converted(gguf_file, "config", convert)))


def cached_gguf_tokenizer(gguf_file: Path, build: Callable[[], Any]) -> Any:
    """The tokenizer, built once by ``build`` (from the file, its special tokens checked)."""
    from transformers import AutoTokenizer

    def convert(partial: Path) -> None:
        build().save_pretrained(str(partial))

    return AutoTokenizer.from_pretrained(str(_converted(gguf_file, "tokenizer", convert)))


def cached_gguf_model(
    gguf_file: Path, dtype: torch.dtype, build: Callable[[], nn.Module]
) -> nn.Module:
    """The causal LM in ``dtype``, dequantized once by ``build``; the call that converts
    returns the model it built, later ones load the folder it saved."""
    from transformers import AutoModelForCausalLM

    built: list[nn.Module] = []

    def convert(partial: Path) -> None:
        built.append(build())
        built[0].save_pretrained(str(partial), safe_serialization=True)

    folder = _converted(gguf_file, str(dtype).removeprefix("torch."), convert)
    if built:
        return built[0]
    return AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)


def _converted(gguf_file: Path, part: str, convert: Callable[[Path], None]) -> Path:
    """``<cache folder>/<part>``, made by ``convert(partial folder)`` unless it is there."""
    from filelock import FileLock  # a dependency of huggingface_hub, hence of transformers

    root = gguf_cache_folder(gguf_file)
    folder = root / part
    if folder.is_dir():
        return folder
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f".{part}.lock")):
        if folder.is_dir():  # another process converted it while this one waited
            return folder
        partial = root / f".{part}.partial-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        try:
            convert(partial)
            os.replace(partial, folder)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    if part not in ("config", "tokenizer"):
        print(
            f"grpo: {gguf_file.name} converted to a plain folder in {folder}; later "
            "loads read it from there",
            file=sys.stderr,
        )
    return folder
