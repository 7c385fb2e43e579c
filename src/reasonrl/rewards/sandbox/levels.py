"""Isolation levels of the sandbox: what each one does, what it needs, and how it is launched.

Levels, strongest first (:data:`LEVELS`):

``namespaces``  (needs root and util-linux ``unshare``)
    New mount, network, PID, IPC and UTS namespaces; a fresh ``/proc``; every inherited mount
    read-only and nosuid; private size-capped tmpfs over /tmp, /var/tmp and /dev/shm (the work dir
    lives there and vanishes with the namespace); the caller's home and /run (where daemons keep
    their sockets) hidden behind empty tmpfs; the program runs as a
    dedicated unprivileged uid with no capabilities and ``no_new_privs``. When the program ends the
    namespace's init (the runner) exits and the kernel kills every process left in it.
``userns``  (not root; needs unprivileged user namespaces)
    The same namespaces inside a new user namespace. The program is uid 0 of that namespace (the
    caller's uid outside) with every capability removed. Weaker than ``namespaces``: it can read
    whatever the caller can read outside the hidden home directory.
``uid``  (root without namespaces)
    rlimits + a dedicated unprivileged uid + ``no_new_privs``; the runner is a child subreaper and
    kills every descendant at the end. NO network isolation; the program sees all processes and
    can write to world-writable directories (/tmp, /var/tmp, /dev/shm).
``rlimits``  (always available; the weakest)
    rlimits + a minimal environment + a temp work dir + subreaper clean-up, under the caller's own
    uid: the program can read and write whatever the caller can, use the network and kill the
    caller's processes. As root, RLIMIT_NPROC is not even enforced by the kernel.

The inferred choices (the spec only names "subprocess + rlimits, optional unshare/bwrap") are
documented options: the uid range (:data:`UID_BASE`, one uid per concurrent call so calls do not
share an RLIMIT_NPROC budget and cannot signal each other), and which directories are hidden.
bubblewrap is not used: ``unshare`` + the runner give the same namespaces without a dependency.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import threading
from dataclasses import dataclass, field

from .limits import SandboxError

LEVELS = ("namespaces", "userns", "uid", "rlimits")
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm")
HIDDEN_DIRS = ("/run",)
UID_BASE = 1_900_000_000  # far above real accounts and container sub-uid ranges
UID_SLOTS = 64  # concurrent calls per process with distinct uids
UID_WAIT = 600.0  # seconds a call waits for a free uid before it fails
NS_FLAGS = ("--mount", "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child", "--mount-proc")

_COMMON = (
    "separate-process",
    "rlimits:cpu,as,nproc,nofile,fsize,core",
    "wall-timeout",
    "minimal-env",
    "temp-workdir",
    "output-caps",
    "no-new-privs",
)
_NAMESPACES = (
    "net-ns",
    "pid-ns",
    "mount-ns",
    "ipc-ns",
    "uts-ns",
    "private-proc",
    "private-tmp:/tmp,/var/tmp,/dev/shm",
    "read-only-fs",
    "hidden:home,/run",
    "kill-all-on-exit",
)
FEATURES = {
    "namespaces": _COMMON + _NAMESPACES + ("uid-drop", "no-capabilities"),
    "userns": _COMMON + _NAMESPACES + ("user-ns", "no-capabilities"),
    "uid": _COMMON + ("uid-drop", "no-capabilities", "subreaper-cleanup"),
    "rlimits": _COMMON + ("subreaper-cleanup",),
}
MISSING = {
    "namespaces": (),
    "userns": ("uid-drop: runs as the caller's uid (mapped to 0, no capabilities)",),
    "uid": ("no network isolation", "no pid isolation", "world-writable dirs are writable"),
    "rlimits": (
        "no network isolation",
        "no pid isolation",
        "runs as the caller's uid",
        "caller's files readable and writable",
    ),
}


class SandboxUnavailable(RuntimeError):
    """The requested isolation level cannot be used on this machine (the message says why)."""


@dataclass(frozen=True)
class Isolation:
    """The isolation level in use, its features, and why each stronger level is unavailable."""

    level: str
    features: tuple[str, ...]
    missing: tuple[str, ...]
    unavailable: dict[str, str] = field(default_factory=dict)

    @property
    def strongest(self) -> bool:
        return self.level == "namespaces"

    def __str__(self) -> str:
        text = f"sandbox isolation: {self.level} ({', '.join(self.features)})"
        if self.missing:
            text += f"; NOT provided: {'; '.join(self.missing)}"
        for level, why in self.unavailable.items():
            text += f"\n  {level} unavailable: {why}"
        return text


def check_level(name: str, option: str = "level") -> str:
    if name not in LEVELS:
        raise ValueError(f"unknown sandbox {option} {name!r}; valid: {', '.join(LEVELS)}")
    return name


def stronger_or_equal(level: str, required: str) -> bool:
    return LEVELS.index(level) <= LEVELS.index(required)


def candidates() -> tuple[str, ...]:
    """Levels worth trying as this user, strongest first."""
    return ("namespaces", "uid", "rlimits") if os.geteuid() == 0 else ("userns", "rlimits")


def unshare_path() -> str | None:
    return shutil.which("unshare", path=SAFE_PATH)


def python_paths() -> list[str]:
    """Directories the program's interpreter needs: the install (stdlib) and the venv, if any."""
    exe = os.path.abspath(sys.executable)
    paths = {
        os.path.realpath(sys.base_prefix),
        os.path.realpath(sys.prefix),
        os.path.dirname(os.path.realpath(exe)),
        os.path.dirname(exe),
    }
    return sorted(p for p in paths if os.path.isdir(p))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _closed_ancestor(path: str) -> str | None:
    """The top-most ancestor of ``path`` that other users cannot traverse (no o+x), if any."""
    parts = path.strip("/").split("/")
    for i in range(1, len(parts) + 1):
        candidate = "/" + "/".join(parts[:i])
        if not os.stat(candidate).st_mode & stat.S_IXOTH:
            return candidate
    return None


