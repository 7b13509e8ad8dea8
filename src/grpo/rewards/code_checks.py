"""Splitting assert-style code tests so that the host decides them, from plain data the
solution returns.

A test ``assert <expression>`` is split (:func:`plan_test`) into **probes**, the largest
sub-expressions that name something other than a few pure builtins and ``math`` (so:
the solution's functions and variables, e.g. ``add(1, 2)``), and a **verdict**: the rest of
the expression, with each probe replaced by its value. Only the probes run in the sandbox,
next to the solution (``_code_harness.py``); their values come back as typed JSON of
plain data, are rebuilt as fresh Python objects, and the verdict is evaluated in the
trainer's process, with only those builtins and ``math`` in scope
(:func:`~grpo.rewards.code_verdict.verdict`). Equality in the verdict is type-strict
(:func:`~grpo.rewards.code_verdict.strict_equal`): ``==``, ``!=``, ``in`` and ``not in``
hold only between values of exactly the same type at every level.

HumanEval's ``def check(candidate):`` of asserts only, then ``check(entry_point)``, is
split as the one assert of their conjunction. Other test code (setup lines, several
statements) cannot be split: it runs next to the solution, with its comparisons and
asserts rewritten to the harness's type-strict helpers (:func:`strict_source`), and
"passed" there means "raised nothing", as the solution's process reports it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

# Pure functions of plain data, evaluated in the host's verdict; nothing that takes a
# callable (map, filter) or reaches objects' internals (getattr, vars, type's attributes).
PURE_BUILTINS = frozenset(
    {"abs", "all", "any", "bool", "bytes", "complex", "dict", "divmod", "enumerate", "float"}
    | {"frozenset", "int", "isinstance", "len", "list", "max", "min", "pow", "range", "repr"}
    | {"reversed", "round", "set", "sorted", "str", "sum", "tuple", "zip"}
)
TRUSTED_NAMES = PURE_BUILTINS | {"math"}
PROBE_PREFIX = "_grpo_probe_"  # the verdict's name for probe i: PROBE_PREFIX + str(i)


@dataclass(frozen=True)
class TestPlan:
    """One test: ``probes`` (expression sources) and the ``verdict`` over their values;
    or, for test code that cannot be split (``verdict`` None), ``source`` to execute."""

    __test__ = False  # not a pytest class, whatever its name
    source: str
    probes: tuple[str, ...] = ()
    verdict: ast.Expression | None = None

    def for_harness(self) -> dict[str, Any]:
        if self.verdict is None:
            return {"kind": "code", "source": strict_source(self.source)}
        return {"kind": "probes", "probes": list(self.probes)}


def _bound_names(node: ast.AST) -> set[str]:
    """Names bound inside ``node`` (comprehension targets, lambda arguments)."""
    bound = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and not _loads(n)}
    for lam in (n for n in ast.walk(node) if isinstance(n, ast.Lambda)):
        bound |= {a.arg for a in ast.walk(lam.args) if isinstance(a, ast.arg)}
    return bound


def _loads(name: ast.Name) -> bool:
    return isinstance(name.ctx, ast.Load)


def _names_the_solution(node: ast.AST, trusted: frozenset[str]) -> bool:
    """Whether ``node`` uses a free name that is not trusted (the solution's, presumably)."""
    free = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and _loads(n)}
    return bool(free - _bound_names(node) - trusted)


def _trusted_callee(func: ast.expr, trusted: frozenset[str]) -> bool:
    if isinstance(func, ast.Name):
        return func.id in trusted and func.id != "math"
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id == "math"
        and "math" in trusted
        and not func.attr.startswith("_")
    )


def defined_names(code: str) -> frozenset[str]:
    """Names the solution's code defines or imports at its top level (``import math``
    is the real ``math`` and does not count)."""
    try:
        module = ast.parse(code)
    except SyntaxError:
        return frozenset()
    names = set()
    for statement in module.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(statement.name)
        elif isinstance(statement, ast.Import):  # "import math" is the real math
            names |= {a.asname for a in statement.names if a.asname not in (None, a.name)}
        elif isinstance(statement, ast.ImportFrom):
            names |= {a.asname or a.name for a in statement.names}
        else:
            stored = (n for n in ast.walk(statement) if isinstance(n, ast.Name))
            names |= {n.id for n in stored if not _loads(n)}
    return frozenset(names)


