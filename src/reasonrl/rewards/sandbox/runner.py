"""Bootstrap that runs ONE untrusted Python program inside the reasonrl sandbox.

Started by :mod:`reasonrl.rewards.sandbox.core` as ``python -I -S -B runner.py key=value ...``,
possibly under ``unshare`` (new mount/net/pid/ipc/uts namespaces). It imports only the standard
library (never reasonrl): it must start fast and must not depend on anything writable.

Steps, in order (why this order: limits and the privilege drop must happen BEFORE the first line of
untrusted code, and mounts need the privileges that the drop removes):

1. read the program source from the host temp dir (before /tmp is hidden);
2. namespace levels only: remount every inherited mount read-only + nosuid, mount private tmpfs
   over /tmp, /var/tmp, /dev/shm and over the "mask" dirs (the caller's home, non-traversable
   ancestors of the Python install), bind the Python install back in, create the work dir;
3. weak levels only: become a child subreaper, so detached descendants re-parent to us and can be
   killed when the program ends;
4. fork; the child sets rlimits, drops privileges (setgroups/setgid/setuid to the sandbox uid,
   empty capability bounding set, no_new_privs), closes the status pipe (so the program cannot
   forge the report) and runs the code in a fresh ``__main__`` of this very interpreter (no second
   interpreter start-up, and an exit without interpreter teardown: see ``finish``);
5. the parent waits with a wall-clock deadline (pidfd), SIGKILLs the program on timeout or on
   SIGTERM (``SandboxSession.close``), kills every remaining descendant (in a PID namespace: by
   exiting, since the kernel kills all processes of a namespace whose init dies), and writes a
   ``key<TAB>value`` report on the pipe.
"""

import _signal  # the C module: ``signal`` itself costs start-up time on every call
import builtins
import ctypes
import gc
import os
import resource
import select
import sys
import time

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC = 32, 4096, 16384
# Per-mount flags a remount must keep (in a user namespace they are locked and dropping one is EPERM).
KEEP_FLAGS = dict(
    nodev=MS_NODEV, noexec=MS_NOEXEC, noatime=1024, nodiratime=2048, relatime=1 << 21, strictatime=1 << 24
)
PR_CAPBSET_DROP, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 24, 36, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SIGKILL, SIGTERM = 9, 15
REAPED = []  # the program's pid once reaped (a pid must not be signalled after that)
NS_LEVELS = ("namespaces", "userns")
UID_LEVELS = ("namespaces", "uid")
PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm")
MASK_OPTIONS = "size=1m,nr_inodes=1024,mode=755"

_LIBC = []


class SetupError(Exception):
    """The sandbox could not be set up; reported to the caller, never swallowed."""


def libc():
    if not _LIBC:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
        lib.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
        _LIBC.append(lib)
    return _LIBC[0]


def check(rc, what):
    if rc != 0:
        err = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(err)} (errno {err})")


def mount(source, target, fstype, flags, data=None):
    enc = [None if s is None else s.encode() for s in (source, target, fstype, data)]
    check(libc().mount(enc[0], enc[1], enc[2], flags, enc[3]), f"mount {target!r}")


def prctl(option, arg2=0, arg3=0):
    check(libc().prctl(option, arg2, arg3, 0, 0), f"prctl({option}, {arg2})")


def parse_config(argv):
    cfg = {"mask": [], "bind": []}
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep:
            raise SetupError(f"runner argument {arg!r} is not key=value")
        if key in ("mask", "bind"):
            cfg[key].append(value)
        else:
            cfg[key] = value
    for key in "level prog workdir status_fd timeout cpu as_bytes nproc nofile fsize disk_mb site".split():
        if key not in cfg:
            raise SetupError(f"runner argument {key}= is missing")
    return cfg


def unescape(path):
    # mountinfo escapes space, tab, newline and backslash as octal (proc(5)).
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        path = path.replace(code, char)
    return path


def remount_readonly():
    """Every inherited mount becomes read-only and nosuid in OUR mount namespace only."""
    mounts = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            mounts[unescape(fields[4])] = fields[5].split(",")
    for path, options in mounts.items():
        if path == "/proc" or path.startswith("/proc/"):
            continue  # the fresh /proc of our PID namespace (and the hidden old one below it)
        flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID
        for opt in options:
            flags |= KEEP_FLAGS.get(opt, 0)
        mount(None, path, None, flags)


