"""Checkpoints: weights via ``save_pretrained`` (safetensors) plus the state needed to resume.

Layout::

    RUN_DIR/checkpoints/
      step-12/                   one complete checkpoint (the last train.keep_checkpoints kept)
        model.safetensors …      the policy (or its LoRA adapter) and the tokenizer
        trainer_state.pt         optimizer, LR scheduler, torch RNG, rollout generator,
                                 prompt-sampler state (torch.save; loaded weights_only=True)
        trainer_state.json       step, python/numpy RNG, the file manifest (written last)
        run_config.json          the resolved config of the run that wrote it
      latest                     "step-12": the newest complete checkpoint (replaced last)

A checkpoint is written into ``.tmp-step-K``, every file fsynced, then renamed to
``step-K`` in one atomic ``rename``; ``latest`` is replaced atomically after that and old
checkpoints are removed only then (renamed to ``.trash-…`` first, so a half-deleted one
never carries a ``step-K`` name). A process killed at any moment leaves ``latest`` naming
a complete checkpoint. Nothing is read back with unrestricted pickle: safetensors, JSON,
and ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

FORMAT_VERSION = 1
CHECKPOINTS = "checkpoints"
LATEST = "latest"
TENSOR_STATE = "trainer_state.pt"
PLAIN_STATE = "trainer_state.json"  # written last: its presence marks a complete folder
RUN_CONFIG = "run_config.json"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message names the folder and the reason."""


def save_model(
    model: nn.Module,
    tokenizer: Any,
    directory: Path,
    *,
    merge_lora: bool = False,
    state_dict: dict[str, torch.Tensor] | None = None,
) -> None:
    """Save in Hugging Face format; with ``merge_lora`` a LoRA model is saved merged.

    ``state_dict`` replaces the model's own (the gathered full weights of an FSDP-sharded
    model, whose parameters here are only this process's shards).
    """
    directory.mkdir(parents=True, exist_ok=True)
    to_save = model
    if merge_lora and hasattr(model, "merge_and_unload"):
        import copy

        to_save = copy.deepcopy(model).merge_and_unload()
    extra = {} if state_dict is None else {"state_dict": _without_tied_aliases(to_save, state_dict)}
    to_save.save_pretrained(str(directory), safe_serialization=True, **extra)
    tokenizer.save_pretrained(str(directory))
    _fix_fsdp_architecture(to_save, directory)


