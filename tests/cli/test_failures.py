"""A failure of the user's code that stops `grpo train` is one line (the environment or
reward, the dataset file and row, the step, the exception) and then the user's own frames
only: a constructor, reset and step error of an environment, a malformed ``step()`` return
and a reward that raises. ``--debug`` or ``GRPO_DEBUG=1`` prints the whole traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo.cli.main import main

USER_MODULE = '''
class Broken:
    """Fails as its row's "kind" column says; row 1 of every file is a good one."""

    def __init__(self, row):
        self.kind = row["kind"]
        if self.kind == "init":
            self.size = int("six")

    def reset(self):
        if self.kind == "reset":
            raise KeyError("no opening for this row")
        return [{"role": "user", "content": "Say 1"}]

    def step(self, text):
        if self.kind == "step":
            return self.judge(text)
        if self.kind == "malformed":
            return "oops"
        return None, 1.0, True

    def judge(self, text):
        return None, 1 / 0, True


def one(prompts, completions, **_):
    return [1.0] * len(completions)


def fussy(prompts, completions, kind, **_):
    return [check(text) if k == "reward" else 1.0 for text, k in zip(completions, kind)]


def check(text):
    raise ValueError(f"cannot score {text!r}")
'''
# Every printable character stops a turn, so each row's first turn reaches step().
STOPS = [chr(code) for code in range(32, 127) if chr(code) not in "\"'\\"]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's folder: a tiny model with a printable-ASCII tokenizer, the module."""
    from grpo.demo.model import build_tiny_llama
    from grpo.demo.tokenizer import build_char_tokenizer

    folder = tmp_path_factory.mktemp("user_project")
    alphabet = [chr(code) for code in range(32, 127)] + ["\n"]
    tokenizer = build_char_tokenizer(folder / "model", alphabet=alphabet)
    build_tiny_llama(tokenizer, hidden_size=32, layers=2, heads=2, directory=folder / "model")
    (folder / "failing_code.py").write_text(USER_MODULE)
    return folder


def _train(project: Path, tmp_path: Path, kind: str, capsys, *extra: str) -> tuple[int, str]:
    data = project / f"{kind}.jsonl"
    data.write_text("".join(json.dumps({"prompt": "p", "kind": k}) + "\n" for k in ("fine", kind)))
    environment = [] if kind == "reward" else ['environment = "failing_code:Broken"']
    reward = "fussy" if kind == "reward" else "one"
    config = project / f"{kind}.toml"
    config.write_text(
        f'[model]\npath = "{project / "model"}"\n[data]\ntrain_path = "{data}"\n'
        f'[[rewards]]\nfunction = "failing_code:{reward}"\n'
        f"[rollout]\ngroup_size = 2\nmax_new_tokens = 3\nstop_strings = {json.dumps(STOPS)}\n"
        f'[train]\nsteps = 1\nprompts_per_step = 2\nrun_dir = "{tmp_path / "run"}"\n'
        "progress = false\ntensorboard = false\nthreads = 1\n"
        + ("[agent]\n" + "\n".join(environment) + "\n" if environment else "")
    )
    capsys.readouterr()
    code = main(["train", str(config), *extra])
    return code, capsys.readouterr().err


def _report(stderr: str) -> list[str]:
    """The failure report: from grpo's error line to the end."""
    lines = stderr.rstrip("\n").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("grpo train: error:"))
    return lines[start:]


def _user_frames(project: Path, *functions: str) -> list[str]:
    """Each frame as Python prints it: its file line, then its source line."""
    return [f'  File "{project / "failing_code.py"}"' for _ in functions]


CASES = {
    # kind: (the line after "grpo train: error: ", the user's functions in the traceback)
    "init": (
        "step 1: environment Broken: {data}: row 2: __init__ raised ValueError: invalid "
        "literal for int() with base 10: 'six'",
        ["__init__"],
    ),
    "reset": (
        "step 1: environment Broken: {data}: row 2: reset() raised KeyError: "
        "'no opening for this row'",
        ["reset"],
    ),
    "step": (
        "step 1: environment Broken: {data}: row 2, trajectory 1 of 2: step() raised "
        "ZeroDivisionError: division by zero",
        ["step", "judge"],
    ),
    "malformed": (
        "step 1: environment Broken: {data}: row 2, trajectory 1 of 2: step() returned "
        "'oops', not (observation, reward, done)",
        [],
    ),
    "reward": (
        "step 1: reward 'fussy': {data}: row 2, completion 1 of 2: raised ValueError: cannot score",
        ["fussy", "<listcomp>", "check"],
    ),
}


@pytest.mark.parametrize("kind", list(CASES))
def test_a_failure_is_one_line_and_the_users_frames(project, tmp_path, capsys, kind) -> None:
    code, stderr = _train(project, tmp_path, kind, capsys)
    assert code == 2
    assert "Traceback (most recent call last)" not in stderr  # nothing of grpo's internals
    report = _report(stderr)
    line, functions = CASES[kind]
    expected = "grpo train: error: " + line.format(data=project / f"{kind}.jsonl")
    assert report[0].startswith(expected), report[0]
    if not functions:  # grpo found the problem in the returned value: the line is all
        assert report == report[:1]
        return
    assert report[1].startswith("Your code (most recent call last; --debug or GRPO_DEBUG=1")
    frames = report[2:]
    assert len(frames) == 2 * len(functions)  # per frame: where, and its source line
    for where, function in zip(frames[::2], functions, strict=True):
        assert where.startswith(f'  File "{project / "failing_code.py"}", line ')
        assert where.endswith(f", in {function}")
    assert not any("grpo" in Path(w.split('"')[1]).parts for w in frames[::2])


def test_debug_prints_the_whole_traceback(project, tmp_path, capsys, monkeypatch) -> None:
    code, stderr = _train(project, tmp_path, "step", capsys, "--debug")
    assert code == 2
    assert "Traceback (most recent call last)" in stderr
    assert "grpo/agents/replies.py" in stderr and "failing_code.py" in stderr
    assert stderr.rstrip().splitlines()[-1].startswith("grpo train: error: step 1: environment")
    monkeypatch.setenv("GRPO_DEBUG", "1")
    code, stderr = _train(project, tmp_path / "again", "step", capsys)
    assert code == 2 and "grpo/agents/replies.py" in stderr


def test_a_failure_in_an_asynchronous_worker_reads_the_same(project, tmp_path, capsys) -> None:
    """The reward fails in a rollout worker process: the same line and the same frames."""
    code, stderr = _train(project, tmp_path, "reward", capsys, "--rollout.mode=async")
    assert code == 2 and "Traceback (most recent call last)" not in stderr
    report = _report(stderr)
    line = CASES["reward"][0].format(data=project / "reward.jsonl")
    assert report[0].startswith(f"grpo train: error: {line}"), report[0]
    assert [where.rsplit(", in ", 1)[1] for where in report[2::2]] == CASES["reward"][1]
