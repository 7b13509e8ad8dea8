"""Finding the objects a config names: ``module:name`` or ``path/to/file.py:name``.

Tools, the environment and reward functions are named this way. A module is looked for in
the search directories first (``train.import_dirs``: by default the config file's folder,
then the working directory), then on ``sys.path``. A file path is taken relative to each
search directory in turn; an absolute one as it is.

A file's module is named after its absolute path (:func:`file_module_name`), the same in
every process, so that an object pickled in one process by reference (``module.name``) is
found in another that resolved the same spec: a rollout worker's, a Ray actor's.

Every failure is a :class:`ConfigError` naming the field, the spec and where it looked.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

from grpo.config.errors import ConfigError

FORMS = "'module:name' or 'path/to/file.py:name'"


def import_dirs(config_path: str | os.PathLike[str] | None, configured: Sequence[str]) -> list[str]:
    """The search directories, absolute: ``configured`` (relative ones from the config
    file's folder) or, when it is empty, the config file's folder then the working
    directory. Absolute, because a worker in another process or on another machine
    resolves the same specs and may start elsewhere."""
    cwd = os.getcwd()
    base = os.path.dirname(os.path.abspath(config_path)) if config_path is not None else cwd
    dirs = [os.path.abspath(os.path.join(base, d)) for d in configured] or [base, cwd]
    return list(dict.fromkeys(dirs))  # each once, in order


def import_object(spec: str, search_dirs: Sequence[str], field: str) -> Any:
    """The object ``spec`` names, imported from ``search_dirs`` (none given: the working
    directory) before ``sys.path``."""
    where, _, attribute = spec.rpartition(":")
    if not where or not attribute.isidentifier():
        raise ConfigError(f"{field}: {spec!r}: expected {FORMS}")
    dirs = list(search_dirs) or [os.getcwd()]
    if where.endswith(".py"):
        module = _load_file(where, dirs, f"{field}: {spec!r}")
    else:
        module = _load_module(where, dirs, f"{field}: {spec!r}")
    try:
        return getattr(module, attribute)
    except AttributeError:
        public = [name for name in vars(module) if not name.startswith("_")]
        close = difflib.get_close_matches(attribute, public, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        origin = getattr(module, "__file__", None) or where
        kind = "file" if where.endswith(".py") else "module"
        raise ConfigError(
            f"{field}: {spec!r}: {kind} {where!r} ({origin}) has no attribute {attribute!r}{hint}"
        ) from None


def file_module_name(path: str) -> str:
    """The module name of the file at absolute ``path``: its stem (for tracebacks) and a
    hash of the path (two files of the same name stay apart)."""
    stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    digest = hashlib.sha256(path.encode()).hexdigest()[:12]
    return f"grpo_file_{stem}_{digest}"


def _load_module(name: str, dirs: list[str], what: str) -> ModuleType:
    if not all(part.isidentifier() for part in name.split(".")):
        raise ConfigError(f"{what}: {name!r} is neither a module name nor a .py file ({FORMS})")
    try:
        with _first_on_path(dirs):
            importlib.invalidate_caches()  # a file written since the last look is seen
            module = importlib.import_module(name)
    except ModuleNotFoundError as error:
        missing = error.name or ""
        if name == missing or name.startswith(missing + "."):
            looked = ", ".join([*dirs, "sys.path"])
            raise ConfigError(f"{what}: no module {name!r} (looked in {looked})") from None
        raise _import_failed(what, name, error) from None
    except Exception as error:
        raise _import_failed(what, name, error) from None
    _keep_reachable(sys.modules[name.partition(".")[0]], dirs)
    return module


def _load_file(where: str, dirs: list[str], what: str) -> ModuleType:
    candidates = [where] if os.path.isabs(where) else [os.path.join(d, where) for d in dirs]
    path = next((os.path.abspath(c) for c in candidates if os.path.isfile(c)), None)
    if path is None:
        looked = "" if os.path.isabs(where) else f" (looked in {', '.join(dirs)})"
        raise ConfigError(f"{what}: no file {where!r}{looked}")
    name = file_module_name(path)
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    assert module_spec is not None and module_spec.loader is not None  # a .py file has both
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # before it runs: dataclasses and pickle look it up by name
    try:
        with _first_on_path([os.path.dirname(path)]):  # its neighbours import, as a script's
            module_spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[name]
        raise _import_failed(what, path, error) from None
    _keep_reachable(module, [os.path.dirname(path)])
    return module


def _import_failed(what: str, name: str, error: BaseException) -> ConfigError:
    return ConfigError(f"{what}: importing {name!r} failed: {type(error).__name__}: {error}")


@contextlib.contextmanager
def _first_on_path(dirs: list[str]) -> Iterator[None]:
    """``dirs`` ahead of ``sys.path`` while a module imports, then taken out again: left
    in front they would shadow any installed module of the same name imported later."""
    sys.path[:0] = dirs
    try:
        yield
    finally:
        for directory in dirs:
            sys.path.remove(directory)  # the first occurrence: the one put in front


def _keep_reachable(top: ModuleType, dirs: list[str]) -> None:
    """Put the search directory a top-level module came from at the end of ``sys.path``, so
    that its own imports of its neighbours at call time work too; at the end it shadows
    nothing installed."""
    module_file = getattr(top, "__file__", None)
    if module_file is None:  # built in, or a namespace package
        return
    folder = os.path.dirname(os.path.abspath(module_file))
    if os.path.basename(module_file).startswith("__init__."):  # a package: its parent
        folder = os.path.dirname(folder)
    if folder in dirs and folder not in sys.path:
        sys.path.append(folder)