def setup_filesystem(cfg, source):
    """Namespace levels: private writable dirs, read-only everything else; returns the work dir."""
    binds = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in cfg["bind"]]
    remount_readonly()
    disk = int(cfg["disk_mb"])
    tmp_options = f"size={disk}m,nr_inodes={max(256, disk * 64)},mode=1777"
    for path in PRIVATE_TMP:
        if os.path.isdir(path):
            mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, tmp_options)
    for path in cfg["mask"]:
        os.makedirs(path, mode=0o755, exist_ok=True)  # only needed when under a private tmpfs
        mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, MASK_OPTIONS)
    for path, fd in binds:
        os.makedirs(path, mode=0o755, exist_ok=True)
        # The source is hidden by now; /proc/self/fd/N still names it. The new bind mount copies the
        # read-only + nosuid flags of the (already remounted) mount it comes from.
        mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        os.close(fd)
    for path in cfg["mask"]:
        mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    workdir = cfg["workdir"]
    os.mkdir(workdir, 0o700)
    if cfg["level"] in UID_LEVELS:
        os.chown(workdir, int(cfg["uid"]), int(cfg["uid"]))
    prog = os.path.join(workdir, os.path.basename(cfg["prog"]))
    with open(prog, "wb") as f:
        f.write(source)
    return workdir, prog


def set_limits(cfg):
    def limit(res, soft, hard=None):
        hard = soft if hard is None else hard
        _, cur_hard = resource.getrlimit(res)
        if cur_hard != resource.RLIM_INFINITY:  # without privileges a hard limit can only go down
            soft, hard = min(soft, cur_hard), min(hard, cur_hard)
        resource.setrlimit(res, (soft, hard))

    cpu = int(cfg["cpu"])
    limit(resource.RLIMIT_CPU, cpu, cpu + 1)  # soft: SIGXCPU, hard one second later: SIGKILL
    limit(resource.RLIMIT_AS, int(cfg["as_bytes"]))
    limit(resource.RLIMIT_NPROC, int(cfg["nproc"]))
    limit(resource.RLIMIT_NOFILE, int(cfg["nofile"]))
    limit(resource.RLIMIT_FSIZE, int(cfg["fsize"]))
    limit(resource.RLIMIT_CORE, 0)


def drop_capabilities():
    """Empty bounding + ambient sets: nothing exec'ed later can regain a capability."""
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        prctl(PR_CAPBSET_DROP, cap)
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)


def clear_capability_sets():
    """User-namespace level: the program stays uid 0 of its namespace but holds no capability."""

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    data = (Data * 2)()
    check(libc().capset(ctypes.byref(Header(LINUX_CAPABILITY_VERSION_3, 0)), data), "capset")


def drop_privileges(cfg):
    level = cfg["level"]
    if level in UID_LEVELS or level == "userns":
        drop_capabilities()
    if level in UID_LEVELS:
        uid = int(cfg["uid"])
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)  # as root: real, effective and saved ids; all capabilities are cleared
        if os.getresuid() != (uid, uid, uid) or os.getresgid() != (uid, uid, uid) or os.getgroups():
            raise SetupError(f"privilege drop to uid {uid} did not take")
    if level == "userns":
        clear_capability_sets()
    prctl(PR_SET_NO_NEW_PRIVS, 1)  # setuid binaries and file capabilities become inert


def write_status(fd, report):
    text = "".join(f"{k}\t{str(v).replace(chr(10), ' | ')}\n" for k, v in report.items())
    os.write(fd, text.encode("utf-8", "replace"))


