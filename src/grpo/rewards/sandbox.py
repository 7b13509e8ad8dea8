"""Running untrusted Python (model-written code) without harm to the machine or the trainer.

:func:`run_python` starts ``python -I -S _sandbox_child.py`` in a new session; that launcher
isolates itself and runs ``python -I -B <program>`` (see ``_sandbox_child.py`` for the
layers: namespaces, a uid of its own, seccomp, rlimits). This side supplies what must not
depend on the program's cooperation:

* a **wall-clock timeout**: SIGKILL to the program's PID namespace (or process group), then,
  if need be, to the launcher's group (SIGTERM can be ignored; SIGKILL cannot);
* **capped output**: stdout, stderr and the control pipe are read in chunks as they come;
  past the cap the run is killed (so 100 MB of output costs a few milliseconds);
* an **empty temporary directory** holding only the given files, deleted afterwards;
* an **environment scrubbed of secrets**: the launcher and the program see only ``_ENV``;
* as root, a **uid of its own** for every concurrent run (from a per-process range), so
  RLIMIT_NPROC counts only that run's processes and a fork bomb in one run cannot starve
  the runs next to it.

Which isolation the machine allowed is in :attr:`SandboxResult.isolation` and from
:func:`sandbox_isolation`. Runs are independent, so callers run many at once from threads;
the work happens in the child processes.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

_LAUNCHER = Path(__file__).with_name("_sandbox_child.py")

# Everything the program's environment holds: nothing inherited from the trainer. PYTHON*
# variables are ignored under -I; they are here for a program that starts another Python.
_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONHASHSEED": "0",
    "OMP_NUM_THREADS": "1",  # one core per run: runs are parallel across cores already
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}

Isolation = Literal["auto", "seccomp", "none"]


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits. ``cpu_s`` 0 means ``ceil(timeout_s) + 1``."""

    timeout_s: float = 10.0  # wall clock, from start to the last process gone
    cpu_s: float = 0.0  # CPU seconds per process (RLIMIT_CPU)
    memory_mb: int = 1024  # address space per process (RLIMIT_AS)
    max_processes: int = 32  # processes and threads (RLIMIT_NPROC)
    file_size_mb: int = 16  # largest file it may write (RLIMIT_FSIZE)
    disk_mb: int = 64  # size of its private /tmp, where it runs (mount namespace only)
    output_bytes: int = 1 << 20  # cap on each of stdout, stderr and the control pipe
    open_files: int = 256

    def for_launcher(self) -> dict[str, int]:
        cpu = self.cpu_s or math.ceil(self.timeout_s) + 1
        return {
            "cpu_s": max(1, math.ceil(cpu)),
            "memory_bytes": self.memory_mb << 20,
            "max_processes": self.max_processes,
            "file_size_bytes": self.file_size_mb << 20,
            "disk_bytes": self.disk_mb << 20,
            "open_files": self.open_files,
        }


@dataclass
class SandboxResult:
    returncode: int | None  # None: killed before it could exit
    stdout: bytes
    stderr: bytes
    control: bytes  # what the program wrote to fd 3 (with pass_control)
    timed_out: bool
    output_capped: bool
    seconds: float
    isolation: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """Exited by itself with status 0, in time, within the output cap."""
        return self.returncode == 0 and not self.timed_out and not self.output_capped


# --- uids ------------------------------------------------------------------------------


class _UidPool:
    """Distinct unprivileged uids for concurrent runs (root only), from a range chosen by
    process id so that two trainers on one machine are unlikely to share one."""

    SIZE = 1024

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list[int] = []
        self._pid = -1

    @classmethod
    def range_for(cls, pid: int) -> range:
        base = 1_600_000_000 + (pid % 400_000) * cls.SIZE
        return range(base, base + cls.SIZE)

    def acquire(self) -> int:
        with self._lock:
            if self._pid != os.getpid():  # a fresh range after fork
                self._pid = os.getpid()
                self._free = list(reversed(self.range_for(self._pid)))
            if not self._free:
                raise RuntimeError(f"more than {self.SIZE} concurrent sandbox runs")
            return self._free.pop()

    def release(self, uid: int) -> None:
        with self._lock:
            if uid not in self._free:
                self._free.append(uid)


_UIDS = _UidPool()


# --- paths hidden from, and re-exposed to, the program ----------------------------------


@functools.cache
def _exposed_paths() -> tuple[str, ...]:
    """The Python installation (and virtual environment) the program runs with."""
    paths = {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)}
    paths.add(os.path.dirname(os.path.realpath(sys.executable)))
    paths.add(os.path.dirname(os.path.abspath(sys.executable)))
    return tuple(sorted(paths))


