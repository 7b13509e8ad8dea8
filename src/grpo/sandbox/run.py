"""Running untrusted programs (model-written code, proofs) without harm to the machine or
the trainer.

:func:`run_program` starts ``python -I -S launcher.py`` in a new session; that launcher
isolates itself and ``exec``s the given command (see :mod:`grpo.sandbox.launcher` for the
layers: namespaces, a uid of its own, seccomp, rlimits); :func:`run_python` runs ``python
-I -B <file>`` that way, the proof checker ``coqc``. This side supplies what must not depend on
the program's cooperation:

* a **wall-clock timeout**: SIGKILL to the program's PID namespace (or process group), then,
  if need be, to the launcher's group (SIGTERM can be ignored; SIGKILL cannot);
* **capped output**: stdout, stderr and the control pipe are read in chunks as they come;
  past the cap the run is killed (so 100 MB of output costs a few milliseconds);
* an **empty temporary directory** holding only the given files, deleted afterwards;
* an **environment scrubbed of secrets**: the launcher and the program see only ``_ENV``;
* as root, a **uid of its own** for every concurrent run (:mod:`grpo.sandbox.uids`).

Which isolation the machine allowed is in :attr:`SandboxResult.isolation` and from
:func:`sandbox_isolation`. Runs are independent, so callers run many at once from threads;
the work happens in the child processes.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo.sandbox.limits import Isolation, SandboxLimits
from grpo.sandbox.uids import UIDS
from grpo.sandbox.watch import collect_output, feed_in_background, kill_run, parse_control

_LAUNCHER = Path(__file__).with_name("launcher.py")

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


# --- paths hidden from, and re-exposed to, the program ----------------------------------


@functools.cache
def _python_paths() -> tuple[str, ...]:
    """The Python installation (and virtual environment) a Python program runs with."""
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


class SandboxError(RuntimeError):
    """The sandbox could not be set up (the program was never started)."""


def run_python(
    files: Mapping[str, str | bytes], argv: Sequence[str], **options: Any
) -> SandboxResult:
    """Run ``python -I -B *argv`` (this interpreter) with :func:`run_program`'s sandbox and
    ``options``; the Python installation stays visible to it."""
    expose = (*_python_paths(), *options.pop("expose", ()))
    return run_program(files, [sys.executable, "-I", "-B", *argv], expose=expose, **options)


def run_program(
    files: Mapping[str, str | bytes],
    command: Sequence[str],
    *,
    stdin: str | bytes = b"",
    limits: SandboxLimits | None = None,
    isolation: Isolation = "auto",
    require: Sequence[str] = (),
    pass_control: bool = False,
    secret: bytes | None = None,
    expose: Sequence[str] = (),
    hide: Sequence[str] = (),
) -> SandboxResult:
    """Run ``command`` (its first item an absolute path or a name on the sandbox's PATH) in a
    sandbox whose working directory holds ``files`` (Linux only). Raises
    :class:`SandboxError` when the sandbox cannot be set up or the program is not found.

    ``isolation``: "auto" (namespaces where the kernel allows, else seccomp), "seccomp"
    (skip namespaces), "none" (rlimits only: for debugging). ``require``: layer names
    (e.g. ``("netns", "pidns")``) without which the program is not started at all.
    ``pass_control``: the program gets a write pipe on fd 3 (returned as ``control``) and,
    with ``secret``, a read pipe on fd 4 carrying those bytes. ``expose``: directories the
    program needs that the mount namespace would hide (they stay read-only); the program's
    own directory is always exposed. ``hide``: more directories to hide (mount namespace
    only), besides home directories and the trainer's working directory.
    """
    program = shutil.which(command[0], path=_ENV["PATH"]) if command else None
    if program is None:
        raise SandboxError(f"program not found: {command[0] if command else '(empty command)'}")
    program = os.path.abspath(program)
    limits = limits or SandboxLimits()
    host_dir = _make_host_dir(files)
    uid = UIDS.acquire() if os.geteuid() == 0 else None
    control_r, control_w = os.pipe()
    stdin_r, stdin_w = os.pipe()
    secret_r, secret_w = os.pipe() if secret is not None else (-1, -1)
    own_dirs = {os.path.dirname(program), os.path.dirname(os.path.realpath(program))}
    spec = {
        "host_dir": host_dir,
        "program": program,
        "argv": [program, *command[1:]],
        "env": _ENV,
        "limits": limits.for_launcher(),
        "expose": sorted({*own_dirs, *expose}),
        "hide": [*_hidden_paths(), *hide],
        "uid": uid,
        "isolation": isolation,
        "require": list(require),
        "control_fd": control_w,
        "secret_fd": secret_r,
        "pass_control": pass_control,
    }
    started = time.monotonic()
    try:
        process = _start_launcher(spec, stdin_r)
    except BaseException:
        _close_pipe_ends(control_r, control_w, stdin_r, stdin_w, secret_r, secret_w)
        _cleanup(host_dir, uid)
        raise
    _close_pipe_ends(control_w, stdin_r, secret_r)
    feed_in_background(stdin_w, _as_bytes(stdin))
    if secret_w >= 0:
        feed_in_background(secret_w, secret or b"")
    return _await_result(process, control_r, started, limits, host_dir, uid)


def _as_bytes(content: str | bytes) -> bytes:
    return content.encode() if isinstance(content, str) else content


def _make_host_dir(files: Mapping[str, str | bytes]) -> str:
    """A new temporary directory holding ``files``: the program's working directory."""
    host_dir = tempfile.mkdtemp(prefix=f"grpo-sandbox-{os.getpid()}-")
    for name, content in files.items():
        Path(host_dir, name).write_bytes(_as_bytes(content))
    return host_dir


def _start_launcher(spec: dict, stdin_r: int) -> subprocess.Popen:
    """Start ``launcher.py`` on ``spec``, handing it the pipe ends the spec names."""
    return subprocess.Popen(
        [sys.executable, "-I", "-S", str(_LAUNCHER), json.dumps(spec)],
        stdin=stdin_r,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=[fd for fd in (spec["control_fd"], spec["secret_fd"]) if fd >= 0],
        start_new_session=True,  # its own process group, killed as one
        env=_ENV,
        cwd=spec["host_dir"],
    )


def _close_pipe_ends(*fds: int) -> None:
    """Close each descriptor; -1 stands for a pipe that was never made."""
    for fd in fds:
        if fd >= 0:
            os.close(fd)


def _await_result(
    process: subprocess.Popen,
    control_r: int,
    started: float,
    limits: SandboxLimits,
    host_dir: str,
    uid: int | None,
) -> SandboxResult:
    """Collect the run's output until it ends, times out or passes the output cap; stop
    whatever is left of it, clean up, and say how it went."""
    deadline = started + limits.timeout_s
    try:
        buffers, timed_out, capped = collect_output(
            process, control_r, deadline, limits.output_bytes
        )
    except BaseException:  # e.g. KeyboardInterrupt: the program must not outlive us
        kill_run(process, None)
        _cleanup(host_dir, uid)
        raise
    finally:
        os.close(control_r)
    control = parse_control(bytes(buffers["control"]))
    returncode = process.poll()
    if returncode is None:  # the launcher outlived the program by > 0.5 s: stop it all
        kill_run(process, control.pid)
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
        UIDS.release(uid)


@functools.cache
def sandbox_isolation(isolation: Isolation = "auto") -> tuple[str, ...]:
    """The isolation layers this machine gives a sandboxed run, e.g. ``("netns", "pidns",
    "mountns", "rlimits", "uid")``; measured once, by running a trivial program."""
    result = run_python({"main.py": "pass\n"}, ["main.py"], isolation=isolation)
    if not result.ok:
        raise RuntimeError(f"the sandbox cannot run Python here: {result.stderr.decode()[-2000:]}")
    return result.isolation
