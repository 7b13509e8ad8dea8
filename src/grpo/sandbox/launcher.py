"""Sandbox launcher: isolates itself, forks, drops privileges, ``exec``s the program
(``spec["program"]`` with ``spec["argv"]``: Python for code, ``coqc`` for proofs...).

Run by :mod:`grpo.sandbox.run` as ``python -I -S launcher.py SPEC_JSON`` in a new session,
never imported. Standard library only (plus the seccomp filter, the rlimits and the mounts,
in the sibling files ``seccomp.py``, ``rlimits.py`` and ``mounts.py``, loaded by path), and
it does its set-up *here*, after the ``fork``/``exec`` done by :class:`subprocess.Popen`,
rather than in a ``preexec_fn``: the trainer is multi-threaded, and ``preexec_fn`` is not
safe in a multi-threaded parent.

The program runs in a child of this launcher, which stays outside it as a subreaper: when
the program exits or is killed, everything it started is killed and reaped here, and the
launcher exits with the program's status.

Layers, strongest first; each is best-effort and what was achieved is reported on the
control pipe (``ISOLATION a,b,c``) before the program starts:

* ``netns``: a new network namespace with no interfaces up: no network, not even loopback.
* ``mountns``: a private mount namespace: every mount re-mounted read-only, fresh size-capped
  tmpfs on /tmp, /var/tmp, /dev/shm and /run (the program's working directory is in the
  new /tmp), home directories and the trainer's working directory hidden behind empty
  tmpfs, only the program's installation (``spec["expose"]``) re-exposed read-only, and a
  /proc that shows only the sandbox's processes.
* ``pidns``: a new PID namespace: no other process can be seen or signalled, and when its
  first process dies the kernel kills every process left in it (no escape by ``setsid``).
* ``uid``: as root, switch to an unprivileged uid unique to this run, so RLIMIT_NPROC is
  enforced (root is exempt) and the program can touch nothing owned by anyone else. Done
  where the program's installation is visible to that uid: with ``mountns``, or when it
  is world-readable.
* ``userns``: when not root, an unprivileged user namespace makes the namespaces above
  possible.
* ``seccomp`` (only when there is no PID namespace): a syscall filter that refuses signals
  to other processes, ``ptrace``, leaving the process group, io_uring and sockets other
  than AF_UNIX (so: no network).
* ``rlimits``: always: CPU seconds, address space, process count, file size, open files,
  no core dumps.

If ``spec["require"]`` names a layer that could not be set up the program is never run.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import importlib.util
import json
import os
import signal
import stat
import struct
import sys
import types


def _load_sibling(name: str) -> types.ModuleType:
    """A module from this file's directory, by path: under ``python -I`` the directory is not
    on ``sys.path``, and must not be (its modules would shadow any top-level ones of the same
    name).
    Loaded at start-up, before the mount namespace can hide the directory."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


_seccomp = _load_sibling("seccomp")
_rlimits = _load_sibling("rlimits")
_mounts = _load_sibling("mounts")


CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, PR_SET_CHILD_SUBREAPER = 1, 38, 22, 36
SECCOMP_MODE_FILTER = 2

CONTROL_FD, SECRET_FD = 3, 4  # where the program finds the control and secret pipes

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


# --- namespaces ------------------------------------------------------------------------


def _unshare(flags: int) -> bool:
    unshare = getattr(_libc, "unshare", None)  # absent outside Linux
    return unshare is not None and unshare(flags) == 0


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


# --- seccomp ---------------------------------------------------------------------------


def _install_seccomp(own_pid: int) -> None:
    """Install the filter of ``seccomp.py``: refuse (EPERM) signals to anything but
    this process, ptrace, new sessions or groups, io_uring and sockets other than AF_UNIX;
    an unknown ABI on this arch is killed."""
    packed, length = _seccomp.seccomp_filter(own_pid)
    buffer = ctypes.create_string_buffer(packed)
    fprog = struct.pack("HL", length, ctypes.addressof(buffer))
    fprog_buffer = ctypes.create_string_buffer(fprog)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, fprog_buffer, 0, 0), "seccomp")


# --- main ------------------------------------------------------------------------------


def _report(control: int, text: str) -> None:
    with contextlib.suppress(OSError):  # the host has gone: nobody to tell
        os.write(control, text.encode() + b"\n")


def main() -> None:
    spec = json.loads(sys.argv[1])
    control = spec["control_fd"]
    features: list[str] = []
    try:
        features = _isolate_and_exec(spec, control, features)
    except BaseException as error:  # anything: say why and never run the program
        message = f"{type(error).__name__}: {error}".replace("\n", " ")
        _report(control, f"FAILED {message} (isolation so far: {','.join(features)})")
        os._exit(125)


def _readable_by_anyone(spec: dict) -> bool:
    """Whether any user can run the program: it and the installation's directories are
    world-readable, and every directory above them world-searchable."""
    paths = [os.path.realpath(spec["program"]), spec["program"], *spec["expose"]]
    for path in paths:
        mode = stat.S_IROTH | (
            stat.S_IXOTH if os.path.isdir(path) or os.access(path, os.X_OK) else 0
        )
        try:
            if os.stat(path).st_mode & mode != mode:
                return False
            parent = os.path.dirname(os.path.abspath(path))
            while parent != "/":
                if not os.stat(parent).st_mode & stat.S_IXOTH:
                    return False
                parent = os.path.dirname(parent)
        except OSError:
            return False
    return True


