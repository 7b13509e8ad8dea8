"""The user's modules: ``module:name`` and ``path/file.py:name`` found from the config
file's folder, then the working directory, under one name in every process."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grpo.config import ConfigError, load_config
from grpo.config.imports import file_module_name, import_dirs, import_object


@pytest.fixture
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A config folder and a different working directory (the current one)."""
    config_dir, work_dir = tmp_path / "config", tmp_path / "work"
    config_dir.mkdir()
    work_dir.mkdir()
    monkeypatch.chdir(work_dir)
    return config_dir, work_dir


def test_the_search_dirs_are_the_configs_folder_then_the_working_directory(folders) -> None:
    config_dir, work_dir = folders
    assert import_dirs(config_dir / "run.toml", []) == [str(config_dir), str(work_dir)]
    assert import_dirs(None, []) == [str(work_dir)]
    assert import_dirs(work_dir / "run.toml", []) == [str(work_dir)]  # each folder once
    assert import_dirs(config_dir / "run.toml", ["lib", "/opt/x"]) == [
        str(config_dir / "lib"),
        "/opt/x",
    ]
    (config_dir / "run.toml").write_text(
        '[model]\npath = "m"\n[data]\ntrain_path = "d"\n[[rewards]]\nfunction = "r:f"\n'
    )
    loaded = load_config(config_dir / "run.toml")
    assert loaded.train.import_dirs == [str(config_dir), str(work_dir)]


def test_a_module_in_the_configs_folder_comes_before_one_in_the_working_directory(
    folders,
) -> None:
    config_dir, work_dir = folders
    (config_dir / "imp_shadowed.py").write_text("WHERE = 'config'\n")
    (work_dir / "imp_shadowed.py").write_text("WHERE = 'work'\n")
    (work_dir / "imp_only_here.py").write_text("WHERE = 'work'\n")
    dirs = import_dirs(config_dir / "run.toml", [])
    assert import_object("imp_shadowed:WHERE", dirs, "f") == "config"
    assert import_object("imp_only_here:WHERE", dirs, "f") == "work"
    assert import_object("grpo.config.imports:FORMS", dirs, "f").startswith("'module:name'")
    assert str(config_dir) not in sys.path[:1]  # not left in front of installed modules


def test_a_py_file_relative_to_the_configs_folder_then_the_working_directory(folders) -> None:
    config_dir, work_dir = folders
    (config_dir / "lib").mkdir()
    (config_dir / "lib" / "imp_rel.py").write_text("VALUE = 1\n")
    (work_dir / "imp_cwd.py").write_text("VALUE = 2\n")
    absolute = work_dir / "imp_abs.py"
    absolute.write_text("VALUE = 3\n")
    dirs = import_dirs(config_dir / "run.toml", [])
    assert import_object("lib/imp_rel.py:VALUE", dirs, "f") == 1
    assert import_object("imp_cwd.py:VALUE", dirs, "f") == 2
    assert import_object(f"{absolute}:VALUE", [], "f") == 3
    name = file_module_name(str(config_dir / "lib" / "imp_rel.py"))
    assert sys.modules[name].VALUE == 1 and name.startswith("grpo_file_imp_rel_")


CLASSES = """
import dataclasses

@dataclasses.dataclass
class Point:
    x: int
"""


def test_a_files_module_has_one_name_in_every_process(folders) -> None:
    """An object pickled here unpickles in a fresh process that resolved the same spec."""
    config_dir, _ = folders
    (config_dir / "imp_points.py").write_text(CLASSES)
    dirs = import_dirs(config_dir / "run.toml", [])
    point = import_object("imp_points.py:Point", dirs, "f")(7)
    script = textwrap.dedent(
        f"""
        import pickle, sys
        from grpo.config.imports import import_object
        import_object("imp_points.py:Point", {dirs!r}, "f")
        print(pickle.loads(sys.stdin.buffer.read()))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", script],
        input=pickle.dumps(point),
        capture_output=True,
        cwd="/",
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert result.stdout.decode().strip() == "Point(x=7)"


def test_each_failure_names_the_field_the_spec_and_where_it_looked(folders) -> None:
    config_dir, work_dir = folders
    (config_dir / "imp_broken.py").write_text("import imp_not_installed_zz\n")
    (config_dir / "imp_ok.py").write_text("def multiply(a, b):\n    return a * b\n")
    dirs = import_dirs(config_dir / "run.toml", [])
    cases = {
        "imp_nowhere:f": f"no module 'imp_nowhere' (looked in {config_dir}, {work_dir}, sys.path)",
        "imp_ok:multiplyy": (
            f"module 'imp_ok' ({config_dir / 'imp_ok.py'}) has no attribute 'multiplyy'; "
            "did you mean 'multiply'?"
        ),
        "imp_broken:f": (
            "importing 'imp_broken' failed: ModuleNotFoundError: "
            "No module named 'imp_not_installed_zz'"
        ),
        "nope.py:f": f"no file 'nope.py' (looked in {config_dir}, {work_dir})",
        "imp_ok": "expected 'module:name' or 'path/to/file.py:name'",
        "a/b:f": "'a/b' is neither a module name nor a .py file",
    }
    for spec, message in cases.items():
        with pytest.raises(ConfigError) as raised:
            import_object(spec, dirs, "rewards[1].function")
        assert str(raised.value).startswith(f"rewards[1].function: {spec!r}: {message}")
