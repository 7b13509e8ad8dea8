"""Grader integrity for assert-style code tests: one test per guarantee the code reward's
docstring states, and one showing the limit it states.

Each hostile solution below computes nothing right; each must score 0. The honest
solutions next to them must still score 1.
"""

from __future__ import annotations

import ast
import json
import sys
import textwrap

import pytest

from grpo.rewards import code_reward, run_python
from grpo.rewards.code import _HARNESS
from grpo.rewards.code_checks import defined_names, plan_test
from grpo.rewards.code_verdict import decode, strict_equal, verdict

if sys.platform != "linux":
    pytest.skip("the sandbox is Linux-only", allow_module_level=True)

TESTS = ["assert add(1, 2) == 3", "assert add(20, 22) == 42"]


def score(code: str, tests: list[str] = TESTS) -> float:
    completion = f"```python\n{textwrap.dedent(code)}\n```"
    [value] = code_reward(["p"], [completion], tests=[tests], timeout_s=5.0)
    return value


# --- the split: what runs where --------------------------------------------------------


def test_tests_are_split_into_probes_and_a_host_verdict() -> None:
    plan = plan_test("assert sorted(add(1, 2)) == [1, 2, 3]")
    assert plan.probes == ("add(1, 2)",)
    assert ast.unparse(plan.verdict) == "_grpo_eq(sorted(_grpo_probe_0), [1, 2, 3])"
    plan = plan_test("assert math.isclose(area(2), 12.566, rel_tol=1e-3) and 4 in add(1, 2)")
    assert plan.probes == ("area(2)", "add(1, 2)")
    chained = plan_test("assert f(1) == g(1) != 3")
    assert ast.unparse(chained.verdict) == (
        "_grpo_eq(_grpo_probe_0, _grpo_probe_1) and _grpo_ne(_grpo_probe_1, 3)"
    )
    assert plan_test("x = add(1, 2)\nassert x == 3").verdict is None  # runs whole


def test_a_test_using_a_builtin_the_solution_redefines_fails_closed() -> None:
    code = "import math\nfrom os import sep\nimport numpy as np\ndef max(xs):\n    pass\nN = 3"
    assert defined_names(code) == {"sep", "np", "max", "N"}
    assert plan_test("assert max([1, 2]) == 2").probes == ()  # Python's max: decided here
    shadowing = "def abs(x):\n    return 0\ndef area(r):\n    return 0.0"
    assert score(shadowing, ["assert abs(area(2) - 12.566) < 1e-3"]) == 0.0
    own_max = "def max(xs):\n    return sorted(xs)[-1]"
    assert (
        score(own_max, ["assert max([2, 1]) == 2", "assert sorted(max([[1], [2]])) == [2]"]) == 0.0
    )


def test_strict_equality_by_hand() -> None:
    assert strict_equal({"a": [1, (2.5, None)], "b": {b"x"}}, {"b": {b"x"}, "a": [1, (2.5, None)]})
    for left, right in [(1, 1.0), (1, True), ([1], (1,)), ({1}, frozenset({1})), ([1], [True])]:
        assert not strict_equal(left, right)
    assert decode({"d": [[{"s": "k"}, {"l": [{"i": "7"}, {"f": (0.5).hex()}]}]]}) == {"k": [7, 0.5]}
    with pytest.raises(ValueError):
        decode({"x": 1})


# --- guarantee 1: equality is type-strict ----------------------------------------------

EQUAL_TO_ANYTHING = {
    "a class overriding __eq__": """
        class Anything:
            def __eq__(self, other):
                return True
            __hash__ = object.__hash__
        def add(a, b):
            return Anything()
    """,
    "an int subclass overriding __eq__": """
        class Int(int):
            def __eq__(self, other):
                return True
            __hash__ = int.__hash__
        def add(a, b):
            return Int(0)
    """,
    "a str subclass": """
        class Str(str):
            def __eq__(self, other):
                return True
        def add(a, b):
            return Str("3")
    """,
    "an object whose __bool__ and every comparison say yes": """
        class Yes:
            def __bool__(self): return True
            def __eq__(self, other): return self
            def __ne__(self, other): return self
        def add(a, b):
            return Yes()
    """,
    "the right number as the wrong type (float)": "def add(a, b):\n    return float(a + b)",
    "the right number as the wrong type (str)": "def add(a, b):\n    return str(a + b)",
}


@pytest.mark.parametrize("code", EQUAL_TO_ANYTHING.values(), ids=EQUAL_TO_ANYTHING.keys())
def test_values_that_only_claim_equality_fail(code: str) -> None:
    assert score(code) == 0.0


def test_honest_solutions_pass_with_containers_and_other_operators() -> None:
    code = """
        import math
        def add(a, b):
            return a + b
        def stats(xs):
            return {"sorted": sorted(xs), "pair": (min(xs), max(xs)), "set": set(xs)}
        def area(r):
            return math.pi * r * r
    """
    tests = [
        *TESTS,
        "assert stats([3, 1, 2]) == {'pair': (1, 3), 'set': {1, 2, 3}, 'sorted': [1, 2, 3]}",
        "assert add(1, 2) != 4 and 3 in [add(1, 2)]",
        "assert math.isclose(area(2), 12.566, rel_tol=1e-3)",
        "assert all(add(i, i) == 2 * i for i in range(4))",
        "assert sorted(stats([2, 1])['set']) == [1, 2]",
    ]
    assert score(code, tests) == 1.0