def _hidden_paths() -> list[str]:
    """Home directories and the trainer's working directory (configs, tokens, data)."""
    hidden = ["/root", "/home", "/mnt", "/media", "/srv"]
    cwd = os.path.realpath(os.getcwd())
    system = ("/usr", "/lib", "/bin", "/sbin", "/etc", "/proc", "/sys", "/dev", "/tmp")
    if cwd.count("/") >= 2 and not cwd.startswith(system):
        hidden.append(cwd)
    return hidden


# --- running ---------------------------------------------------------------------------


def _feed(fd: int, data: bytes) -> None:
    """Write everything to a pipe, then close it; a reader that goes away ends it early."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass  # the program closed its end or died: nothing more to give it
    finally:
        os.close(fd)


def _kill(process: subprocess.Popen, program_pid: int | None) -> None:
    """SIGKILL the program: the PID namespace it is the first process of (the kernel kills
    everything in it) or the process group it leads. The launcher then reaps it all and
    exits. Failing that within 5 s, or with no program pid yet, SIGKILL the launcher's
    group too; and reap the launcher.

    The launcher must outlive the program: a child it did not reap would be left to the
    machine's init, which in a container may never reap it (a zombie per timeout)."""
    if program_pid is not None:
        try:
            with open(f"/proc/{program_pid}/stat") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            if parent == process.pid:  # still the launcher's child: not a recycled pid
                os.kill(program_pid, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(program_pid, signal.SIGKILL)  # its group (no PID namespace)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=5)
        except (OSError, ValueError, IndexError):
            pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


class SandboxError(RuntimeError):
    """The sandbox could not be set up (the program was never started)."""


@dataclass
class _Control:
    pid: int | None = None  # host pid of the PID namespace's first process
    isolation: tuple[str, ...] = ()
    failure: str | None = None  # why the launcher gave up before starting the program
    program: bytes = b""  # what the program itself wrote


def _parse_control(raw: bytes) -> _Control:
    """Split the launcher's lines (``PID n``, ``ISOLATION a,b``, ``FAILED why``) from the
    program's output. Only lines before ``ISOLATION`` come from the launcher: the program
    starts after it, so it cannot forge them."""
    parsed = _Control()
    head, marker, rest = raw.partition(b"ISOLATION ")
    for line in head.splitlines():
        if line.startswith(b"PID ") and parsed.pid is None:
            parsed.pid = int(line[4:])
        elif line.startswith(b"FAILED ") and not marker:
            parsed.failure = line[7:].decode(errors="replace")
    if marker:
        features, _, parsed.program = rest.partition(b"\n")
        parsed.isolation = tuple(f for f in features.decode().split(",") if f)
    return parsed


def run_python(
    files: Mapping[str, str | bytes],
    argv: Sequence[str],
    *,
    stdin: str | bytes = b"",
    limits: SandboxLimits | None = None,
    isolation: Isolation = "auto",
    require: Sequence[str] = (),
    pass_control: bool = False,
    secret: bytes | None = None,
) -> SandboxResult:
    """Run ``python -I -B *argv`` in a sandbox whose working directory holds ``files``
    (Linux only). Raises :class:`SandboxError` when the sandbox cannot be set up.

    ``isolation``: "auto" (namespaces where the kernel allows, else seccomp), "seccomp"
    (skip namespaces), "none" (rlimits only: for debugging). ``require``: layer names
    (e.g. ``("netns", "pidns")``) without which the program is not started at all.
    ``pass_control``: the program gets a write pipe on fd 3 (returned as ``control``) and,
    with ``secret``, a read pipe on fd 4 carrying those bytes.
    """
    limits = limits or SandboxLimits()
    host_dir = tempfile.mkdtemp(prefix=f"grpo-sandbox-{os.getpid()}-")
    for name, content in files.items():
        data = content.encode() if isinstance(content, str) else content
        Path(host_dir, name).write_bytes(data)
    uid = _UIDS.acquire() if os.geteuid() == 0 else None
    control_r, control_w = os.pipe()
    stdin_r, stdin_w = os.pipe()
    secret_r, secret_w = os.pipe() if secret is not None else (-1, -1)
    spec = {
        "host_dir": host_dir,
        "python": sys.executable,
        "python_args": ["-I", "-B"],
        "argv": list(argv),
        "env": _ENV,
        "limits": limits.for_launcher(),
        "expose": list(_exposed_paths()),
        "hide": _hidden_paths(),
        "uid": uid,
        "isolation": isolation,
        "require": list(require),
        "control_fd": control_w,
        "secret_fd": secret_r,
        "pass_control": pass_control,
    }
    started = time.monotonic()
    deadline = started + limits.timeout_s
    try:
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", str(_LAUNCHER), json.dumps(spec)],
            stdin=stdin_r,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=[fd for fd in (control_w, secret_r) if fd >= 0],
            start_new_session=True,  # its own process group, killed as one
            env=_ENV,
            cwd=host_dir,
        )
    except BaseException:
        for fd in (control_r, control_w, stdin_r, stdin_w, secret_r, secret_w):
            if fd >= 0:
                os.close(fd)
        _cleanup(host_dir, uid)
        raise
    for fd in (control_w, stdin_r, secret_r):
        if fd >= 0:
            os.close(fd)
    data = stdin.encode() if isinstance(stdin, str) else stdin
    threading.Thread(target=_feed, args=(stdin_w, data), daemon=True).start()
    if secret_w >= 0:
        threading.Thread(target=_feed, args=(secret_w, secret or b""), daemon=True).start()
    try:
        buffers, timed_out, capped = _collect(process, control_r, deadline, limits.output_bytes)
    except BaseException:  # e.g. KeyboardInterrupt: the program must not outlive us
        _kill(process, None)
        _cleanup(host_dir, uid)
        raise
    finally:
        os.close(control_r)
    control = _parse_control(bytes(buffers["control"]))
    returncode = process.poll()
    if returncode is None:  # the launcher outlived the program by > 0.5 s: stop it all
        _kill(process, control.pid)
    seconds = time.monotonic() - started
    _cleanup(host_dir, uid)
    if control.failure is not None:
        raise SandboxError(f"sandbox set-up failed: {control.failure}")
    return SandboxResult(
        returncode=None if (timed_out or capped) else returncode,
        stdout=bytes(buffers["stdout"]),
        stderr=bytes(buffers["stderr"]),
        control=control.program,
        timed_out=timed_out,
        output_capped=capped,
        seconds=seconds,
        isolation=control.isolation,
    )