def filesystem_plan(level: str) -> tuple[list[str], list[str]]:
    """(masks, binds) for a namespace level: tmpfs over the caller's home and over ancestors of the
    Python install the sandbox uid could not traverse, then the install bound back in."""
    needed = python_paths()
    masks = set()
    home = os.path.realpath(os.path.expanduser("~"))
    if home != "/" and os.path.isdir(home) and not any(_under(home, p) for p in PRIVATE_TMP):
        masks.add(home)
    for extra in HIDDEN_DIRS:  # filesystem sockets (e.g. a container daemon's) live there
        if os.path.isdir(extra) and not os.path.islink(extra):
            masks.add(extra)
    if level == "namespaces":
        masks.update(a for a in map(_closed_ancestor, needed) if a is not None)
    masks = {m for m in masks if not any(m != o and _under(m, o) for o in masks)}
    hidden = masks | set(PRIVATE_TMP)
    binds = [p for p in needed if any(_under(p, h) for h in hidden)]
    binds = [b for b in binds if not any(b != o and _under(b, o) for o in binds)]
    return sorted(masks), binds


def precheck(level: str) -> str | None:
    """Why ``level`` cannot work here (None when it is worth probing)."""
    root = os.geteuid() == 0
    if level in ("namespaces", "userns") and unshare_path() is None:
        return f"util-linux 'unshare' not found on {SAFE_PATH}"
    if level == "namespaces" and not root:
        return "needs root (the program is then dropped to an unprivileged uid)"
    if level == "userns":
        if root:
            return "running as root: the 'namespaces' level drops to a real unprivileged uid instead"
        try:
            with open("/proc/sys/user/max_user_namespaces") as f:
                if int(f.read()) == 0:
                    return "user namespaces disabled (/proc/sys/user/max_user_namespaces is 0)"
        except FileNotFoundError:
            return "kernel without user namespaces"
    if level == "uid":
        if not root:
            return "needs root to switch to the sandbox uid"
        for path in python_paths():
            closed = _closed_ancestor(path)
            if closed is not None:
                return (
                    f"the Python install {path} is not reachable by other users ({closed} is "
                    f"mode {stat.S_IMODE(os.stat(closed).st_mode):o}) and without a mount "
                    "namespace it cannot be re-bound for the sandbox uid"
                )
    return None


def wrapper(level: str) -> list[str]:
    """The command prefix that creates the namespaces (empty for the weak levels)."""
    if level == "namespaces":
        return [str(unshare_path()), *NS_FLAGS]
    if level == "userns":
        return [str(unshare_path()), "--user", "--map-root-user", *NS_FLAGS]
    return []


def count_tasks(uid: int) -> int:
    """Tasks (threads included) of ``uid``: RLIMIT_NPROC counts them all, not just ours."""
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue  # exited meanwhile
        if int(fields["Uid"].split()[0]) == uid:
            total += int(fields["Threads"])
    return total


class UidSlots:
    """Hands out distinct sandbox uids to concurrent calls of this process (one per call; a session
    holds its uid to its end). ``wait``: seconds :meth:`acquire` waits for a free one before it raises
    (issue 41: it used to wait forever); the default outlasts a session's default lifetime (300 s)."""

    def __init__(self, base: int = UID_BASE, slots: int = UID_SLOTS, wait: float = UID_WAIT):
        self.base, self.slots, self.wait = base, slots, wait
        self._free = list(range(slots - 1, -1, -1))
        self._cond = threading.Condition()

    def acquire(self) -> int:
        with self._cond:
            if not self._cond.wait_for(lambda: self._free, timeout=self.wait):
                raise SandboxError(
                    f"no free sandbox uid in {self.wait:g} s: all {self.slots} of this process are "
                    "held (each running program or open session holds one; close finished sessions, "
                    "or run fewer at once)"
                )
            slot = self._free.pop()
        # Offset by pid so that two trainer processes on one machine rarely share a uid.
        return self.base + (os.getpid() % 20_000) * self.slots + slot

    def release(self, uid: int) -> None:
        with self._cond:
            self._free.append((uid - self.base) % self.slots)
            self._cond.notify()