# --- guarantee 2: the record of passed tests is the host's ------------------------------

FORGERIES = {
    "exits before the tests": "import os\ndef add(a, b):\n    return 0\nos._exit(0)",
    "prints a fake result line": """
        def add(a, b):
            return 0
        print('0 {"probes": [{"v": {"i": "3"}}]}')
        print('1 {"probes": [{"v": {"i": "42"}}]}')
    """,
    "writes forged reports to the result pipe": """
        import os
        def add(a, b):
            return 0
        for i in range(2):
            os.write(3, b'%d {"ok": true}\\n' % i)
            os.write(3, b'%d {"probes": [{"v": true}]}\\n' % i)
    """,
    "patches builtins and AssertionError": """
        import builtins
        builtins.AssertionError = type("Never", (Exception,), {})
        builtins.isinstance = lambda *args: True
        builtins.type = lambda *args: int
        def add(a, b):
            return 0
    """,
    "replaces json in sys.modules": """
        import sys, types
        fake = types.ModuleType("json")
        fake.dumps = lambda *args, **kwargs: '{"ok": true}'
        sys.modules["json"] = fake
        def add(a, b):
            return 0
    """,
    "rewrites the harness through its frames": """
        import sys
        frame = sys._getframe()
        while frame.f_back is not None:
            frame = frame.f_back
        harness = frame.f_globals
        harness["_encode"] = lambda value, depth=0: True
        harness["_run_test"] = lambda test, index, namespace: {"ok": True}
        def add(a, b):
            return 0
    """,
}


@pytest.mark.parametrize("code", FORGERIES.values(), ids=FORGERIES.keys())
def test_the_solution_cannot_forge_passing_tests(code: str) -> None:
    assert score(code) == 0.0


def test_the_expected_values_never_reach_the_solutions_process() -> None:
    """Everything the harness holds is dumped by the solution: probes, no expected value."""
    spy = textwrap.dedent("""
        import gc, sys
        seen = [repr(obj)[:10000] for obj in gc.get_objects()]
        frame = sys._getframe()
        while frame is not None:
            seen.append(repr(frame.f_locals)[:10000])
            frame = frame.f_back
        print("\\n".join(seen))
        def add(a, b):
            return 0
    """)
    plans = [plan_test(test) for test in ["assert add(40, 2) == 987654321"]]
    result = run_python(
        {"solution.py": spy, "harness.py": _HARNESS},
        ["harness.py"],
        pass_control=True,
        secret=json.dumps([plan.for_harness() for plan in plans]).encode(),
    )
    assert b"add(40, 2)" in result.stdout  # the spy did see the harness's plan
    assert b"987654321" not in result.stdout
    assert not verdict(plans[0], [{"v": {"i": "0"}}])


# --- defence in depth where the host cannot decide: strict helpers next to the solution --

ANYTHING = """
    class Anything:
        def __eq__(self, other): return True
        def __ne__(self, other): return False
        def __bool__(self): return True
        __hash__ = object.__hash__
    def add(a, b):
        return Anything()
"""
HUMANEVAL_STYLE = """
def check(candidate):
    assert candidate(1, 2) == 3
    assert candidate(2, 2) != 5
    assert candidate(0, 0) in [0]
    assert candidate(2, 3)


check(add)
"""


def test_a_humaneval_check_function_of_asserts_is_decided_by_the_host() -> None:
    plan = plan_test(HUMANEVAL_STYLE)
    assert plan.probes == ("add(1, 2)", "add(2, 2)", "add(0, 0)", "add(2, 3)")
    assert score("def add(a, b):\n    return a + b", [HUMANEVAL_STYLE]) == 1.0
    assert score("def add(a, b):\n    return 3", [HUMANEVAL_STYLE]) == 0.0
    forged = "import os\ndef add(a, b):\n    return 0\nos.write(3, b'0 {\"ok\": true}\\n')"
    assert score(forged, [HUMANEVAL_STYLE]) == 0.0


def test_test_code_run_whole_and_comparisons_inside_probes_are_strict_too() -> None:
    with_setup = "import math\n" + HUMANEVAL_STYLE  # not the bare form: runs whole
    source = plan_test(with_setup).for_harness()["source"]
    assert "_grpo_truth(_grpo_eq(candidate(1, 2), 3))" in source
    assert plan_test("assert all(add(i, 0) == i for i in range(3))").probes == (
        "[_grpo_eq(add(i, 0), i) for i in range(3)]",
    )
    tests = [with_setup, "assert all(add(i, 0) == i for i in range(3))"]
    assert score("def add(a, b):\n    return a + b", tests) == 1.0
    assert score(ANYTHING, tests) == 0.0


# --- the limit: test code that is not one assert runs whole, next to the solution ------


def test_test_code_that_cannot_be_split_is_only_as_strong_as_the_solution_allows() -> None:
    tests = ["result = add(1, 2)\nassert result == 3"]
    honest = "def add(a, b):\n    return a + b"
    forged = "import os\ndef add(a, b):\n    return 0\nos.write(3, b'0 {\"ok\": true}\\n')"
    assert score(honest, tests) == 1.0
    assert score("def add(a, b):\n    return 0", tests) == 0.0
    assert score(forged, tests) == 1.0  # documented: not guaranteed for such tests
