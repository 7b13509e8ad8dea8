"""The sandbox launcher's seccomp filter, compiled to classic BPF.

Loaded by ``launcher.py`` from its own directory, not imported through the package:
the launcher runs under ``python -I -S``, which puts neither this directory nor the
package on ``sys.path``. Standard library only, and no imports from :mod:`grpo`.
"""

from __future__ import annotations

import platform
import struct

# (audit arch, syscall numbers) for the two architectures the filter knows.
_SYSCALLS = {
    "x86_64": (
        0xC000003E,
        {
            "kill": 62,
            "tkill": 200,
            "tgkill": 234,
            "socket": 41,
            "ptrace": 101,
            "setsid": 112,
            "setpgid": 109,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "rt_sigqueueinfo": 129,
            "rt_tgsigqueueinfo": 297,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "kill": 129,
            "tkill": 130,
            "tgkill": 131,
            "socket": 198,
            "ptrace": 117,
            "setsid": 157,
            "setpgid": 154,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "rt_sigqueueinfo": 138,
            "rt_tgsigqueueinfo": 240,
        },
    ),
}
_COMMON = {"pidfd_send_signal": 424, "io_uring_setup": 425, "pidfd_getfd": 438}
# Refused outright. kill and tgkill are allowed on the process itself only, socket for
# AF_UNIX only. setsid/setpgid: without them nothing leaves the process group we kill.
_DENIED = (
    "tkill",
    "ptrace",
    "setsid",
    "setpgid",
    "process_vm_readv",
    "process_vm_writev",
    "rt_sigqueueinfo",
    "rt_tgsigqueueinfo",
    "pidfd_send_signal",
    "io_uring_setup",
    "pidfd_getfd",
)

# An instruction before assembly: (code, jump-if-true label, jump-if-false label, k).
_Instruction = tuple[int, str | None, str | None, int]


def seccomp_filter(own_pid: int) -> tuple[bytes, int]:
    """The packed filter and its length in instructions: refuse (EPERM) signals to anything
    but this process, ptrace, new sessions or groups, io_uring and sockets other than
    AF_UNIX; an unknown ABI on this arch is killed."""
    machine = platform.machine()
    if machine not in _SYSCALLS:
        raise OSError(f"no seccomp filter for {machine}")
    arch, numbers = _SYSCALLS[machine]
    numbers = {**numbers, **_COMMON}
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, deny, kill = 0x7FFF0000, 0x00050000 | 1, 0x80000000  # ERRNO(EPERM), KILL_PROCESS
    # Labels are resolved by _assemble.
    program: list[_Instruction] = [
        (ld, None, None, 4),
        (jeq, None, "kill", arch),
        (ld, None, None, 0),
    ]
    if machine == "x86_64":
        program.append((jge, "kill", None, 0x40000000))  # the x32 ABI: other numbers
    program += [
        (jeq, "own_pid_arg", None, numbers["kill"]),
        (jeq, "own_pid_arg", None, numbers["tgkill"]),
        (jeq, "unix_only", None, numbers["socket"]),
    ]
    for name in _DENIED:
        program.append((jeq, "deny", None, numbers[name]))
    labels = {}
    program.append((ret, None, None, allow))
    labels["own_pid_arg"] = len(program)
    program += [(ld, None, None, 16), (jeq, "allow", None, own_pid), (jeq, "allow", "deny", 0)]
    labels["unix_only"] = len(program)
    program += [(ld, None, None, 16), (jeq, "allow", "deny", 1)]  # AF_UNIX
    labels["allow"] = len(program)
    program.append((ret, None, None, allow))
    labels["deny"] = len(program)
    program.append((ret, None, None, deny))
    labels["kill"] = len(program)
    program.append((ret, None, None, kill))
    return _assemble(program, labels), len(program)


def _assemble(program: list[_Instruction], labels: dict[str, int]) -> bytes:
    """Pack the instructions as ``struct sock_filter``, labels turned into relative jumps."""
    packed = b""
    for index, (code, true, false, k) in enumerate(program):
        jt = labels[true] - index - 1 if true else 0
        jf = labels[false] - index - 1 if false else 0
        packed += struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)
    return packed