def _collect(
    process: subprocess.Popen, control_r: int, deadline: float, cap: int
) -> tuple[dict[str, bytearray], bool, bool]:
    """Read stdout, stderr and control until all close and the launcher exits, the deadline
    passes (timed out) or one stream passes the cap (capped); kills in the last two cases."""
    assert process.stdout is not None and process.stderr is not None
    streams = {
        process.stdout.fileno(): "stdout",
        process.stderr.fileno(): "stderr",
        control_r: "control",
    }
    buffers = {name: bytearray() for name in streams.values()}
    selector = selectors.DefaultSelector()
    for fd in streams:
        selector.register(fd, selectors.EVENT_READ)
    timed_out = capped = False
    exited_at = None
    try:
        while selector.get_map() and not capped:
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if exited_at is None and process.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > 0.5:
                break  # a leftover background process holds a pipe: stop waiting for it
            for key, _ in selector.select(timeout=min(deadline - now, 0.25)):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fd)
                    continue
                buffer = buffers[streams[key.fd]]
                room = cap - len(buffer)
                buffer += chunk[:room]
                capped = capped or len(chunk) > room
        if not timed_out and not capped:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
    finally:
        selector.close()
    if timed_out or capped:
        _kill(process, _parse_control(bytes(buffers["control"])).pid)
    process.stdout.close()
    process.stderr.close()
    return buffers, timed_out, capped


def _cleanup(host_dir: str, uid: int | None) -> None:
    def make_writable(function, path, _error) -> None:  # a program may chmod its files
        try:
            os.chmod(os.path.dirname(path), 0o700)
            os.chmod(path, 0o700)
            function(path)
        except OSError:
            pass

    shutil.rmtree(host_dir, onerror=make_writable)
    if uid is not None:
        _UIDS.release(uid)


@functools.cache
def sandbox_isolation(isolation: Isolation = "auto") -> tuple[str, ...]:
    """The isolation layers this machine gives a sandboxed run, e.g. ``("netns", "pidns",
    "mountns", "rlimits", "uid")``; measured once, by running a trivial program."""
    result = run_python({"main.py": "pass\n"}, ["main.py"], isolation=isolation)
    if not result.ok:
        raise RuntimeError(f"the sandbox cannot run Python here: {result.stderr.decode()[-2000:]}")
    return result.isolation
