"""Mistakes in the code a config names (tools, the environment, reward functions) are one
``grpo train: error: ...`` line and exit 2, before any model loads: the configs here name
a model directory that does not exist, which loading would report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo.cli.main import main

TOOLS = '''
def mul(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def no_hints(a, b):
    """Multiply two integers."""
    return a * b


def no_doc(a: int, b: int) -> int:
    return a * b


class Game:
    def reset(self):
        return []
'''


@pytest.fixture(scope="module")
def user_code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for the module (once imported, a process keeps ``errtools`` by name)."""
    folder = tmp_path_factory.mktemp("agent_errors")
    (folder / "config").mkdir()
    (folder / "config" / "errtools.py").write_text(TOOLS)
    (folder / "work").mkdir()
    return folder


@pytest.fixture
def config_dir(user_code: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config folder holding the user's module; the working directory is elsewhere. The
    module is imported afresh: another test in this process imported its namesake from
    another folder, and Python keeps a module by its name."""
    monkeypatch.chdir(user_code / "work")
    monkeypatch.delitem(sys.modules, "errtools", raising=False)
    return user_code / "config"


def _write_config(folder: Path, agent: str, rewards: str = "grpo.rewards:numeric_answer") -> Path:
    config = folder / "run.toml"
    config.write_text(
        f'[model]\npath = "{folder / "no_model_here"}"\n'
        f'[data]\ntrain_path = "{folder / "prompts.jsonl"}"\n'
        f'[[rewards]]\nfunction = "{rewards}"\n'
        f"[agent]\n{agent}\n"
    )
    return config


CASES = {
    "unknown module": (
        'tools = ["errtools_missing:mul"]',
        "agent.tools[0]: 'errtools_missing:mul': no module 'errtools_missing' "
        "(looked in {config}, {work}, sys.path)",
    ),
    "missing attribute": (
        'tools = ["errtools:mull"]',
        "agent.tools[0]: 'errtools:mull': module 'errtools' ({config}/errtools.py) has no "
        "attribute 'mull'; did you mean 'mul'?",
    ),
    "misspelled python": (
        'tools = ["errtools:mul", "pyth0n"]',
        "agent.tools[1]: 'pyth0n' is not a built-in tool ('python'); did you mean 'python'? "
        "A tool of your own is 'module:function' or 'path/to/file.py:function'",
    ),
    "no type hints": (
        'tools = ["errtools:no_hints"]',
        "agent.tools[0]: 'errtools:no_hints': tool 'no_hints': parameter 'a' needs a type hint",
    ),
    "no docstring": (
        'tools = ["errtools.py:no_doc"]',
        "agent.tools[0]: 'errtools.py:no_doc': tool 'no_doc' needs a docstring: it is the "
        "model's description",
    ),
    "missing environment class": (
        'environment = "errtools:Gamee"',
        "agent.environment: 'errtools:Gamee': module 'errtools' ({config}/errtools.py) has no "
        "attribute 'Gamee'; did you mean 'Game'?",
    ),
    "environment without step": (
        'environment = "errtools:Game"',
        "agent.environment: 'errtools:Game': class Game lacks step() (an environment has "
        "reset() and step())",
    ),
    "environment not a class": (
        'environment = "errtools:mul"',
        "agent.environment: 'errtools:mul': mul is a function, not a class",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_agent_mistake_is_one_line_before_the_model_loads(
    config_dir: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    agent, message = CASES[case]
    config = _write_config(config_dir, agent)
    assert main(["train", str(config)]) == 2
    out, err = capsys.readouterr()
    expected = message.format(config=config_dir, work=config_dir.parent / "work")
    assert (out, err) == ("", f"grpo train: error: {expected}\n")


def test_a_reward_function_mistake_is_one_line_in_train_and_eval(
    config_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _write_config(config_dir, 'tools = ["errtools:mul"]', rewards="errtools:score")
    message = (
        "rewards[0].function: 'errtools:score': module 'errtools' "
        f"({config_dir}/errtools.py) has no attribute 'score'\n"
    )
    assert main(["train", str(config)]) == 2
    assert capsys.readouterr().err == f"grpo train: error: {message}"
    model, data = str(config_dir / "no_model_here"), str(config_dir / "prompts.jsonl")
    assert main(["eval", model, data, "--config", str(config)]) == 2
    assert capsys.readouterr().err == f"grpo eval: error: {message}"
    assert main(["eval", model, data, "--reward", f"{config_dir}/errtools.py:mull"]) == 2
    assert capsys.readouterr().err == (
        f"grpo eval: error: rewards[0].function: '{config_dir}/errtools.py:mull': file "
        f"'{config_dir}/errtools.py' ({config_dir}/errtools.py) has no attribute 'mull'; "
        "did you mean 'mul'?\n"
    )
    assert main(["eval", model, data, "--reward", "errtools.py:mul"]) == 2  # no --config
    assert capsys.readouterr().err == (
        "grpo eval: error: rewards[0].function: 'errtools.py:mul': no file 'errtools.py' "
        f"(looked in {config_dir.parent / 'work'})\n"
    )


@pytest.mark.parametrize("command", ["train", "eval"])
def test_the_command_exits_2_with_no_traceback(config_dir: Path, command: str) -> None:
    config = _write_config(config_dir, 'tools = ["pyth0n"]')
    args = ["train", str(config)]
    if command == "eval":
        args = ["eval", str(config_dir / "no_model_here"), "d.jsonl", "--config", str(config)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-m", "grpo", *args], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"grpo {command}: error: agent.tools[0]: 'pyth0n' is not a built-in tool ('python'); "
        "did you mean 'python'? A tool of your own is 'module:function' or "
        "'path/to/file.py:function'"
    ]