def _enter_namespaces(is_root: bool, features: list[str]) -> int:
    """Unshare as much as possible; returns the CLONE_* flags obtained."""
    real_uid, real_gid = os.getuid(), os.getgid()
    user = 0 if is_root else CLONE_NEWUSER  # root needs no user namespace
    for flags in (
        CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | user,
        CLONE_NEWNET | user,
    ):
        if _unshare(flags):
            break
    else:
        return 0
    if user:  # map ourselves to root inside, so that mounts are allowed
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"0 {real_uid} 1")
        _write("/proc/self/gid_map", f"0 {real_gid} 1")
        features.append("userns")
    features.append("netns")
    return flags


def _reap_and_relay(child: int, spec: dict) -> None:
    """The launcher's last job: reap the program and every orphan it leaves (this process
    is their subreaper), then exit with the program's status."""
    for fd in (0, 1, 2, spec["control_fd"], spec["secret_fd"]):
        if fd >= 0:
            os.close(fd)  # only the program should hold the pipes the host reads to EOF
    code = 125
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(code)
        if pid == child:
            code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
            # The program is done: what it left running goes too (with a PID namespace
            # the kernel has done this already).
            with contextlib.suppress(OSError):
                os.killpg(child, signal.SIGKILL)


def _isolate_and_exec(spec: dict, control: int, features: list[str]) -> list[str]:
    os.umask(0o022)
    host_dir = spec["host_dir"]
    files = {}
    for name in os.listdir(host_dir):  # read now: the host dir is hidden once /tmp is replaced
        with open(os.path.join(host_dir, name), "rb") as handle:
            files[name] = handle.read()
    is_root = os.geteuid() == 0
    namespaces = 0
    if spec["isolation"] == "auto":
        namespaces = _enter_namespaces(is_root, features)
    _fork_program(spec, control)
    if namespaces & CLONE_NEWPID:
        features.append("pidns")
    else:
        os.setpgid(0, 0)
    # As root, drop to the run's own uid where the program's installation is visible to it:
    # re-exposed by the mount namespace, or readable by anyone (not under /root, say).
    uid = None
    if is_root and (namespaces & CLONE_NEWNS or _readable_by_anyone(spec)):
        uid = spec["uid"]
    workdir = _prepare_workdir(spec, files, uid, namespaces, features)
    _rlimits.set_limits(spec["limits"], shared_uid=uid is None and not is_root and not namespaces)
    features.append("rlimits")
    if uid is not None:
        _become(uid)
        features.append("uid")
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # no setuid binaries (sudo, su) from here
    if spec["isolation"] == "seccomp" or (
        spec["isolation"] == "auto" and not namespaces & CLONE_NEWPID
    ):
        _install_seccomp(os.getpid())
        features.append("seccomp")
    missing = [name for name in spec["require"] if name not in features]
    if missing:
        raise OSError(f"required isolation not available: {', '.join(missing)}")
    _report(control, "ISOLATION " + ",".join(features))
    _exec_program(spec, control, workdir)
    return features  # not reached


def _fork_program(spec: dict, control: int) -> None:
    """Fork; only the child returns, to become the program.

    The program runs in a child: PID 1 of the new PID namespace if there is one, else
    the leader of a new process group. This process stays outside, reaps it and any
    orphans (none are left to the machine's init, which may never reap them), and exits
    with its status. The child's host pid goes to the host, which on timeout kills the
    namespace or the group, not this process; the child waits until that line is
    written, so the program cannot write one first. PDEATHSIG ties the child to us."""
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    ready_r, ready_w = os.pipe()
    child = os.fork()
    if child:
        os.close(ready_r)
        _report(control, f"PID {child}")
        os.close(ready_w)
        _reap_and_relay(child, spec)
    os.close(ready_w)
    os.read(ready_r, 1)
    os.close(ready_r)
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _prepare_workdir(
    spec: dict, files: dict[str, bytes], uid: int | None, namespaces: int, features: list[str]
) -> str:
    """The program's working directory, holding ``files`` and owned by ``uid`` if given: a
    new one in the private /tmp with a mount namespace, else the host directory."""
    if not namespaces & CLONE_NEWNS:
        if uid is not None:  # the host directory is the working directory
            for name in [".", *files]:
                os.chown(os.path.join(spec["host_dir"], name), uid, uid)
        return spec["host_dir"]
    workdir = _mounts.setup_mounts(spec, uid, new_proc=bool(namespaces & CLONE_NEWPID))
    features.append("mountns")
    for name, data in files.items():
        path = os.path.join(workdir, name)
        with open(path, "wb") as handle:
            handle.write(data)
        if uid is not None:
            os.chown(path, uid, uid)
    return workdir


def _become(uid: int) -> None:
    """Switch to ``uid`` (and the same gid, no supplementary groups) for good."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # cleared by the uid change


def _exec_program(spec: dict, control: int, workdir: str) -> None:
    """Replace this process with the program, in ``workdir``."""
    os.chdir(workdir)
    os.umask(0o077)
    # The control and secret pipes at fixed numbers for the program, when it is to have
    # them; moved high first so that the two dup2 calls cannot clobber each other.
    keep = [0, 1, 2]
    if spec["pass_control"]:
        moves = [(fcntl.fcntl(control, fcntl.F_DUPFD, 10), CONTROL_FD)]
        if spec["secret_fd"] >= 0:
            moves.append((fcntl.fcntl(spec["secret_fd"], fcntl.F_DUPFD, 10), SECRET_FD))
        for high, target in moves:
            os.dup2(high, target)  # dup2 makes the new descriptor inheritable
            keep.append(target)
    os.closerange(max(keep) + 1, 1 << 16)  # close_range(2): cheap whatever the bound
    os.execve(spec["program"], spec["argv"], spec["env"])


if __name__ == "__main__":
    main()
