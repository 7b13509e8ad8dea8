"""One process per run directory: ``RUN_DIR/grpo.lock``, held for the whole run.

A run directory is the run's state (checkpoints, logs, the final model): a second process
training into it would interleave its writes with the first's and corrupt both, silently.
The lock is an OS lock (``fcntl.flock``), which the kernel releases when the holding
process ends, however it ends (SIGKILL included), so a dead run never blocks its resume.
The file also records the holder (pid, host, start time, command) for the message that
refuses a second process.

Shared filesystems: NFS carries these locks between machines (the Linux client maps them
to byte-range locks), so a run on another machine is refused too; a machine that crashed
holding one loses it when the server's lease ends (about 90 s with NFSv4). On a filesystem
with no locks at all (``flock`` fails with ENOLCK or EOPNOTSUPP) the record alone decides:
a holder on this machine whose process is gone is replaced; a holder on another machine
cannot be checked from here, so it is refused with the command that clears it.

Under torchrun rank 0 holds the lock for the job (:func:`lock_run_dir`). Processes forked
by the trainer (tool workers) close their inherited copy at once: one that outlived a
killed trainer would otherwise keep the lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from grpo.runtime.distributed import Dist

LOCK_FILE = "grpo.lock"
NO_OS_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS}  # the filesystem has no flock

_held: set[int] = set()  # descriptors holding a lock in this process


def _close_inherited() -> None:
    for descriptor in _held:
        with contextlib.suppress(OSError):
            os.close(descriptor)
    _held.clear()


os.register_at_fork(after_in_child=_close_inherited)


class RunDirInUse(RuntimeError):
    """Another process holds the run directory; the message names it and since when."""


@dataclass(frozen=True)
class Holder:
    """Who holds (or last held) a run directory's lock."""

    pid: int
    host: str
    started: float  # time.time() when it took the lock
    command: str

    @classmethod
    def me(cls) -> Holder:
        program = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("python")
        name = f"python -m {program.parent.name}" if program.name == "__main__.py" else program.name
        command = " ".join([name, *sys.argv[1:]])
        return cls(os.getpid(), socket.gethostname(), time.time(), command)

    def running(self) -> bool:
        """Whether this holder's process still runs (asked on its own host only): its pid
        exists and that process started before it took the lock (not a reused pid)."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's process: it exists
            return True
        started = _process_start(self.pid)
        return started is None or started <= self.started + 1.0

    def describe(self) -> str:
        moment = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        seconds = max(0.0, time.time() - self.started)
        ago = f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
        return f"process {self.pid} on {self.host}, since {moment} ({ago} ago): {self.command}"


def _process_start(pid: int) -> float | None:
    """The Unix time a process started (Linux's /proc); None where that cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def read_holder(path: Path) -> Holder | None:
    """The record in a lock file (None when missing, empty or unreadable)."""
    try:
        return Holder(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


@dataclass
class RunLock:
    """A held run-directory lock; :meth:`release` gives it up (also at process exit)."""

    path: Path
    descriptor: int | None  # the flock'ed file; None where the filesystem has no locks

    def release(self) -> None:
        if self.descriptor is not None:
            _held.discard(self.descriptor)
            os.close(self.descriptor)  # closing the last descriptor releases the flock
            self.descriptor = None
            return
        holder = read_holder(self.path)
        if holder is not None and (holder.pid, holder.host) == (os.getpid(), socket.gethostname()):
            self.path.unlink(missing_ok=True)


def _refusal(run_dir: Path, path: Path, holder: Holder | None, unchecked: bool = False) -> str:
    who = holder.describe() if holder is not None else "a process that has not yet said who"
    text = (
        f"train.run_dir {run_dir} is in use by another run: {who}. Two processes "
        "training into one run directory corrupt its checkpoints and logs: stop that run "
        "first, or choose another train.run_dir"
    )
    if unchecked:
        text += (
            f". This filesystem has no locks, so whether it still runs cannot be checked "
            f"from here: if it has stopped, delete {path}"
        )
    return text


def acquire_run_lock(run_dir: Path) -> RunLock:
    """Lock ``run_dir`` (created if missing) for this process, or raise
    :class:`RunDirInUse` at once, naming the holder."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_FILE
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        os.close(descriptor)
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise RunDirInUse(_refusal(run_dir, path, read_holder(path))) from None
        if error.errno not in NO_OS_LOCKS:
            raise
        return _acquire_by_record(run_dir, path)
    record = json.dumps(asdict(Holder.me())).encode()
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, record, 0)
    os.fsync(descriptor)
    _held.add(descriptor)
    return RunLock(path, descriptor)


def _acquire_by_record(run_dir: Path, path: Path) -> RunLock:
    """Without OS locks: the file exists while a run holds the directory. A record of a
    process of this host that is gone (or an unreadable one) is stale and replaced."""
    for _ in range(2):
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            holder = read_holder(path)
            if holder is not None and holder.host != socket.gethostname():
                raise RunDirInUse(_refusal(run_dir, path, holder, unchecked=True)) from None
            if holder is not None and holder.running():
                raise RunDirInUse(_refusal(run_dir, path, holder)) from None
            path.unlink(missing_ok=True)  # its process is gone
            continue
        with os.fdopen(descriptor, "w") as handle:
            handle.write(json.dumps(asdict(Holder.me())))
        return RunLock(path, None)
    raise RunDirInUse(_refusal(run_dir, path, read_holder(path)))


def lock_run_dir(run_dir: Path, dist: Dist) -> RunLock | None:
    """The job's lock on ``run_dir``: rank 0 takes it and tells every process the outcome,
    so under torchrun all of them stop with the same error when it is refused (the other
    ranks hold nothing: None)."""
    lock, failure = None, None
    if dist.is_main:
        try:
            lock = acquire_run_lock(run_dir)
        except (RunDirInUse, OSError) as error:
            failure = error
    failure = dist.broadcast_object(failure)
    if failure is not None:
        raise failure
    return lock
