"""Code reward: run the completion's Python against the row's tests, in the sandbox.

Each completion's code is the last fenced block tagged ``python``/``py``/``python3`` (else
the last untagged fenced block); a completion without one scores 0. The tests come from a
dataset column (``tests`` unless ``tests_column`` says otherwise), one value per row, in
any of these forms (a JSON string of any of them is decoded first):

* stdin/stdout pairs: ``[{"input": "1 2\\n", "output": "3\\n"}, ...]`` or
  ``{"inputs": [...], "outputs": [...]}`` (APPS/CodeContests style). The program runs once
  per pair as ``python -I -B solution.py`` with the input on stdin; it passes when it exits
  with status 0 and its output equals the expected output up to trailing whitespace on
  each line and trailing blank lines.
* assert-style tests: ``["assert add(1, 2) == 3", ...]`` (MBPP style), or one string of
  test code. The solution is executed as a module (``__name__ == "solution"``, so a
  ``main()`` guarded by ``if __name__ == "__main__"`` does not run), then each test in the
  same namespace; a test passes when it raises nothing. Results go to the host over a
  private pipe keyed by a random nonce, so a program that prints what looks like success
  and exits (``sys.exit(0)``, ``os._exit(0)``) before the tests run scores 0. (It guards
  against early exits, not against code that deliberately inspects the harness's frames.)

The score is the fraction of tests passed (``mode="fraction"``) or 1.0 only when all pass
(``mode="binary"``). Completions run in parallel, ``workers`` at a time (default: one per
CPU core). After a test times out the remaining tests of that completion are not run and
count as failed, so a completion costs at most one timeout.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from grpo.rewards.sandbox import Isolation, SandboxLimits, run_python

_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)```", re.DOTALL)
_PYTHON_TAGS = {"python", "py", "python3"}

# Runs the solution, then each test; reports "<nonce> <tests run> <passed>" on fd 3 after
# every test, so that a hang in test k still credits the tests before it.
_HARNESS = """\
import os


def _run():
    received = b""
    while True:
        chunk = os.read(4, 65536)
        if not chunk:
            break
        received += chunk
    os.close(4)
    nonce, _, payload = received.partition(b"\\n")
    import json

    tests = json.loads(payload)
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    with open("solution.py") as handle:
        source = handle.read()
    try:
        exec(compile(source, "solution.py", "exec"), namespace)
    except BaseException:  # SystemExit included: exiting is not passing
        os._exit(1)
    passed = 0
    for index, test in enumerate(tests):
        try:
            exec(compile(test, "<test %d>" % index, "exec"), namespace)
            passed += 1
        except BaseException:
            pass
        os.write(3, b"%s %d %d\\n" % (nonce, index + 1, passed))
    os._exit(0)