def _without_tied_aliases(
    model: nn.Module, state_dict: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Drop the later names of tied parameters (lm_head = embeddings), as save_pretrained
    does for the model's own weights: a gathered state dict holds them as separate copies."""
    first_name: dict[int, str] = {}
    aliases = set()
    for name, parameter in model.state_dict(keep_vars=True).items():
        if id(parameter) in first_name:
            aliases.add(name)
        first_name.setdefault(id(parameter), name)
    return {name: tensor for name, tensor in state_dict.items() if name not in aliases}


def _fix_fsdp_architecture(model: nn.Module, directory: Path) -> None:
    """FSDP2 swaps the model's class for FSDP<Name>; config.json must name <Name>."""
    cls = type(model)
    if not cls.__name__.startswith("FSDP"):
        return
    original = next((c for c in cls.__mro__[1:] if c.__name__ == cls.__name__[4:]), None)
    path = directory / "config.json"
    if original is None or not path.exists():
        return
    config = json.loads(path.read_text())
    config["architectures"] = [original.__name__]
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


# --- RNG streams -------------------------------------------------------------------------


def rng_state(generator: torch.Generator) -> tuple[dict[str, Any], dict[str, Any]]:
    """(plain, tensors): python and numpy streams as JSON, torch's as tensors."""
    version, words, gauss = random.getstate()
    plain: dict[str, Any] = {"python": [version, list(words), gauss]}
    numpy = _numpy()
    if numpy is not None:
        name, keys, position, has_gauss, cached = numpy.random.get_state()
        plain["numpy"] = [name, keys.tolist(), int(position), int(has_gauss), float(cached)]
    tensors = {"torch": torch.get_rng_state(), "rollout_generator": generator.get_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        tensors["cuda"] = torch.cuda.get_rng_state_all()
    return plain, tensors


def restore_rng(plain: dict[str, Any], tensors: dict[str, Any], generator: torch.Generator) -> None:
    version, words, gauss = plain["python"]
    random.setstate((version, tuple(words), gauss))
    numpy = _numpy()
    if numpy is not None and "numpy" in plain:
        name, keys, position, has_gauss, cached = plain["numpy"]
        numpy.random.set_state(
            (name, numpy.array(keys, dtype=numpy.uint32), position, has_gauss, cached)
        )
    torch.set_rng_state(tensors["torch"])
    generator.set_state(tensors["rollout_generator"])
    if "cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(tensors["cuda"])


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:  # numpy is not a dependency; its stream is saved when it is there
        return None
    return numpy


def portable_state(value: Any, where: str = "sampler_state") -> Any:
    """``value`` as what ``torch.load(weights_only=True)`` reads back: nested dicts, lists
    and tuples of str/int/float/bool/None and tensors. numpy arrays and scalars become
    lists and Python numbers; anything else is a TypeError naming where it sits."""
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):  # np.float64 is a float
        return value.tolist()
    if value is None or isinstance(value, (str, int, float, bool, torch.Tensor)):
        return value
    if isinstance(value, dict):
        return {key: portable_state(item, f"{where}[{key!r}]") for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        items = [portable_state(item, f"{where}[{i}]") for i, item in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    raise TypeError(f"{where}: a {type(value).__name__} cannot be saved in a checkpoint")


# --- writing -----------------------------------------------------------------------------


def checkpoints_dir(run_dir: Path) -> Path:
    return Path(run_dir) / CHECKPOINTS


def save_checkpoint(
    run_dir: Path,
    *,
    step: int,
    model: nn.Module,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    sampler_state: dict[str, Any],
    generator: torch.Generator,
    config: dict[str, Any],
    keep: int = 2,
    model_state: dict[str, torch.Tensor] | None = None,
    optimizer_state: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write RUN_DIR/checkpoints/step-``step`` atomically, point ``latest`` at it, keep
    the newest ``keep``. ``model_state``/``optimizer_state`` replace the model's and
    optimizer's own state dicts (the gathered full ones under FSDP); ``extra`` is plain
    JSON state of other parts (the asynchronous rollouts' requested prompts)."""
    root = checkpoints_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{step}"
    staging, final = root / f".tmp-{name}", root / name
    remove_folder(staging)
    save_model(model, tokenizer, staging, state_dict=model_state)
    plain_rng, tensor_rng = rng_state(generator)
    torch.save(
        {
            "optimizer": optimizer.state_dict() if optimizer_state is None else optimizer_state,
            "scheduler": scheduler.state_dict(),
            "sampler": portable_state(sampler_state),
            "rng": tensor_rng,
        },
        staging / TENSOR_STATE,
    )
    (staging / RUN_CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    manifest = {p.name: p.stat().st_size for p in sorted(staging.iterdir()) if p.is_file()}
    plain = {"format": FORMAT_VERSION, "step": step, "rng": plain_rng, "files": manifest}
    if extra:
        plain["extra"] = extra
    (staging / PLAIN_STATE).write_text(json.dumps(plain) + "\n")
    for path in staging.iterdir():
        _fsync(path)
    _fsync(staging)
    if final.exists():  # left by a run killed before it moved `latest` past it: redone now
        remove_folder(final)
    staging.rename(final)
    _fsync(root)
    write_atomically(root / LATEST, name + "\n")
    for old in list_checkpoints(run_dir)[:-keep]:
        remove_folder(old)
    return final


def write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".tmp-{path.name}")
    with temporary.open("w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    _fsync(path.parent)


def _fsync(path: Path) -> None:
    """Flush a file's (or a folder's entries') data to disk: an atomic rename of unflushed
    files could leave empty files after a power cut."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def remove_folder(path: Path) -> None:
    """Rename out of the way first, so a kill mid-delete leaves no torn ``step-K``."""
    if not path.exists():
        return
    trash = path.with_name(f".trash-{path.name.removeprefix('.tmp-')}")
    shutil.rmtree(trash, ignore_errors=True)
    path.rename(trash)
    shutil.rmtree(trash, ignore_errors=True)


# --- finding and reading ---------------------------------------------------------------


def step_of(path: Path) -> int | None:
    number = path.name.removeprefix("step-")
    return int(number) if path.name.startswith("step-") and number.isdigit() else None


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoint folders, oldest first."""
    root = checkpoints_dir(run_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if step_of(p) is not None and (p / PLAIN_STATE).exists()]
    return sorted(found, key=lambda p: step_of(p) or 0)


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The folder ``latest`` names; without a usable pointer, the newest complete folder."""
    root = checkpoints_dir(run_dir)
    with contextlib.suppress(FileNotFoundError):
        named = root / (root / LATEST).read_text().strip()
        if step_of(named) is not None and (named / PLAIN_STATE).exists():
            return named
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def load_checkpoint(directory: Path) -> dict[str, Any]:
    """{"step", "rng" (plain), "tensors": {optimizer, scheduler, sampler, rng}} of a folder."""
    try:
        plain = json.loads((directory / PLAIN_STATE).read_text())
        tensors = torch.load(directory / TENSOR_STATE, map_location="cpu", weights_only=True)
    except (OSError, ValueError, RuntimeError) as error:
        raise CheckpointError(f"{directory}: unreadable checkpoint ({error})") from None
    if plain.get("format") != FORMAT_VERSION:
        raise CheckpointError(
            f"{directory}: checkpoint format {plain.get('format')!r}, "
            f"this version reads {FORMAT_VERSION}"
        )
    return {**plain, "tensors": tensors}


def read_extra(directory: Path) -> dict[str, Any]:
    """The ``extra`` state a checkpoint was saved with ({} without any)."""
    try:
        return json.loads((directory / PLAIN_STATE).read_text()).get("extra", {})
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{directory}: unreadable checkpoint ({error})") from None


def verify_checkpoint(directory: Path) -> int:
    """Read every part of a checkpoint back (sizes against the manifest, each safetensors
    file's tensors, the trainer state); its step, or a CheckpointError naming the part."""
    from safetensors import safe_open

    state = load_checkpoint(directory)
    for name, size in state["files"].items():
        path = directory / name
        if not path.is_file() or path.stat().st_size != size:
            raise CheckpointError(f"{directory}: {name} is missing or not {size} bytes")
        if name.endswith(".safetensors"):
            try:
                with safe_open(str(path), framework="pt") as weights:
                    for key in weights.keys():  # noqa: SIM118 (safe_open is not a dict)
                        weights.get_tensor(key)
            except Exception as error:  # safetensors raises its own error types
                raise CheckpointError(f"{path}: unreadable weights ({error})") from None
    return int(state["step"])
