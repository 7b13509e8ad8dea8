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
    "training.runtime",
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
ROOMS = {"training": ("runtime", "update")}


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
    assert _is_stage_level("grpo.training.loop") and not _is_stage_level("grpo.training.update")
    assert not _is_stage_level("grpo.training.update.policy") and not _is_stage_level("grpo")


def test_no_import_cycles() -> None:
    graph = {m: {t for t in targets if t != m} for m, targets in _graph().items()}
    graph = {m: targets - {"grpo"} for m, targets in graph.items()}  # the facade is lazy
    cycle = _cycle(graph)
    assert cycle is None, " → ".join(cycle or [])


# Inside grpo.training: the composers build the run and drive the step; the stages each
# do one part of it and share only the run's types, so a stage can be read, tested and
# moved (the async producer) without the others.
# A rollout worker builds its producer as set-up does, and the pools start workers: composers.
COMPOSERS = {
    *("loop", "setup", "setup_learner", "setup_rollouts", "setup_async", "engines"),
    *("rollout_worker", "local_pool", "ray_pool"),
}
RUN_TYPES = {"state", "rounds", "producers", "worker_pool"}


def _is_stage_level(module: str) -> bool:
    parts = module.split(".")
    return len(parts) == 3 and parts[1] == "training" and _layer(module) == "training"


def _stage_imports(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Each module directly in grpo.training and the siblings (not rooms) it imports."""
    return {
        module.split(".")[2]: {t.split(".")[2] for t in targets if _is_stage_level(t)}
        for module, targets in graph.items()
        if _is_stage_level(module)
    }


def test_a_stage_imports_no_other_stage() -> None:
    stages = _stage_imports(_graph())
    wrong = [
        f"grpo.training.{name} imports grpo.training.{target}"
        for name, targets in stages.items()
        if name not in COMPOSERS
        for target in sorted(targets - RUN_TYPES)
    ]
    assert not wrong, "\n".join(wrong) + "\n(stages share only state, rounds and producers)"
    assert {"generate", "learn", "saving"} <= set(stages) and "loop" in stages


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