_run()
"""


@dataclass(frozen=True)
class TestSuite:
    kind: Literal["stdio", "assert"]
    cases: tuple[Any, ...]  # stdio: (input, expected output) pairs; assert: test sources


def extract_code(completion: str) -> str | None:
    """The last ```python fenced block (``py``/``python3`` too), else the last untagged one."""
    blocks = _FENCE.findall(completion)
    tagged = [code for tag, code in blocks if tag.lower() in _PYTHON_TAGS]
    if tagged:
        return tagged[-1]
    untagged = [code for tag, code in blocks if not tag]
    return untagged[-1] if untagged else None


def parse_tests(value: Any) -> TestSuite:
    """A row's tests, in any of the forms the module docstring lists."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            lines = [line for line in value.splitlines() if line.strip()]
            if lines and all(line.lstrip().startswith("assert") for line in lines):
                return TestSuite("assert", tuple(line.strip() for line in lines))
            return TestSuite("assert", (value,))
        if isinstance(value, str):
            return TestSuite("assert", (value,))
    if isinstance(value, dict):
        if "inputs" in value and "outputs" in value:
            pairs = zip(value["inputs"], value["outputs"], strict=True)
            return TestSuite("stdio", tuple((str(i), str(o)) for i, o in pairs))
        if "input" in value and "output" in value:
            return TestSuite("stdio", ((str(value["input"]), str(value["output"])),))
    if isinstance(value, (list, tuple)) and value:
        if all(isinstance(item, dict) and "input" in item and "output" in item for item in value):
            return TestSuite("stdio", tuple((str(i["input"]), str(i["output"])) for i in value))
        if all(isinstance(item, str) for item in value):
            return TestSuite("assert", tuple(value))
    raise ValueError(f"unrecognised tests: {str(value)[:200]!r}")


def outputs_match(actual: str, expected: str) -> bool:
    """Equal up to trailing whitespace on each line and trailing blank lines."""

    def lines(text: str) -> list[str]:
        result = [line.rstrip() for line in text.strip("\n").splitlines()]
        while result and not result[-1]:
            result.pop()
        return result

    return lines(actual) == lines(expected)


def run_tests(
    code: str,
    suite: TestSuite,
    limits: SandboxLimits,
    *,
    isolation: Isolation = "auto",
    require: Sequence[str] = (),
) -> tuple[int, int]:
    """(tests passed, tests in the suite) for one program."""
    total = len(suite.cases)
    if suite.kind == "assert":
        nonce = secrets.token_hex(16).encode()
        result = run_python(
            {"solution.py": code, "harness.py": _HARNESS},
            ["harness.py"],
            limits=limits,
            isolation=isolation,
            require=require,
            pass_control=True,
            secret=nonce + b"\n" + json.dumps(list(suite.cases)).encode(),
        )
        passed = 0
        for line in result.control.splitlines():
            fields = line.split()
            if len(fields) == 3 and fields[0] == nonce and fields[1].isdigit():
                passed = min(int(fields[2]), total)
        return passed, total
    passed = 0
    for stdin, expected in suite.cases:
        result = run_python(
            {"solution.py": code},
            ["solution.py"],
            stdin=stdin,
            limits=limits,
            isolation=isolation,
            require=require,
        )
        if result.ok and outputs_match(result.stdout.decode(errors="replace"), expected):
            passed += 1
        if result.timed_out:
            break  # one timeout per completion at most: the rest count as failed
    return passed, total


def code_reward(
    prompts: list[str],
    completions: list[str],
    *,
    tests_column: str = "tests",
    mode: Literal["fraction", "binary"] = "fraction",
    timeout_s: float = 5.0,
    memory_mb: int = 1024,
    max_processes: int = 32,
    output_bytes: int = 1 << 20,
    workers: int = 0,
    isolation: Isolation = "auto",
    require: Sequence[str] = (),
    **columns: Any,
) -> list[float]:
    """Fraction of the row's tests the completion's code passes (or 0/1 with ``binary``).

    ``timeout_s``, ``memory_mb``, ``max_processes`` and ``output_bytes`` are per program
    run (see :class:`~grpo.rewards.sandbox.SandboxLimits`); ``workers`` 0 = one per core;
    ``require`` names sandbox layers without which nothing runs (e.g. ``["netns"]``).
    """
    if tests_column not in columns:
        raise ValueError(f"code_reward needs a {tests_column!r} column; got {sorted(columns)}")
    if mode not in ("fraction", "binary"):
        raise ValueError(f"mode must be 'fraction' or 'binary', not {mode!r}")
    suites = []
    for row, value in enumerate(columns[tests_column]):
        try:
            suites.append(parse_tests(value))
        except ValueError as error:
            raise ValueError(f"row {row}: {error}") from None
    limits = SandboxLimits(
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        max_processes=max_processes,
        output_bytes=output_bytes,
    )

    def score(index: int) -> float:
        code = extract_code(completions[index])
        if code is None:
            return 0.0
        passed, total = run_tests(code, suites[index], limits, isolation=isolation, require=require)
        if mode == "binary":
            return float(passed == total)
        return passed / total

    # Threads suffice: each one waits on a child process, where the work happens.
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        return list(pool.map(score, range(len(completions))))


code_reward.is_accuracy = True  # type: ignore[attr-defined]  # 1.0 = every test passed
