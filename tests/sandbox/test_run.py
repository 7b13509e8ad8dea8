"""``run_program``: the sandbox runs any command, not only Python, under the same limits."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from grpo.sandbox import SandboxError, SandboxLimits, run_program, sandbox_isolation

if sys.platform != "linux":
    pytest.skip("the sandbox is Linux-only", allow_module_level=True)

LIMITS = SandboxLimits(timeout_s=2.0, output_bytes=1 << 16)


def sh(script: str, files: dict[str, str] | None = None, **options: object):
    return run_program(files or {}, ["sh", "-c", script], limits=LIMITS, **options)  # type: ignore[arg-type]


def test_a_shell_command_runs_in_its_directory_with_its_files() -> None:
    result = sh("cat data.txt; pwd; echo done >&3", {"data.txt": "hello\n"}, pass_control=True)
    assert result.ok
    assert result.stdout.startswith(b"hello\n")
    assert result.control == b"done\n"
    assert result.isolation == sandbox_isolation()


def test_an_unknown_program_is_an_error() -> None:
    with pytest.raises(SandboxError, match="program not found: no-such-program"):
        run_program({}, ["no-such-program"])


def test_the_limits_apply_to_any_program() -> None:
    started = time.monotonic()
    looping = sh("while :; do :; done")
    assert looping.timed_out and not looping.ok
    assert time.monotonic() - started < LIMITS.timeout_s + 3
    flooding = sh("yes")
    assert flooding.output_capped and len(flooding.stdout) == LIMITS.output_bytes


@pytest.mark.skipif("mountns" not in sandbox_isolation(), reason="needs a mount namespace")
def test_it_cannot_write_outside_its_directory(tmp_path: Path) -> None:
    target = tmp_path / "escaped"
    result = sh(f"echo x > {target} && echo written; echo x > here && echo kept")
    assert result.stdout == b"kept\n"
    assert not target.exists()


@pytest.mark.skipif("mountns" not in sandbox_isolation(), reason="needs a mount namespace")
def test_more_directories_can_be_hidden() -> None:
    assert sh("ls -A /usr/share/doc | wc -l").stdout.strip() != b"0"
    assert sh("ls -A /usr/share/doc | wc -l", hide=["/usr/share/doc"]).stdout.strip() == b"0"
