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
  ``main()`` guarded by ``if __name__ == "__main__"`` does not run), then the tests in
  order, in its namespace, and graded as below.

**What is guaranteed for a test that is a single ``assert <expression>``**, or
HumanEval's ``def check(candidate):`` made only of asserts then ``check(entry_point)``
(taken as one assert of their conjunction), split by
:func:`~grpo.rewards.code_checks.plan_test`:

1. *Equality is type-strict.* Only the sub-expressions that name the solution's
   functions or variables (the *probes*, e.g. ``add(1, 2)``) are evaluated next to the
   solution; their values come back as plain data (None, bool, int, float, complex, str,
   bytes, and lists, tuples, dicts, sets and frozensets of those, each by exact type), and
   any other object, a subclass of a builtin included, fails the test. The rest of the
   expression (the comparison, ``sorted``, ``math.isclose`` ...) is evaluated in the
   trainer's process on fresh copies of those values, where ``==``, ``!=``, ``in`` and
   ``not in`` hold only between values of the same type at every level (``3 != 3.0 !=
   "3"``, ``[1] != (1,)``). An object whose ``__eq__`` or ``__bool__`` says yes can
   therefore pass nothing.
2. *Nothing the solution runs can reach or forge the record of which tests passed.*
   That record is made in the trainer's process, from the probes' values alone: exiting
   early (``sys.exit``, ``os._exit``), printing a fake result line, writing to the result
   pipe, patching ``builtins``, ``AssertionError`` or ``sys.modules``, or rewriting the
   harness through its frames can only change the values reported, and a value passes
   only if it is the right one. The parts of the test that do not name the solution (the
   expected values, and what the test computes from them) never enter the solution's
   process, so it cannot read them there. The builtins and ``math`` a test uses are
   Python's own; a test that uses one the solution redefines (its own ``abs``) fails.

**Not guaranteed:** other test code (setup lines, several statements, a ``check()``
function with more than asserts) runs whole next to the solution and passes when the
harness there reports that it raised nothing; a comparison made *inside* a probe (in a
comprehension or lambda that calls the solution, ``all(f(x) == y for ...)``) runs in the
solution's process too. In both, ``==``, ``!=``, ``in``, ``not in`` and ``assert`` are
rewritten to the harness's type-strict helpers, so an object that merely claims equality
fails there as well; but a solution that deliberately tampers with the harness (replaces
those helpers, writes the result pipe) can pass them. Expected values the solution could
read elsewhere (in the prompt) can be hard-coded. The test's own computation runs in the
trainer's process with a few pure builtins and ``math``: tests are trusted configuration,
like the reward function itself.

The score is the fraction of tests passed (``mode="fraction"``) or 1.0 only when all pass
(``mode="binary"``). Completions run in parallel, ``workers`` at a time (default: one per
CPU core). After a test times out the remaining tests of that completion are not run and
count as failed, so a completion costs at most one timeout.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from grpo.rewards.code_checks import TestPlan, defined_names, plan_test
from grpo.rewards.code_verdict import verdict
from grpo.rewards.sandboxed import parse_rows, score_sandboxed
from grpo.sandbox import Isolation, SandboxLimits, run_python
from grpo.text.fences import last_fenced_block

_PYTHON_TAGS = {"python", "py", "python3"}

# Runs in the sandbox next to the solution: executes it, then reports each test's probes.
_HARNESS = Path(__file__).with_name("_code_harness.py").read_text()


@dataclass(frozen=True)
class TestSuite:
    kind: Literal["stdio", "assert"]
    cases: tuple[Any, ...]  # stdio: (input, expected output) pairs; assert: test sources


def extract_code(completion: str) -> str | None:
    """The last ```python fenced block (``py``/``python3`` too), else the last untagged one."""
    return last_fenced_block(completion, _PYTHON_TAGS)


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
        plans = [plan_test(case, defined_names(code)) for case in suite.cases]
        result = run_python(
            {"solution.py": code, "harness.py": _HARNESS},
            ["harness.py"],
            limits=limits,
            isolation=isolation,
            require=require,
            pass_control=True,
            secret=json.dumps([plan.for_harness() for plan in plans]).encode(),
        )
        reports = harness_reports(result.control, len(plans))
        return sum(test_passed(plan, reports.get(i)) for i, plan in enumerate(plans)), total
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


def harness_reports(control: bytes, tests: int) -> dict[int, Any]:
    """Test index → the harness's report (the first well-formed line for it wins; lines
    are the solution's claims either way, never trusted beyond their values)."""
    reports: dict[int, Any] = {}
    for line in control.splitlines():
        index, _, payload = line.partition(b" ")
        if not index.isdigit() or int(index) >= tests or int(index) in reports:
            continue
        try:
            reports[int(index)] = json.loads(payload)
        except (ValueError, RecursionError):
            continue
    return reports


def test_passed(plan: TestPlan, report: Any) -> bool:
    """A split test: the host's verdict on the probes' values. Test code run whole: the
    harness said it raised nothing."""
    if not isinstance(report, dict):
        return False
    if plan.verdict is None:
        return report.get("ok") is True
    probes = report.get("probes")
    return isinstance(probes, list) and verdict(plan, probes)


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
    run (see :class:`~grpo.sandbox.SandboxLimits`); ``workers`` 0 = one per core;
    ``require`` names sandbox layers without which nothing runs (e.g. ``["netns"]``).
    """
    if tests_column not in columns:
        raise ValueError(f"code_reward needs a {tests_column!r} column; got {sorted(columns)}")
    if mode not in ("fraction", "binary"):
        raise ValueError(f"mode must be 'fraction' or 'binary', not {mode!r}")
    suites = parse_rows(columns[tests_column], parse_tests, tests_column)
    limits = SandboxLimits(
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        max_processes=max_processes,
        output_bytes=output_bytes,
    )

    def check(row: int, code: str) -> float:
        passed, total = run_tests(code, suites[row], limits, isolation=isolation, require=require)
        return float(passed == total) if mode == "binary" else passed / total

    return score_sandboxed(completions, extract_code, check, workers)


code_reward.is_accuracy = True  # type: ignore[attr-defined]  # 1.0 = every test passed
