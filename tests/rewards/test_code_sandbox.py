"""The code reward and its sandbox: functional cases, then adversarial completions.

Every adversarial completion must score 0, end within its timeout plus a margin, and leave
the machine and this process (standing in for the trainer) unharmed. The margin is large
because the test machine's cores are shared.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grpo.rewards import code_reward, extract_code, run_python, sandbox_isolation
from grpo.rewards.code import outputs_match, parse_tests
from grpo.sandbox.uids import UidPool

if sys.platform != "linux":
    pytest.skip("the sandbox is Linux-only", allow_module_level=True)

TIMEOUT = 2.0
MARGIN = 3.0
ISOLATION = sandbox_isolation()
CONFINED = "mountns" in ISOLATION or "uid" in ISOLATION  # not the trainer's user and files
SUM_TESTS = [{"input": "1 2\n", "output": "3\n"}, {"input": "10 -4", "output": "6"}]
SUM_OK = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


def fenced(code: str) -> str:
    return f"Here is my solution:\n```python\n{code}\n```\n"


def score(completion: str, tests: object = None, **options: object) -> tuple[float, float]:
    started = time.monotonic()
    tests = tests or [{"input": "", "output": "ok"}]
    [value] = code_reward(["p"], [completion], tests=[tests], timeout_s=TIMEOUT, **options)
    return value, time.monotonic() - started


def sandbox_leftovers() -> tuple[set[str], list[int]]:
    """This process's temporary sandbox directories, and processes under its sandbox uids
    (another test run on the machine has its own)."""
    directories = {
        p.name for p in Path(tempfile.gettempdir()).glob(f"grpo-sandbox-{os.getpid()}-*")
    }
    uids = UidPool.range_for(os.getpid())
    processes = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uid = int(
                next(
                    line for line in status.read_text().splitlines() if line.startswith("Uid:")
                ).split()[1]
            )
        except (OSError, StopIteration, ValueError):
            continue
        if uid in uids:
            processes.append(int(status.parent.name))
    return directories, processes


@pytest.fixture(autouse=True)
def machine_unharmed() -> Iterator[None]:
    directories_before, _ = sandbox_leftovers()
    yield
    deadline = time.monotonic() + 1  # the kernel tears a PID namespace down before we return
    while True:
        directories, processes = sandbox_leftovers()
        if (not processes and directories <= directories_before) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not processes, f"sandbox processes left running: {processes}"
    assert directories <= directories_before, "sandbox directories left behind"
    after = run_python({"main.py": "print(6 * 7)"}, ["main.py"])  # the sandbox still works
    assert after.ok and after.stdout == b"42\n"


# --- functional ------------------------------------------------------------------------


def test_extract_code_prefers_the_last_python_block() -> None:
    text = "```\nuntagged\n```\n```python\nfirst\n```\ntext\n```py\nsecond\n```\n```bash\nls\n```"
    assert extract_code(text) == "second\n"
    assert extract_code("```\nonly untagged\n```") == "only untagged\n"
    assert extract_code("no code at all") is None


def test_parse_tests_accepts_the_documented_forms() -> None:
    assert parse_tests(SUM_TESTS).kind == "stdio"
    assert parse_tests({"inputs": ["1"], "outputs": ["2"]}).cases == (("1", "2"),)
    assert parse_tests('[{"input": "1", "output": "2"}]').cases == (("1", "2"),)
    assert parse_tests(["assert f(1) == 2"]).kind == "assert"
    assert parse_tests("assert f(1) == 2\nassert f(2) == 3").cases == (
        "assert f(1) == 2",
        "assert f(2) == 3",
    )
    with pytest.raises(ValueError):
        parse_tests(42)


def test_outputs_match_ignores_trailing_whitespace_only() -> None:
    assert outputs_match("3 \n4\n\n", "3\n4")
    assert not outputs_match("3 4", "3\n4")


def test_stdio_and_assert_tests_fraction_and_binary() -> None:
    half = fenced("a, b = map(int, input().split())\nprint(3)")
    assert code_reward(["p"] * 3, [SUM_OK, half, "no code"], tests=[SUM_TESTS] * 3) == [
        1.0,
        0.5,
        0.0,
    ]
    assert code_reward(["p"], [half], tests=[SUM_TESTS], mode="binary") == [0.0]
    add = fenced(
        "def add(a, b):\n    return a + b\n\nif __name__ == '__main__':\n    print(input())"
    )
    wrong = fenced("def add(a, b):\n    return 3")
    tests = ["assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(0, 0) == 0"]
    assert code_reward(
        ["p"] * 2, [add, wrong], test_list=[tests] * 2, tests_column="test_list"
    ) == [1.0, pytest.approx(1 / 3)]


def test_a_timeout_fails_that_test_and_skips_the_rest() -> None:
    slow = fenced("import time\nif input() == '10 -4':\n    time.sleep(60)\nprint(3)")
    value, elapsed = score(slow, [*SUM_TESTS, {"input": "1 2", "output": "3"}])
    assert value == pytest.approx(1 / 3)
    assert elapsed < TIMEOUT + MARGIN


def test_hang_in_an_assert_keeps_credit_for_the_tests_before_it() -> None:
    code = fenced("def f(x):\n    while x == 2:\n        pass\n    return x")
    value, elapsed = score(code, ["assert f(1) == 1", "assert f(2) == 2", "assert f(3) == 3"])
    assert value == pytest.approx(1 / 3) and elapsed < TIMEOUT + MARGIN


def test_completions_run_in_parallel_and_good_ones_still_pass_next_to_bad_ones() -> None:
    bombs = [fenced("import os\nwhile True:\n    try: os.fork()\n    except OSError: pass")] * 2
    completions = [SUM_OK, *bombs, SUM_OK, fenced("while True: pass"), SUM_OK]
    started = time.monotonic()
    scores = code_reward(
        ["p"] * 6, completions, tests=[SUM_TESTS] * 6, timeout_s=TIMEOUT, workers=2
    )
    assert scores == [1.0, 0.0, 0.0, 1.0, 0.0, 1.0]
    assert time.monotonic() - started < 3 * TIMEOUT / 2 * 2 + MARGIN  # 3 timeouts over 2 workers


def test_isolation_is_reported_and_required_layers_are_enforced() -> None:
    assert "rlimits" in ISOLATION
    with pytest.raises(RuntimeError, match="required isolation"):
        run_python({"main.py": "print(1)"}, ["main.py"], isolation="none", require=["netns"])


# --- adversarial -----------------------------------------------------------------------


def program(text: str) -> str:
    return fenced(textwrap.dedent(text).strip("\n"))


HARMLESS_TO_THE_MACHINE = {
    "infinite loop": """
        while True:
            pass
    """,
    "fork bomb": """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """,
    "memory bomb": """
        blocks = []
        while True:
            blocks.append(bytearray(50 << 20))
    """,
    "deep recursion": """
        import sys
        sys.setrecursionlimit(10**8)
        def f(n):
            return f(n + 1) + 1
        print(f(0))
    """,
    "ignores SIGTERM": """
        import signal, time
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU):
            signal.signal(s, signal.SIG_IGN)
        while True:
            time.sleep(0.01)
    """,
    "100 MB of stdout": """
        import sys
        block = "o" * (1 << 20)
        for _ in range(100):
            sys.stdout.write(block)
    """,
    "escaping the process group": """
        import os, time
        if os.fork() == 0:
            try:
                os.setsid()
            except OSError:
                pass
            time.sleep(3600)
        print("ok")
        os._exit(1)
    """,
}


@pytest.mark.parametrize(
    "code", HARMLESS_TO_THE_MACHINE.values(), ids=HARMLESS_TO_THE_MACHINE.keys()
)
def test_adversarial_completion_scores_zero_in_time(code: str) -> None:
    value, elapsed = score(program(code))
    assert value == 0.0
    assert elapsed < TIMEOUT + MARGIN


def test_filling_the_disk_is_capped() -> None:
    free_before = os.statvfs(tempfile.gettempdir())
    many_files = """
        i = 0
        while True:
            with open(f"f{i}", "wb") as f:
                f.write(b"x" * (8 << 20))
            i += 1
    """
    value, elapsed = score(program(many_files))
    assert value == 0.0 and elapsed < TIMEOUT + MARGIN
    one_file = "with open('big', 'wb') as f:\n    while True:\n        f.write(b'x' * (1 << 20))"
    result = run_python({"main.py": one_file}, ["main.py"])
    assert not result.ok and b"File too large" in result.stderr  # RLIMIT_FSIZE
    if "mountns" in ISOLATION:  # the private /tmp is a small tmpfs: the host disk is untouched
        free_after = os.statvfs(tempfile.gettempdir())
        lost = (free_before.f_bavail - free_after.f_bavail) * free_before.f_frsize
        assert lost < 256 << 20


@pytest.mark.skipif(
    not CONFINED, reason=f"files are protected by a mount namespace or uid: {ISOLATION}"
)
def test_cannot_write_or_delete_files_outside_its_directory(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    planted = tmp_path / "planted.txt"
    in_prefix = Path(sys.prefix) / f"sandbox-probe-{secrets.token_hex(4)}"  # outside /tmp
    code = f"""
        import os, shutil
        attempts = [
            lambda: os.remove({str(victim)!r}),
            lambda: open({str(victim)!r}, "w").write("gone"),
            lambda: open({str(planted)!r}, "w").write("x"),
            lambda: open({str(in_prefix)!r}, "w").write("x"),
            lambda: shutil.rmtree({str(tmp_path)!r}),
        ]
        for attempt in attempts:
            try:
                attempt()
                print("ok")
            except OSError:
                pass
    """
    try:
        value, elapsed = score(program(code))
        assert value == 0.0 and elapsed < TIMEOUT + MARGIN
        assert victim.read_text() == "precious"
        assert not planted.exists()
        assert not in_prefix.exists()
    finally:
        in_prefix.unlink(missing_ok=True)


@pytest.mark.parametrize("isolation", ["auto", "seccomp"])
def test_cannot_open_a_network_connection(isolation: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(0.5)
        code = f"""
            import socket
            with socket.create_connection(("127.0.0.1", {server.getsockname()[1]}), timeout=1) as s:
                s.sendall(b"hello")
            print("ok")
        """
        value, elapsed = score(program(code), isolation=isolation)
        assert value == 0.0 and elapsed < TIMEOUT + MARGIN
        with pytest.raises(TimeoutError):
            server.accept()  # nobody connected


@pytest.mark.skipif(
    not CONFINED, reason=f"/proc/PID/environ is hidden by namespaces or uid: {ISOLATION}"
)
def test_cannot_read_a_secret_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-" + secrets.token_hex(16)
    monkeypatch.setenv("GRPO_TEST_API_KEY", secret)
    code = f"""
        import os
        found = os.environ.get("GRPO_TEST_API_KEY")
        for pid in ({os.getpid()}, os.getppid(), 1, "self"):
            try:
                for item in open(f"/proc/{{pid}}/environ", "rb").read().split(b"\\0"):
                    if item.startswith(b"GRPO_TEST_API_KEY="):
                        found = item.split(b"=", 1)[1].decode()
            except OSError:
                pass
        print(found)
    """
    value, _ = score(program(code), [{"input": "", "output": secret}])
    assert value == 0.0
    result = run_python({"main.py": textwrap.dedent(code)}, ["main.py"])
    assert result.ok and secret.encode() not in result.stdout + result.stderr


@pytest.mark.parametrize("isolation", ["auto", "seccomp"])
def test_cannot_kill_the_parent_or_other_processes(isolation: str) -> None:
    layers = sandbox_isolation(isolation)
    if "pidns" not in layers and "seccomp" not in layers:
        pytest.skip(f"no PID namespace and no seccomp here ({layers})")
    # kill(-1) (every process it may signal) only where a PID namespace contains it.
    kill_all = "os.kill(-1, signal.SIGKILL)" if "pidns" in layers else ""
    victim = subprocess.Popen(["sleep", "60"])
    try:
        code = f"""
            import os, signal
            killed = []
            for pid in [os.getppid(), {os.getpid()}, {victim.pid}, {os.getpgid(0)}]:
                for kill in (os.kill, os.killpg):
                    try:
                        if pid > 0:
                            kill(pid, signal.SIGKILL)
                            killed.append(pid)
                    except OSError:
                        pass
            {kill_all}
            print("ok" if killed else "none")
        """
        require = ["pidns"] if "pidns" in layers else ["seccomp"]  # never run it unprotected
        value, elapsed = score(program(code), isolation=isolation, require=require)
        assert value == 0.0 and elapsed < TIMEOUT + MARGIN
        assert victim.poll() is None  # still running
        os.kill(os.getpid(), 0)  # and so are we
    finally:
        victim.kill()
        victim.wait()


EXITS = {"sys.exit(0)": "sys.exit(0)", "os._exit(0)": "sys.stdout.flush()\n        os._exit(0)"}


@pytest.mark.parametrize("exit_call", EXITS.values(), ids=EXITS.keys())
def test_exiting_before_the_tests_run_scores_zero(exit_call: str) -> None:
    code = f"""
        import os, sys
        def solve():
            return 2
        print("ok")
        print("All tests passed")
        {exit_call}
    """
    value, elapsed = score(program(code), ["assert solve() == 1", "print('ok')"])
    assert value == 0.0 and elapsed < TIMEOUT + MARGIN
