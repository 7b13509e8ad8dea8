"""The host's side of a running sandbox launcher: feeding its stdin, reading its output
under a deadline and a cap, reading its control lines, and killing it.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from dataclasses import dataclass


def feed_in_background(fd: int, data: bytes) -> None:
    """Write ``data`` to the pipe ``fd`` from a daemon thread, then close it."""
    threading.Thread(target=_feed_and_close, args=(fd, data), daemon=True).start()


def _feed_and_close(fd: int, data: bytes) -> None:
    """Write everything to a pipe, then close it; a reader that goes away ends it early."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass  # the program closed its end or died: nothing more to give it
    finally:
        os.close(fd)


def kill_run(process: subprocess.Popen, program_pid: int | None) -> None:
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


@dataclass
class LauncherControl:
    """What the launcher said on the control pipe, and what the program wrote there after."""

    pid: int | None = None  # host pid of the PID namespace's first process
    isolation: tuple[str, ...] = ()
    failure: str | None = None  # why the launcher gave up before starting the program
    program: bytes = b""  # what the program itself wrote


def parse_control(raw: bytes) -> LauncherControl:
    """Split the launcher's lines (``PID n``, ``ISOLATION a,b``, ``FAILED why``) from the
    program's output. Only lines before ``ISOLATION`` come from the launcher: the program
    starts after it, so it cannot forge them."""
    parsed = LauncherControl()
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


def collect_output(
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
        kill_run(process, parse_control(bytes(buffers["control"])).pid)
    process.stdout.close()
    process.stderr.close()
    return buffers, timed_out, capped
