"""The built-in ``python`` tool: the model's code runs in the sandbox (:mod:`grpo.sandbox`)
with the code reward's default limits, and the model reads its exit status, stdout and
stderr, each cut to :data:`MAX_STREAM_CHARS`."""

from __future__ import annotations

from grpo.sandbox import SandboxLimits, run_python

# The code reward's defaults (grpo.rewards.code.code_reward): 5 s, 1 GiB, 32 processes.
LIMITS = SandboxLimits(timeout_s=5.0, memory_mb=1024, max_processes=32, output_bytes=1 << 20)
MAX_STREAM_CHARS = 2000


def _cut(data: bytes) -> str:
    text = data.decode(errors="replace")
    if len(text) > MAX_STREAM_CHARS:
        return text[:MAX_STREAM_CHARS] + f"\n[cut: {len(text)} characters]"
    return text


def python(code: str) -> str:
    """Run Python code in a sandbox and return its exit status, stdout and stderr.

    Print what you want to see: the value of the last expression is not shown.
    """
    result = run_python({"main.py": code}, ["main.py"], limits=LIMITS)
    if result.timed_out:
        status = f"timed out after {LIMITS.timeout_s:g} s"
    elif result.returncode is None:
        status = "killed"
    else:
        status = f"exit code {result.returncode}"
    if result.output_capped:
        status += " (output over the cap)"
    return f"{status}\nstdout:\n{_cut(result.stdout)}\nstderr:\n{_cut(result.stderr)}"
