"""The package's shape: layers import only downwards and no import cycles. Each check reads
the source (ast), so it costs nothing at run time. Sizes are guidance, not a check: a
function is as long as reading it in one piece needs (docs/development.md)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "grpo"

# Lowest first: a package may import its own layer and those before it, never one after.
LAYERS = (
    "algo",
    "text",
    "config",
    "models",
    "sandbox",
    "rewards",
    "rollout",
    "data",
    "agents",
    "eval",
    "log",
    "runtime",
    "rounds",
    "rounds.workers",
    "training.update",
    "training",
    "demo",
    "cli",
)
FACADES = {"grpo", "grpo.__main__"}  # the public names and `python -m grpo`: above all layers


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(SRC.rglob("*.py"))}


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The grpo modules ``path`` imports, at module level or inside functions."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from grpo.x import y` is grpo.x.y when y is a module, else grpo.x.
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                for a in node.names
            ]
        else:
            continue
        found.update(name for name in names if name in modules)
    return found


# Rooms: sub-packages that are layers of their own inside a package, in LAYERS' order.
ROOMS = {"rounds": ("workers",), "training": ("update",)}


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 and parts[2] in ROOMS.get(parts[1], ()):
        return f"{parts[1]}.{parts[2]}"
    return parts[1]


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules) for name, path in modules.items()}


def test_every_package_is_a_known_layer() -> None:
    for module in _modules():
        assert module in FACADES or _layer(module) in LAYERS, f"{module}: add its layer to LAYERS"


def test_no_layer_imports_a_higher_one() -> None:
    wrong = [
        f"{module} (layer {_layer(module)}) imports {target} (layer {_layer(target)})"
        for module, targets in _graph().items()
        if module not in FACADES
        for target in targets
        if target not in FACADES and LAYERS.index(_layer(target)) > LAYERS.index(_layer(module))
    ]
    assert not wrong, "\n".join(wrong)


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path of modules, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in graph:
        if state.get(root):
            continue
        path, stack = [root], [iter(sorted(graph[root]))]
        state[root] = 1
        while stack:
            target = next(stack[-1], None)
            if target is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(target) == 1:
                return [*path[path.index(target) :], target]
            elif not state.get(target):
                state[target] = 1
                path.append(target)
                stack.append(iter(sorted(graph[target])))
    return None


def test_the_layer_rule_is_checked_for_real() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    assert "grpo.algo.groups" in _graph()["grpo.algo.advantages"]
    assert _layer("grpo.training.update.policy") == "training.update"
    assert _layer("grpo.training.loop") == "training"
    assert _layer("grpo.rounds.workers.async_rounds") == "rounds.workers"
    assert _layer("grpo.rounds.source") == "rounds"


def test_no_import_cycles() -> None:
    graph = {m: {t for t in targets if t != m} for m, targets in _graph().items()}
    graph = {m: targets - {"grpo"} for m, targets in graph.items()}  # the facade is lazy
    cycle = _cycle(graph)
    assert cycle is None, " → ".join(cycle or [])


# The composition layer builds a run from the config: the loop, set-up itself and the
# commands. Nothing below it (the rollout workers, ``grpo eval``'s engine, the update)
# reaches into set-up; what they share is built in grpo.rounds.build and grpo.models.loading.
COMPOSITION = ("grpo.training.loop", "grpo.training.setup", "grpo.cli.", "grpo.demo.")


def test_only_the_composition_layer_imports_set_up() -> None:
    wrong = [
        f"{module} imports {target}"
        for module, targets in _graph().items()
        if module not in FACADES and not module.startswith(COMPOSITION)
        for target in targets
        if target.startswith("grpo.training.setup")
    ]
    assert not wrong, "\n".join(wrong)


def test_the_docs_show_every_package_in_layer_order() -> None:
    page = (SRC.parents[1] / "docs" / "development.md").read_text()
    block = page.split("## Layout\n\n```\n", 1)[1].split("```", 1)[0]
    shown = [line.split()[0].rstrip("/") for line in block.splitlines() if line.startswith("  ")]
    # Rooms are indented under their package: training/runtime → "runtime" after "training".
    expected = []
    for layer in LAYERS:
        package, _, room = layer.partition(".")
        if room:
            continue
        expected.append(package)
        expected.extend(ROOMS.get(package, ()))
    assert shown == expected, "docs/development.md, Layout: one line per package, in LAYERS order"
