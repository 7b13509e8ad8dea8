"""The launcher's private mount namespace (the ``mountns`` layer): every mount re-mounted
read-only, fresh size-capped tmpfs on /tmp, /var/tmp, /dev/shm and /run, home directories
and the trainer's working directory hidden behind empty tmpfs, the program's installation
re-exposed read-only, and a /proc that shows only the sandbox's processes.

Loaded by ``launcher.py`` from its own directory, not imported through the package: the
launcher runs under ``python -I -S``, which puts neither this directory nor the package on
``sys.path``. Standard library only, and no imports from :mod:`grpo`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND = 32, 1024, 2048, 4096
MS_REC, MS_PRIVATE, MS_RELATIME, MS_STRICTATIME = 16384, 1 << 18, 1 << 21, 1 << 24
_MOUNT_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    encode = lambda s: s.encode() if s is not None else None  # noqa: E731
    result = _libc.mount(
        encode(source), encode(target), encode(fstype), flags, encode(data) if data else None
    )
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {target}: {os.strerror(errno)}")


def _mountinfo() -> list[tuple[str, int]]:
    """(mount point, flags to keep) of every mount, in mount order."""
    mounts = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            fields = line.split()
            point = fields[4].encode().decode("unicode_escape")  # "\040" for a space, etc.
            flags = 0
            for option in fields[5].split(","):
                flags |= _MOUNT_FLAGS.get(option, 0)
            mounts.append((point, flags))
    return mounts


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def setup_mounts(spec: dict, uid: int | None, new_proc: bool) -> str:
    """Read-only view of the host, private writable tmpfs dirs; returns the working dir."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # first: nothing below may reach the host
    # Handles on the paths to re-expose, taken before anything hides them; a bind mount
    # from /proc/self/fd/N still works once the original path is covered.
    exposed = []
    for path in spec["expose"]:
        with contextlib.suppress(OSError):
            exposed.append((path, os.open(path, os.O_PATH | os.O_DIRECTORY)))
    for point, flags in _mountinfo():
        # A bind remount changes only this mount's flags, not the filesystem's; one can
        # fail (a mount point shadowed by a later mount) without weakening the rest.
        with contextlib.suppress(OSError):
            _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
    limits = spec["limits"]
    writable = [d for d in ("/tmp", "/var/tmp", "/dev/shm", "/run") if os.path.isdir(d)]
    for directory in writable:
        size = limits["disk_bytes"] if directory == "/tmp" else 1 << 20
        _mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=1777")
    hidden = [d for d in spec["hide"] if os.path.isdir(d) and d not in writable]
    # One inside another is hidden with it (and could not be mounted on once it is).
    hidden = [d for d in hidden if not any(d != h and _inside(d, h) for h in hidden)]
    for directory in hidden:
        _mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for path, fd in exposed:
        if any(_inside(path, d) for d in hidden + writable):
            os.makedirs(path, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
            _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
        os.close(fd)
    for directory in hidden:  # the empty stand-ins, now holding only mount points
        _mount(None, directory, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=1m")
    if new_proc:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    workdir = "/tmp/sandbox"
    os.mkdir(workdir, 0o700)
    if uid is not None:
        os.chown(workdir, uid, uid)
    return workdir
