"""The code reward's harness for assert-style tests: runs *inside* the sandbox, as
``python -I -B harness.py``, next to ``solution.py``. Never imported by the package.

It reads the plan from fd 4 (JSON: one entry per test), executes the solution as a module
(``__name__ == "solution"``), then, test by test, either evaluates the test's probes (the
sub-expressions that name something of the solution's, e.g. ``add(1, 2)``) and writes
their values as plain, typed JSON, or, for test code that cannot be split so, executes it
and writes whether it raised. One line per test on fd 3: ``<index> <json>``.

Nothing here is trusted by the host: the solution runs in this process and may rewrite
any of it. The host treats every line as the solution's claim and decides from the values
alone (see :mod:`grpo.rewards.code_verdict`).
"""

import json
import os

_MAX_DEPTH = 64


def _read_all(fd):
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


_SEQUENCES = {list: "l", tuple: "t", set: "S", frozenset: "F"}


def _encode(value, depth=0):
    """Plain data only, by exact type (a subclass of int is not an int here)."""
    if depth > _MAX_DEPTH:
        raise ValueError("nested too deeply")
    kind = type(value)
    if value is None or kind is bool:
        return value
    if kind is int:
        return {"i": str(value)}
    if kind is float:
        return {"f": value.hex()}
    if kind is complex:
        return {"c": [value.real.hex(), value.imag.hex()]}
    if kind is str:
        return {"s": value}
    if kind is bytes:
        return {"b": value.hex()}
    if kind in _SEQUENCES:
        return {_SEQUENCES[kind]: [_encode(item, depth + 1) for item in value]}
    if kind is dict:
        return {"d": [[_encode(k, depth + 1), _encode(v, depth + 1)] for k, v in value.items()]}
    raise TypeError(f"not plain data: {kind.__name__}")


def _canonical(encoded):
    """The encoding with set items and dict pairs in a fixed order."""
    if not isinstance(encoded, dict):
        return encoded
    [(tag, payload)] = encoded.items()
    if tag in ("l", "t"):
        return {tag: [_canonical(item) for item in payload]}
    if tag in ("S", "F"):
        return {tag: sorted((_canonical(item) for item in payload), key=json.dumps)}
    if tag == "d":
        pairs = [[_canonical(k), _canonical(v)] for k, v in payload]
        return {tag: sorted(pairs, key=json.dumps)}
    return encoded


def _strict_equal(a, b):
    """Type-strict equality of plain data; anything else is unequal to everything."""
    try:
        return json.dumps(_canonical(_encode(a))) == json.dumps(_canonical(_encode(b)))
    except Exception:
        return False


def _strict_in(item, container):
    try:
        _encode(container)
    except Exception:
        return False
    if type(container) in (str, bytes):
        return type(item) is type(container) and item in container
    return any(_strict_equal(item, element) for element in container)


def _truth(value):
    try:
        _encode(value)
    except Exception:
        return False
    return bool(value)


# What the host's rewriting of tests calls (see code_checks.strict_source).
_HELPERS = {
    "_grpo_eq": _strict_equal,
    "_grpo_ne": lambda a, b: not _strict_equal(a, b),
    "_grpo_in": lambda a, b: _strict_in(a, b),
    "_grpo_not_in": lambda a, b: not _strict_in(a, b),
    "_grpo_truth": _truth,
}


def _run_test(test, index, namespace):
    if test["kind"] == "code":
        try:
            exec(compile(test["source"], f"<test {index}>", "exec"), namespace)
            return {"ok": True}
        except BaseException:  # SystemExit included: exiting is not passing
            return {"ok": False}
    values = []
    for expression in test["probes"]:
        try:
            values.append({"v": _encode(eval(compile(expression, "<probe>", "eval"), namespace))})
        except BaseException:
            values.append({"error": True})
    return {"probes": values}


def main():
    plan = json.loads(_read_all(4))
    namespace = {"__name__": "solution", "__builtins__": __builtins__, **_HELPERS}
    with open("solution.py") as handle:
        source = handle.read()
    try:
        exec(compile(source, "solution.py", "exec"), namespace)
    except BaseException:
        os._exit(1)
    for index, test in enumerate(plan):
        result = _run_test(test, index, namespace)
        _write_all(3, b"%d %s\n" % (index, json.dumps(result).encode()))
    os._exit(0)


if __name__ == "__main__":
    main()