def exit_code(exc):
    """The exit status the interpreter gives an uncaught ``SystemExit``."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code if -(2**31) <= code < 2**31 else 1
    print(code, file=sys.stderr)
    return 1


def finish(code):
    """Exit like the interpreter does, minus the teardown of every module and object: in a forked
    child that teardown writes to every inherited page (copy-on-write) and costs more than a short
    program itself. Non-daemon threads are joined, atexit handlers run, stdio is flushed (a failed
    flush gives status 120, as in CPython)."""
    try:
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()
        import atexit

        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                code = code or 120
        os._exit(code)


def run_program(path, source, site):
    """Run the code as ``__main__`` of this (forked, limited, unprivileged) interpreter."""
    if site:
        import site as site_module

        site_module.main()
    main = type(sys)("__main__")
    main.__dict__.update(__file__=path, __builtins__=builtins, __cached__=None)
    sys.modules["__main__"] = main
    sys.argv[:] = [path]
    try:
        exec(compile(source, path, "exec", dont_inherit=True), main.__dict__)
    except SystemExit as exc:
        code = exit_code(exc)
    except BaseException as exc:  # noqa: B036, BLE001 - mirror the interpreter: report any uncaught exception
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next  # hide the runner's own frames, as if the program ran as a script
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)  # the hook prints exc.__traceback__
        code = 1
    else:
        code = 0
    finish(code)


def child(cfg, status_fd, workdir, prog, source):
    try:
        os.chdir(workdir)
        set_limits(cfg)
        drop_privileges(cfg)
    except (OSError, ValueError, SetupError) as exc:
        write_status(status_fd, {"setup_error": f"{type(exc).__name__}: {exc}"})
        os._exit(126)
    os.close(status_fd)
    run_program(prog, source, cfg["site"] == "1")


def wait_until(pid, pidfd, deadline):
    """True when the child exited before the deadline (it is not reaped yet)."""
    if pidfd is not None:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        return bool(poller.poll(max(0.0, deadline - time.monotonic()) * 1000))
    while time.monotonic() < deadline:  # kernels before 5.3: no pidfd, poll the child instead
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return True
        time.sleep(0.002)
    return False


def kill_descendants():
    """Weak levels (no PID namespace): kill and reap what the program left running. As child subreaper
    every orphan is ours; ``sweep`` of the sibling ``jobs.py`` (the same code the batch harnesses use
    between jobs) stops the whole tree first, so that a fork bomb cannot outpace the killing."""
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return  # no child at all: nothing survived (the common case, one cheap syscall)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs.py")
    helpers = {"__name__": "reasonrl_sandbox_jobs"}
    with open(path, "rb") as f:
        exec(compile(f.read(), path, "exec"), helpers)  # only now: its imports cost start-up time
    helpers["sweep"]()


def stop(pid, pidfd):
    """SIGTERM's handler (``SandboxSession.close``): end the program now; the runner then sweeps and
    reports as after any exit. Through the pidfd, which can never name a reused pid."""
    try:
        if pidfd is not None:
            _signal.pidfd_send_signal(pidfd, SIGKILL)
        elif not REAPED:
            os.kill(pid, SIGKILL)
    except ProcessLookupError:
        pass  # it is gone already


def supervise(cfg, pid, start):
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None  # kernels before 5.3
    _signal.signal(SIGTERM, lambda *_: stop(pid, pidfd))
    _signal.pthread_sigmask(_signal.SIG_UNBLOCK, {SIGTERM})
    timed_out = not wait_until(pid, pidfd, start + float(cfg["timeout"]))
    if timed_out:
        os.kill(pid, SIGKILL)
    _, status, usage = os.wait4(pid, 0)
    REAPED.append(pid)
    seconds = time.monotonic() - start
    if cfg["level"] not in NS_LEVELS:
        kill_descendants()
    return {
        "returncode": os.waitstatus_to_exitcode(status),
        "timed_out": int(timed_out),
        "seconds": f"{seconds:.6f}",
        "cpu_seconds": f"{usage.ru_utime + usage.ru_stime:.6f}",
        "max_rss_kb": usage.ru_maxrss,
    }


def warm_up():
    """Before fork: initialise the compiler once and move every object to the permanent GC
    generation, so the child neither redoes the former nor copies (copy-on-write) the whole heap
    when its collector walks the latter. This halves the child's cost for short programs."""
    compile("def f(x):\n    return [str(i) for i in x if i]\n", "<warm-up>", "exec")
    gc.freeze()


def main(argv):
    status_fd = None
    try:
        cfg = parse_config(argv)
        status_fd = int(cfg["status_fd"])
        os.set_inheritable(status_fd, False)
        with open(cfg["prog"], "rb") as f:
            source = f.read()
        if cfg["level"] in NS_LEVELS:
            workdir, prog = setup_filesystem(cfg, source)
        else:
            workdir, prog = cfg["workdir"], cfg["prog"]
            prctl(PR_SET_CHILD_SUBREAPER, 1)
    except (OSError, ValueError, SetupError) as exc:
        if status_fd is None:
            raise
        write_status(status_fd, {"setup_error": f"{type(exc).__name__}: {exc}"})
        return 1
    warm_up()
    start = time.monotonic()
    _signal.pthread_sigmask(_signal.SIG_BLOCK, {SIGTERM})  # until the handler that stops the program is in
    pid = os.fork()
    if pid == 0:
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, {SIGTERM})  # the program keeps the default action
        child(cfg, status_fd, workdir, prog, source)  # never returns: ends in os._exit
    write_status(status_fd, supervise(cfg, pid, start))
    return 0


if __name__ == "__main__":
    os._exit(main(sys.argv[1:]))  # nothing to flush (the report went out with os.write)
