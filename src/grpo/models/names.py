"""What a model named in the config is, decided in one place, and the checks on it that read
no weights.

A name is, in this order:

- an existing local directory: a Hugging Face folder, as ``save_pretrained`` writes it;
- a path ending in ``.gguf``: a llama.cpp file, which transformers dequantizes (the ``gguf``
  extra);
- a Hub id ``org/name``, with an optional revision as ``org/name@rev`` (a branch, tag or commit),
  loaded through ``from_pretrained``, so the hub cache, ``HF_HOME``, ``HF_HUB_CACHE`` and
  ``HF_HUB_OFFLINE`` apply as they do for transformers itself.

Anything else is a :class:`ModelError` naming the config key. :func:`model_name` only parses;
:func:`check_model_name` looks at the files (a GGUF's header, a Hub id's place in the cache
when offline, the architecture in the config) and is run at start-up, before any model loads.

>>> model_name("HuggingFaceTB/SmolLM2-135M-Instruct@main", "model.path").pretrained()
('HuggingFaceTB/SmolLM2-135M-Instruct', {'revision': 'main'})
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from grpo.models.gguf_cache import cached_gguf_config

NameKind = Literal["folder", "gguf", "hub"]
# What the named thing must be: the policy (a causal LM), a tokenizer, or a reward model.
Role = Literal["causal_lm", "tokenizer", "sequence_classifier"]

FORMS = "a model is a local folder, a .gguf file or a Hub id org/name[@revision]"
_HUB_ID = re.compile(r"(?P<repo>[^/@\s]+/[^/@\s]+)(@(?P<revision>[^@\s]*))?")
GGUF_MAGIC = b"GGUF"


class ModelError(ValueError):
    """A model or tokenizer that cannot be loaded; the message is one line naming the key."""


@dataclass(frozen=True)
class ModelName:
    """A model name from the config, parsed: ``location`` is the folder, the ``.gguf`` file or
    the Hub repository id; ``revision`` only for a Hub id."""

    key: str  # the config key it came from, for errors
    text: str  # as written
    kind: NameKind
    location: str
    revision: str | None = None

    def pretrained(self) -> tuple[str, dict[str, Any]]:
        """``from_pretrained``'s first argument and the keywords that say where to look."""
        if self.kind == "gguf":
            path = Path(self.location)
            return str(path.parent), {"gguf_file": path.name}
        if self.kind == "hub" and self.revision:
            return self.location, {"revision": self.revision}
        return self.location, {}

    def __str__(self) -> str:
        return self.text


def model_name(text: str, key: str) -> ModelName:
    """Parse ``text`` (the value of config key ``key``); a :class:`ModelError` when it is none
    of the three forms. Only an existing directory is looked at on disk."""
    if not text:
        raise ModelError(f"{key} is empty ({FORMS})")
    path = Path(text).expanduser()
    if path.is_dir():
        return ModelName(key, text, "folder", text if path == Path(text) else str(path))
    if text.lower().endswith(".gguf"):
        return ModelName(key, text, "gguf", str(path))
    hub = _HUB_ID.fullmatch(text)
    if hub is None or text.startswith((".", "~")):
        what = "a file, not a model folder" if path.exists() else "no local model directory"
        raise ModelError(f"{key}: {text!r} is {what} ({FORMS})")
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(hub["repo"])
    except HFValidationError as error:
        raise ModelError(f"{key}: {text!r} is not a valid Hub id: {error} ({FORMS})") from None
    if hub["revision"] == "":
        raise ModelError(f"{key}: {text!r}: the revision after '@' is empty ({FORMS})")
    return ModelName(key, text, "hub", hub["repo"], hub["revision"])


def check_model_name(name: ModelName, role: Role) -> None:
    """What can be known without loading weights, as one-line :class:`ModelError` s: a
    folder's ``config.json``; a ``.gguf`` file's presence, magic bytes and architecture
    (transformers must know how to dequantize it); a Hub id cached when offline; and for a
    model, that its architecture is a causal LM (or a sequence classifier for a reward
    model). Reads at most a config (a GGUF's metadata), never a weight."""
    if name.kind == "gguf":
        check_gguf_file(name)
        if role == "sequence_classifier":
            raise ModelError(
                f"{name.key}: {name} is a .gguf file, which holds a causal LM; a reward model "
                "is a Hugging Face folder or Hub id (AutoModelForSequenceClassification)"
            )
    elif name.kind == "folder" and role != "tokenizer":
        if not (Path(name.location) / "config.json").is_file():
            raise ModelError(
                f"{name.key}: {name} has no config.json: not a Hugging Face model folder"
            )
    elif name.kind == "hub":
        _check_cached_when_offline(name, role)
    if role != "tokenizer":
        _check_architecture(name, role)


