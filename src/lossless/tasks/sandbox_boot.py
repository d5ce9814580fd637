"""The first code the sandbox's child runs (``python -I -c <this file's text> PROGRAM LIMITS_JSON``).

It lowers the resource limits, installs an audit hook that refuses network, new processes, writes
outside the throw-away directory and reads of other processes' ``/proc`` entries, then runs PROGRAM
as ``__main__``. Standard library only: the child must not depend on lossless being importable.

The limits are set here rather than in a ``preexec_fn``: the parent may be threaded (the runner, a
thread pool of checks), where ``preexec_fn`` can deadlock the forked child; nothing in the program
has run yet at this point, so the effect is the same.
"""

from __future__ import annotations

import json
import os
import resource
import runpy
import socket
import sys
from typing import Any

# The program ran out of its memory limit: the parent reports "crashed" on both (either alone could be
# the program's own exit status or text).
EXIT_MEMORY = 86
MEMORY_NOTE = "MemoryError: the sandbox's memory limit was reached"

_SPAWN = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty"}
_NET = {"socket.connect", "socket.bind", "socket.sendto", "socket.getaddrinfo", "socket.gethostbyname"}
_NET |= {"socket.gethostbyaddr", "socket.getnameinfo"}
# event -> (index of a path argument, index of its dir_fd argument or -1), for calls that change files
_CHANGES: dict[str, tuple[tuple[int, int], ...]] = {
    "os.remove": ((0, 1),),
    "os.rmdir": ((0, 1),),
    "os.mkdir": ((0, 2),),
    "os.rename": ((0, 2), (1, 3)),
    "os.link": ((0, 2), (1, 3)),
    "os.symlink": ((1, 2),),
    "os.chmod": ((0, 2),),
    "os.chown": ((0, 3),),
    "os.utime": ((0, 3),),
    "os.truncate": ((0, -1),),
    "os.setxattr": ((0, -1),),
    "os.removexattr": ((0, -1),),
    "shutil.rmtree": ((0, 1),),
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def set_limits(limits: dict[str, int]) -> None:
    mb = 1024 * 1024
    pairs = {
        resource.RLIMIT_AS: limits["memory_mb"] * mb,
        resource.RLIMIT_FSIZE: limits["file_mb"] * mb,
        resource.RLIMIT_NOFILE: limits["open_files"],
        resource.RLIMIT_CORE: 0,
    }
    for which, value in pairs.items():
        _, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)  # never ask above the ceiling
        resource.setrlimit(which, (value, value))
    # SIGXCPU at the soft limit ends the process (Python leaves its default action); the hard limit a
    # second later is SIGKILL, should the program have caught SIGXCPU.
    cpu = limits["cpu_seconds"]
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))


def _resolved(path: Any, dir_fd: Any) -> str | None:
    """The real path a call acts on: an open descriptor, or a path relative to dir_fd or the cwd."""
    try:
        if isinstance(path, int):
            return os.path.realpath(os.readlink(f"/proc/self/fd/{path}"))
        path = os.fsdecode(os.fspath(path))
        if os.path.isabs(path):
            base = "/"
        elif isinstance(dir_fd, int) and dir_fd >= 0:
            base = os.readlink(f"/proc/self/fd/{dir_fd}")
        else:
            base = os.getcwd()
        return os.path.realpath(os.path.join(base, path))
    except OSError:
        return None


def make_hook(root: str) -> Any:
    own_pid = str(os.getpid())

    def inside(path: Any, dir_fd: Any = -1) -> bool:
        where = _resolved(path, dir_fd)
        return where is not None and (where == root or where.startswith(root + os.sep))

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event in _SPAWN:
            raise PermissionError(f"sandbox: starting processes is refused ({event})")
        if event in _NET or (event == "socket.__new__" and args[1] != socket.AF_UNIX):
            raise PermissionError(f"sandbox: network access is refused ({event})")
        if event == "open" and isinstance(args[0], str | bytes | os.PathLike):
            where = _resolved(args[0], -1) or ""
            parts = where.split("/")  # the parent's /proc/PID/environ would hand over its secrets
            if len(parts) > 2 and parts[1] == "proc" and parts[2].isdigit() and parts[2] != own_pid:
                raise PermissionError("sandbox: other processes' /proc entries are refused")
            outside = not inside(args[0])
            if outside and isinstance(args[2], int) and args[2] & _WRITE_FLAGS:
                raise PermissionError(f"sandbox: writing outside its directory is refused ({where})")
            # a directory outside opened as a descriptor would let *at() calls escape the checks below
            if outside and os.path.isdir(where):
                raise PermissionError(f"sandbox: opening a directory outside its own is refused ({where})")
        for path_at, fd_at in _CHANGES.get(event, ()):
            dir_fd = args[fd_at] if 0 <= fd_at < len(args) else -1
            if not inside(args[path_at], dir_fd):
                raise PermissionError(f"sandbox: changing files outside its directory is refused ({event})")

    return hook


def main() -> None:
    program, limits = sys.argv[1], json.loads(sys.argv[2])
    set_limits(limits)
    sys.dont_write_bytecode = True
    sys.addaudithook(make_hook(os.path.realpath(limits["root"])))
    sys.argv = [program]
    try:
        runpy.run_path(program, run_name="__main__")
    except MemoryError:
        os.write(2, f"\n{MEMORY_NOTE}\n".encode())
        os._exit(EXIT_MEMORY)


if __name__ == "__main__":
    main()