class _Splitter:
    """Replaces the probes of an expression by placeholder names, collecting their sources."""

    def __init__(self, trusted: frozenset[str]) -> None:
        self.probes: list[str] = []
        self.trusted = trusted

    def split(self, node: ast.expr) -> ast.expr:
        if not _names_the_solution(node, self.trusted):
            return node
        if isinstance(node, ast.Compare):
            node.left = self.split(node.left)
            node.comparators = [self.split(c) for c in node.comparators]
        elif isinstance(node, ast.BoolOp):
            node.values = [self.split(v) for v in node.values]
        elif isinstance(node, ast.UnaryOp):
            node.operand = self.split(node.operand)
        elif isinstance(node, ast.BinOp):
            node.left, node.right = self.split(node.left), self.split(node.right)
        elif isinstance(node, (ast.List, ast.Tuple, ast.Set)) and not any(
            isinstance(e, ast.Starred) for e in node.elts
        ):
            node.elts = [self.split(e) for e in node.elts]
        elif self._splittable_call(node):
            assert isinstance(node, ast.Call)
            node.args = [self.split(a) for a in node.args]
            for keyword in node.keywords:
                keyword.value = self.split(keyword.value)
        else:
            return self._probe(node)
        return node

    def _splittable_call(self, node: ast.expr) -> bool:
        return (
            isinstance(node, ast.Call)
            and _trusted_callee(node.func, self.trusted)
            and not any(isinstance(a, (ast.Starred, ast.Lambda)) for a in node.args)
            and all(k.arg is not None for k in node.keywords)
            and not any(isinstance(k.value, ast.Lambda) for k in node.keywords)
        )

    def _probe(self, node: ast.expr) -> ast.Name:
        if isinstance(node, ast.GeneratorExp):  # a generator cannot travel: its items can
            node = ast.ListComp(elt=node.elt, generators=node.generators)
        node = _StrictComparisons().visit(node)  # compared in the solution's process
        self.probes.append(ast.unparse(ast.fix_missing_locations(node)))
        return ast.Name(id=f"{PROBE_PREFIX}{len(self.probes) - 1}", ctx=ast.Load())


_STRICT_CALLS = {
    ast.Eq: "_grpo_eq",
    ast.NotEq: "_grpo_ne",
    ast.In: "_grpo_in",
    ast.NotIn: "_grpo_not_in",
}


class _StrictComparisons(ast.NodeTransformer):
    """``a == b`` → ``_grpo_eq(a, b)`` (and ``!=``, ``in``, ``not in``); chains split."""

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        self.generic_visit(node)
        operands = [node.left, *node.comparators]
        pairs: list[ast.expr] = []
        for op, left, right in zip(node.ops, operands, operands[1:], strict=False):
            name = _STRICT_CALLS.get(type(op))
            if name is None:
                pairs.append(ast.Compare(left=left, ops=[op], comparators=[right]))
            else:
                pairs.append(ast.Call(ast.Name(name, ast.Load()), [left, right], []))
        return pairs[0] if len(pairs) == 1 else ast.BoolOp(op=ast.And(), values=pairs)


class _StrictAsserts(_StrictComparisons):
    """Also ``assert x`` → ``assert _grpo_truth(x)``: only plain data can be true."""

    def visit_Assert(self, node: ast.Assert) -> ast.Assert:
        self.generic_visit(node)
        node.test = ast.Call(ast.Name("_grpo_truth", ast.Load()), [node.test], [])
        return node


def strict_source(source: str) -> str:
    """Test code to run whole, with its comparisons and asserts made type-strict by the
    harness's helpers (which the solution, sharing the namespace, could replace)."""
    try:
        module = ast.parse(source)
    except SyntaxError:
        return source  # fails as it is
    return ast.unparse(ast.fix_missing_locations(_StrictAsserts().visit(module)))


def _check_function_as_one_assert(module: ast.Module) -> ast.Assert | None:
    """HumanEval's form, ``def check(candidate): assert ...`` (asserts only, after an
    optional docstring) then ``check(entry_point)``, as one ``assert`` of their
    conjunction with ``candidate`` replaced by the entry point; None for anything else."""
    if len(module.body) != 2:
        return None
    definition, call = module.body
    if not (
        isinstance(definition, ast.FunctionDef)
        and len(definition.args.args) == 1
        and isinstance(call, ast.Expr)
        and isinstance(call.value, ast.Call)
        and isinstance(call.value.func, ast.Name)
        and call.value.func.id == definition.name
        and len(call.value.args) == 1
        and isinstance(call.value.args[0], ast.Name)
    ):
        return None
    body = definition.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if not body or not all(isinstance(statement, ast.Assert) for statement in body):
        return None
    parameter, entry_point = definition.args.args[0].arg, call.value.args[0].id
    tests = [statement.test for statement in body]  # type: ignore[attr-defined]
    for node in (n for test in tests for n in ast.walk(test)):
        if isinstance(node, ast.Name) and node.id == parameter:
            node.id = entry_point
    return ast.Assert(test=ast.BoolOp(op=ast.And(), values=tests) if len(tests) > 1 else tests[0])


def plan_test(source: str, solution_names: frozenset[str] = frozenset()) -> TestPlan:
    """Split one test (see the module docstring): a single ``assert``, or HumanEval's
    ``check`` function of asserts only; other test code gets a plan without a verdict: it
    runs whole, next to the solution.
    A test that uses a builtin (or ``math``) which the solution redefines
    (``solution_names``, from :func:`defined_names`) fails without running: which one it
    means cannot be decided safely (the solution's ``abs`` could be handed the expected
    value; Python's ``max`` would pass a solution that never wrote its own)."""
    try:
        module = ast.parse(source)
    except SyntaxError:
        return TestPlan(source)
    single = _check_function_as_one_assert(module)
    if single is None and len(module.body) == 1 and isinstance(module.body[0], ast.Assert):
        single = module.body[0]
    if single is None:
        return TestPlan(source)
    test = single.test
    used = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
    if used & TRUSTED_NAMES & solution_names:
        return TestPlan(source, (), ast.Expression(body=ast.Constant(False)))
    splitter = _Splitter(TRUSTED_NAMES)
    body = _StrictComparisons().visit(splitter.split(test))
    verdict = ast.fix_missing_locations(ast.Expression(body=body))
    return TestPlan(source, tuple(splitter.probes), verdict)