def check_gguf_file(name: ModelName) -> None:
    """The cheap checks of a ``.gguf`` name, also made on loading: the file exists, begins
    with the GGUF magic bytes, and the packages that read it are installed."""
    path = Path(name.location)
    if not path.is_file():
        raise ModelError(f"{name.key}: no .gguf file at {name.text!r}")
    with path.open("rb") as handle:
        if handle.read(len(GGUF_MAGIC)) != GGUF_MAGIC:
            raise ModelError(
                f"{name.key}: {name} is not a GGUF file (it does not begin with the bytes 'GGUF')"
            )
    try:
        import accelerate  # noqa: F401  (transformers asks for it to load a GGUF)
        import gguf  # noqa: F401
    except ImportError as error:
        raise ModelError(
            f"{name.key}: loading a .gguf file needs the `gguf` extra ({error.name} is "
            "missing): pip install 'grpo[gguf]'"
        ) from None


def _check_cached_when_offline(name: ModelName, role: Role) -> None:
    """Offline (``HF_HUB_OFFLINE``), a Hub id must already be in the hub cache."""
    from huggingface_hub import is_offline_mode, try_to_load_from_cache

    if not is_offline_mode():
        return
    wanted = ["config.json"] if role != "tokenizer" else ["tokenizer_config.json", "tokenizer.json"]
    if any(
        isinstance(try_to_load_from_cache(name.location, file, revision=name.revision), str)
        for file in wanted
    ):
        return
    revision = f" --revision {name.revision}" if name.revision else ""
    raise ModelError(
        f"{name.key}: the Hub model {name.text!r} is not in the hub cache and HF_HUB_OFFLINE is "
        f"set: fetch it first with `hf download {name.location}{revision}` while online (or "
        "name a local folder or .gguf file)"
    )


def _check_architecture(name: ModelName, role: Literal["causal_lm", "sequence_classifier"]) -> None:
    """The config (a GGUF's metadata, turned into one by transformers) names a causal LM, or
    a sequence classifier for a reward model; an architecture transformers cannot read or
    dequantize is named."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING,
        MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING,
    )

    where, options = name.pretrained()
    try:
        if name.kind == "gguf":
            config = cached_gguf_config(Path(name.location))
        else:
            config = AutoConfig.from_pretrained(where, **options)
    except (OSError, ValueError, KeyError) as error:
        doing = "dequantize" if name.kind == "gguf" else "read the config of"
        raise ModelError(
            f"{name.key}: transformers cannot {doing} {name}: {first_line(error)}"
        ) from None
    mapping, auto_class, noun = {
        "causal_lm": (MODEL_FOR_CAUSAL_LM_MAPPING, "AutoModelForCausalLM", "a causal LM"),
        "sequence_classifier": (
            MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING,
            "AutoModelForSequenceClassification",
            "a sequence classifier",
        ),
    }[role]
    if type(config) not in mapping:
        raise ModelError(
            f"{name.key}: {name}: a {config.model_type!r} model is not {noun} ({auto_class})"
        )


def first_line(error: BaseException) -> str:
    """An exception's first line: errors from transformers and the hub run to paragraphs."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


@functools.cache
def _gguf_metadata(path: str, modified_ns: int, size: int) -> dict[str, Any]:
    import gguf

    reader = gguf.GGUFReader(path)
    values: dict[str, Any] = {}
    for key, field in reader.fields.items():
        kind = field.types[0] if field.types else None
        if kind is None or kind == gguf.GGUFValueType.ARRAY or not field.data:
            continue  # the vocabulary and merges: tens of thousands of entries, not needed
        part = field.parts[field.data[0]]
        is_text = kind == gguf.GGUFValueType.STRING
        values[key] = bytes(part).decode("utf-8") if is_text else part.item()
    return values


def gguf_metadata(path: str | Path) -> dict[str, Any]:
    """A GGUF file's scalar metadata (``general.architecture``,
    ``tokenizer.ggml.eos_token_id``, ``tokenizer.chat_template``, …), read with the ``gguf``
    package once per process and file version (a 100 MB file takes seconds to parse)."""
    stat = Path(path).stat()
    return _gguf_metadata(str(path), stat.st_mtime_ns, stat.st_size)
