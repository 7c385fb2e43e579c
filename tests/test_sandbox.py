"""Tests for reasonrl.rewards.sandbox: ordinary programs, hostile programs, isolation detection,
the pool. Hostile tests check the HOST afterwards (files, processes, the test process itself), not
just what the program printed. A test that needs an isolation feature skips, naming the detected
level and why the stronger ones are unavailable, only when that feature is really not active."""

from __future__ import annotations

import importlib.util, json, os, resource, shutil, signal, site, socket, subprocess, sys  # noqa: E401
import tempfile, time, uuid, warnings  # noqa: E401
from pathlib import Path

import pytest

from reasonrl.rewards.sandbox import (
    LEVELS,
    STATUSES,
    Limits,
    Sandbox,
    SandboxUnavailable,
    classify,
    core,
    isolation,
    make_limits,
    run_many,
    run_python,
)
from reasonrl.rewards.sandbox.levels import PRIVATE_TMP
from harness import detached_grandchild, procs_matching

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
ROOT = os.geteuid() == 0
SECRET = "s3cr3t-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def info():
    return isolation()


def need(info, *any_of):
    """Skip (with the detection report) unless one of the features is active at the auto level."""
    if not any(f in info.features for f in any_of):
        pytest.skip(f"needs one of {any_of}; active: {info}")


def attempts(*calls: str) -> str:
    """A program trying each statement in turn, printing ``DONE i`` or ``refused i <reason>``."""
    return "import os, signal, socket\n" + "".join(
        f"try:\n    {c}\n    print('DONE {i}')\nexcept OSError as e:\n    print('refused {i}', e.strerror)\n"
        for i, c in enumerate(calls)
    )


@pytest.fixture
def outside_dir():
    """A fresh dir on the host, outside the dirs the sandbox replaces by private tmpfs."""
    for base in ("/srv", "/opt", "/mnt", "/var/lib", str(REPO)):
        if os.path.isdir(base) and os.access(base, os.W_OK) and not base.startswith(PRIVATE_TMP):
            path = tempfile.mkdtemp(prefix="reasonrl-sbx-test-", dir=base)
            os.chmod(path, 0o755)
            yield Path(path)
            shutil.rmtree(path)
            return
    pytest.skip("no writable host directory outside /tmp, /var/tmp, /dev/shm")


@pytest.fixture
def setuid_id(outside_dir, info):
    """A setuid-root copy of ``id`` on the host. It only prints ids, so it grants nothing, but it
    shows whether a setuid bit takes effect: run as uid 65534 on the host it must report euid 0."""
    source = shutil.which("id")
    if not ROOT or source is None:
        pytest.skip(f"making a setuid-root helper needs root and the 'id' program; {info}")
    folder = outside_dir / "suid"
    folder.mkdir()
    os.chmod(folder, 0o755)
    helper = folder / "id"  # named id: a multi-call binary dispatches on its name
    shutil.copy(os.path.realpath(source), helper)
    os.chown(helper, 0, 0)
    os.chmod(helper, 0o4755)
    host = subprocess.run(
        [str(helper), "-u"], user=65534, group=65534, extra_groups=[], capture_output=True, text=True, timeout=30
    )
    if host.stdout.strip() != "0":
        pytest.skip(
            f"a setuid-root copy of id run as uid 65534 on the host reports euid {host.stdout.strip()!r} "
            f"({host.stderr.strip()!r}): {folder} does not honour setuid, so no sandbox result could differ"
        )
    return helper


@pytest.fixture
def core_limit_raised():
    """Raise the test process's soft RLIMIT_CORE to its hard limit, so the sandbox's own limit (0) is
    what prevents a core file: the sandbox inherits the caller's limits before it sets its own."""
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    if hard == 0:
        pytest.skip("the caller's hard RLIMIT_CORE is 0: a core file is impossible with or without the sandbox")
    resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))
    yield
    resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))


def test_classify_by_hand():
    assert classify(0, False, "") == ("ok", None)
    # only the LAST stderr line decides: a MemoryError that was handled earlier is not "memory"
    assert classify(1, False, "Traceback...\n  x = y\nMemoryError\n") == ("memory", None)
    assert classify(1, False, "MemoryError\nValueError: bad\n") == ("error", None)
    assert classify(1, False, "OSError: [Errno 12] Cannot allocate memory\n\n") == ("memory", None)
    assert classify(-11, False, "") == ("killed", 11)  # returncode -N = killed by signal N
    assert classify(-int(signal.SIGXCPU), False, "") == ("timeout", int(signal.SIGXCPU))  # CPU limit
    assert classify(-9, True, "") == ("timeout", 9)  # the runner's wall-clock kill
    assert classify(3, False, "") == ("error", None)
    sink = core._Capped(5, tail=4)
    sink.add(b"abc")
    sink.add(b"defgh")
    # 8 bytes seen: the first 5 kept, the last 4 remembered for the status classification
    assert (bytes(sink.head), bytes(sink.tail), sink.total, sink.truncated) == (b"abcde", b"efgh", 8, True)
    assert set(STATUSES) == {"ok", "timeout", "memory", "error", "killed"}


def test_limits_validation_and_cpu_default():
    assert Limits(timeout=2.0).cpu_limit == 3  # ceil(2.0 + 1)
    assert Limits(timeout=0.3).cpu_limit == 2  # ceil(1.3)
    assert Limits(cpu_seconds=1.5).cpu_limit == 2  # ceil(1.5)
    with pytest.raises(ValueError, match="timeout=0"):
        Limits(timeout=0)
    with pytest.raises(ValueError, match="memory_mb=True"):
        Limits(memory_mb=True)
    with pytest.raises(ValueError, match="unknown sandbox option.*bogus.*valid: timeout"):
        make_limits(bogus=1)
    with pytest.raises(ValueError, match="unknown sandbox level 'docker'.*namespaces"):
        run_python("pass", level="docker")
    with pytest.raises(TypeError, match="code must be str"):
        run_python(b"print(1)")


def test_isolation_is_the_strongest_the_kernel_allows(info):
    assert info.level in LEVELS and info.features and str(info).startswith("sandbox isolation: ")
    unshare = shutil.which("unshare")
    works = (
        unshare is not None
        and subprocess.run(
            [unshare, "--mount", "--net", "--pid", "--ipc", "--uts", "--fork", "--mount-proc", "true"],
            capture_output=True,
        ).returncode
        == 0
    )
    if ROOT and works:  # checked independently of the library's own probe
        assert info.level == "namespaces", str(info)
    for stronger in LEVELS[: LEVELS.index(info.level)]:  # each one skipped must say why
        assert stronger not in core.iso.candidates() or stronger in info.unavailable


def test_require_forced_levels_and_weak_warning(info, monkeypatch):
    weakest = run_python("print('w')", level="rlimits", require="rlimits")
    assert (weakest.status, weakest.isolation, weakest.stdout) == ("ok", "rlimits", "w\n")
    with pytest.raises(SandboxUnavailable, match="require='namespaces'"):
        run_python("pass", level="rlimits", require="namespaces")
    if info.level != "namespaces":
        with pytest.raises(SandboxUnavailable):
            run_python("pass", require="namespaces")
    if ROOT:
        with pytest.raises(SandboxUnavailable, match="userns.*root"):
            isolation("userns")
    monkeypatch.setattr(
        core,
        "isolation",
        lambda level="auto": core.Isolation("rlimits", ("x",), ("no network isolation",), {"namespaces": "test"}),
    )
    with pytest.warns(core.SandboxWarning, match="WEAK isolation.*no network isolation"):
        assert core.resolve_level() == "rlimits"


def test_prints_exit_codes_and_tracebacks(info):
    res = run_python("import os\nprint('hello', os.getpid())")
    assert res.status == "ok" and res.returncode == 0 and res.stdout.startswith("hello ")
    assert int(res.stdout.split()[1]) != os.getpid() and res.isolation == info.level
    assert 0 < res.seconds <= res.wall_seconds
    code3 = run_python("import sys\nprint('x')\nsys.exit(3)")
    assert (code3.status, code3.returncode, code3.stdout) == ("error", 3, "x\n")
    exc = run_python("def f():\n    return 1 / 0\nf()\n")
    assert exc.status == "error" and exc.returncode == 1
    assert exc.stderr.startswith("Traceback (most recent call last):")
    assert "ZeroDivisionError: division by zero" in exc.stderr and "line 2, in f" in exc.stderr
    assert "runner.py" not in exc.stderr  # the bootstrap's frames are hidden
    syntax = run_python("x = (1,\n")
    assert syntax.status == "error" and "SyntaxError" in syntax.stderr
    echo = run_python("import sys\nfor line in sys.stdin: print(line.strip()[::-1])", stdin="abc\nxyz\n")
    assert (echo.status, echo.stdout) == ("ok", "cba\nzyx\n")
    big = run_python("import sys\nprint(len(sys.stdin.buffer.read()))", stdin=b"7" * 1_000_000)
    assert big.stdout == "1000000\n"
    ignored = run_python("print('no read')", stdin="z" * 1_000_000)  # program never reads: no hang
    assert (ignored.status, ignored.stdout) == ("ok", "no read\n")


def test_workdir_is_fresh_and_removed():
    code = (
        "import os\nprint(os.getcwd())\nprint(os.listdir('.'))\n"
        "open('made.txt', 'w').write('x')\nprint(sorted(os.environ))"
    )
    res = run_python(code)
    cwd, listing, env = res.stdout.splitlines()
    assert cwd == res.workdir and listing == "['prog.py']"
    assert env == "['HOME', 'LANG', 'PATH', 'TMPDIR']"
    assert not os.path.exists(res.workdir)


def _third_party_module() -> str:
    """A module installed in the interpreter's site-packages (not the standard library)."""
    roots = [os.path.realpath(p) for p in site.getsitepackages()]
    for name in ("yaml", "numpy", "torch"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin and any(os.path.realpath(spec.origin).startswith(r + "/") for r in roots):
            return name
    pytest.skip(f"none of yaml, numpy, torch is installed in this interpreter's site-packages {roots}")


def test_site_packages_only_on_request():
    name = _third_party_module()
    code, options = f"import {name}\nprint({name}.__name__)", dict(memory_mb=1024, timeout=30)
    default = run_python(code, **options)
    assert default.status == "error" and f"ModuleNotFoundError: No module named '{name}'" in default.stderr
    opted = run_python(code, site_packages=True, **options)
    assert (opted.status, opted.stdout) == ("ok", f"{name}\n"), opted.stderr


def test_infinite_loop_times_out_on_wall_clock_and_cpu():
    # How long past the timeout the kill lands is measured in benchmarks/speed/sandbox_speed.py, not here.
    res = run_python("while True:\n    pass", timeout=0.5)
    assert (res.status, res.signal) == ("timeout", 9)
    assert 0.5 <= res.seconds <= res.wall_seconds  # correctness, not speed: never killed before the timeout
    # RLIMIT_CPU: SIGXCPU after 1 s of CPU; the wall timeout is only a far backstop for a loaded machine
    cpu = run_python("while True:\n    pass", timeout=30, cpu_seconds=1)
    assert (cpu.status, cpu.signal) == ("timeout", int(signal.SIGXCPU))


def test_memory_bombs_and_segfault():
    one = run_python("x = bytearray(1 << 34)")  # 16 GiB at once
    grow = run_python("a = []\nwhile True:\n    a.append(bytearray(10 ** 7))", memory_mb=128)
    for res in (one, grow):
        assert res.status == "memory" and res.returncode == 1 and "MemoryError" in res.stderr
    assert grow.max_rss_mb < 200
    crash = run_python("import ctypes\nctypes.string_at(0)")  # segfault
    assert (crash.status, crash.returncode, crash.signal) == ("killed", -11, 11)


CRASH_IN_A_CHILD = (
    "import ctypes, os, resource\npid = os.fork()\nif pid == 0:\n    ctypes.string_at(0)\n"
    "_, status = os.waitpid(pid, 0)\nprint(os.WTERMSIG(status), os.WCOREDUMP(status), os.listdir('.'), "
    "resource.getrlimit(resource.RLIMIT_CORE), flush=True)\nctypes.string_at(0)\n"
)


@pytest.mark.parametrize("level", ["auto", "rlimits"])
def test_a_crash_leaves_no_core_file(level, core_limit_raised):
    # "rlimits" is forced on purpose: its program keeps the caller's uid and stays dumpable, so only
    # RLIMIT_CORE = 0 stands between a segfault and a core file in the work dir.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", core.SandboxWarning)
        res = run_python(CRASH_IN_A_CHILD, level=level)
    assert (res.status, res.signal) == ("killed", 11)
    sig, dumped, rest = res.stdout.split(" ", 2)
    assert (sig, rest) == ("11", "['prog.py'] (0, 0)\n"), f"core file or limit at level {res.isolation}: {res.stdout}"
    with open("/proc/sys/kernel/core_pattern") as f:
        piped = f.read().startswith("|")
    if not piped:  # a piped core_pattern hands the dump to the host's handler, which sees the limit 0
        assert dumped == "False", f"the kernel dumped core at level {res.isolation}"


def test_fork_bomb_is_contained(info):
    if info.level == "rlimits" and ROOT:  # the kernel ignores RLIMIT_NPROC for root
        pytest.skip(f"running as root with rlimits only cannot contain a fork bomb; {info}")
    res = run_python(
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        timeout=0.5,
        max_procs=8,
    )
    assert res.status == "timeout"
    assert procs_matching(uid=res.uid, text=res.workdir) == []  # nothing survived


def test_huge_output_is_capped():
    res = run_python(
        "import sys\nsys.stdout.write('x' * 5_000_000)\nsys.stderr.write('y' * 3_000_000)", max_output_bytes=1000
    )
    assert res.status == "ok" and res.stdout == "x" * 1000 and res.stderr == "y" * 1000
    assert res.stdout_truncated and res.stderr_truncated
    flood = run_python("while True:\n    print('z' * 1000)", timeout=0.5, max_output_bytes=4096)
    assert flood.status == "timeout" and len(flood.stdout) == 4096 and flood.stdout_truncated


def test_file_size_open_files_and_disk_limits(info):
    big = run_python("open('f', 'wb').write(b'0' * (2 << 20))", max_file_mb=1)
    assert big.status == "error" and "File too large" in big.stderr
    many = run_python("fs = [open('prog.py') for _ in range(100)]", max_files=16)
    assert many.status == "error" and "Too many open files" in many.stderr
    if "private-tmp:/tmp,/var/tmp,/dev/shm" in info.features:
        full = run_python("for i in range(4):\n    open(f'f{i}', 'wb').write(b'0' * (1 << 20))", disk_mb=2)
        assert full.status == "error" and "No space left on device" in full.stderr


def test_writing_outside_changes_nothing_on_the_host(info, outside_dir):
    need(info, "read-only-fs")
    open_dir = outside_dir / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)  # even a world-writable host dir must stay untouched
    tag = uuid.uuid4().hex
    targets = [
        f"/tmp/{tag}",
        f"/var/tmp/{tag}",
        f"/dev/shm/{tag}",
        f"/root/{tag}",
        str(REPO / tag),
        str(open_dir / tag),
        str(SRC / "reasonrl" / tag),
    ]
    res = run_python(attempts(*[f"open({p!r}, 'w').write('x')" for p in targets], f"os.mkdir('/tmp/{tag}d')"))
    assert res.status == "ok", res.stderr
    for path in targets + [f"/tmp/{tag}d"]:
        assert not os.path.exists(path), f"{path} was created on the host"
    for i in range(3, len(targets)):  # outside the private tmpfs the writes fail outright
        assert f"refused {i} " in res.stdout
    assert "refused 5 Read-only file system" in res.stdout  # the world-writable dir: only ro stops it


def test_environment_secrets_are_invisible(info, monkeypatch):
    need(info, "uid-drop", "pid-ns")
    monkeypatch.setenv("SECRET_TOKEN", SECRET)
    paths = ["/proc/1/environ", "/proc/self/environ", f"/proc/{os.getpid()}/environ"]
    res = run_python(
        attempts(
            "print(dict(os.environ))",
            "print(open(f'/proc/{os.getppid()}/environ').read())",
            *[f"print(open({p!r}).read())" for p in paths],
        )
    )
    assert res.status == "ok" and "SECRET_TOKEN" not in res.stdout + res.stderr and SECRET not in res.stdout


def test_network_is_unreachable(info):
    need(info, "net-ns")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        port = server.getsockname()[1]
        res = run_python(
            attempts(*[f"socket.create_connection({a!r}, timeout=1)" for a in [("127.0.0.1", port), ("1.1.1.1", 53)]])
        )
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody ever connected to the host's loopback listener
    assert res.status == "ok" and "DONE" not in res.stdout and res.stdout.count("refused") == 2


def test_killing_the_parent_hits_nothing_of_ours(info):
    need(info, "uid-drop", "pid-ns")
    me = os.getpid()
    res = run_python(attempts(*[f"os.kill({p}, signal.SIGKILL)" for p in ("os.getppid()", me, 1, -1)]))
    # kill(-1) reaches only the program's own uid (it exempts the caller): nothing else of ours
    assert res.status == "ok" and "DONE 0" not in res.stdout and "DONE 1" not in res.stdout
    assert "DONE 2" not in res.stdout and res.stdout.count("\n") == 4
    assert os.getpid() == me  # and we are obviously still running


def test_cannot_delete_a_file_it_does_not_own(info, outside_dir):
    need(info, "uid-drop", "read-only-fs")
    victim = outside_dir / "victim.txt"
    victim.write_text("keep me")
    res = run_python(attempts(f"os.remove({str(victim)!r})"))
    assert res.status == "ok" and res.stdout.startswith("refused 0")
    assert victim.read_text() == "keep me" and victim.stat().st_uid == os.geteuid()


def test_abstract_unix_socket_is_unreachable(info):
    need(info, "net-ns")  # abstract UNIX socket names are per network namespace
    name = b"\0reasonrl-sbx-test-" + uuid.uuid4().hex.encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(name)
        server.listen()
        server.setblocking(False)
        res = run_python(attempts(f"socket.socket(socket.AF_UNIX).connect({name!r})"))
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected from the sandbox
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(name)  # while any host process can: the listener was live all along
            server.accept()[0].close()
    assert (res.status, res.stdout) == ("ok", "refused 0 Connection refused\n")


def setuid_probe(helper: Path) -> str:
    """Prints the euid the setuid-root ``helper`` runs with, NoNewPrivs, and the visible mounts
    (the helper's included) that would honour a setuid bit."""
    return (
        "import os, subprocess\n"
        f"print(subprocess.run([{str(helper)!r}, '-u'], capture_output=True, text=True).stdout.strip())\n"
        "print(open('/proc/self/status').read().split('NoNewPrivs:')[1].split()[0])\n"
        "def honours_setuid(mount):\n    try:\n        return not os.statvfs(mount).f_flag & os.ST_NOSUID\n"
        "    except OSError:\n        return False  # out of the program's reach: nothing there can run\n"
        "mounts = {line.split()[4] for line in open('/proc/self/mountinfo')}\n"
        f"print(sorted(filter(honours_setuid, mounts | {{{str(helper.parent)!r}}})))\n"
    )


def test_setuid_binary_gives_no_privilege(info, setuid_id):
    need(info, "uid-drop")
    res = run_python(setuid_probe(setuid_id))
    assert res.status == "ok", res.stderr
    euid, no_new_privs, suid_mounts = res.stdout.splitlines()
    assert euid == str(res.uid), f"the setuid-root helper ran with euid {euid} at level {res.isolation}"
    assert no_new_privs == "1"  # alone enough: execve then ignores setuid bits and file capabilities
    if "read-only-fs" in info.features:  # namespace levels also remount every inherited mount nosuid
        assert suid_mounts == "[]", f"mounts without nosuid inside the sandbox: {suid_mounts}"


def test_capabilities_groups_and_ids_are_dropped(info):
    need(info, "uid-drop")
    groups = os.getgroups()
    os.setgroups(groups + [4242])  # a supplementary group the sandbox must not pass on (we are root here)
    try:
        res = run_python("print(open('/proc/self/status').read())")
    finally:
        os.setgroups(groups)
    status = dict(line.split(":", 1) for line in res.stdout.splitlines() if ":" in line)
    ids = [str(res.uid)] * 4  # real, effective, saved and file-system ids
    assert (status["Uid"].split(), status["Gid"].split(), status["Groups"].split()) == (ids, ids, [])
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[cap], 16) == 0, f"{cap} is {status[cap].strip()} at level {res.isolation}"


def test_home_and_run_are_hidden(info):
    need(info, "hidden:home,/run")
    home = os.path.realpath(os.path.expanduser("~"))
    if home == "/" or not os.path.isdir(home):
        pytest.skip(f"the caller's home is {home!r}: nothing to hide")
    tag = uuid.uuid4().hex
    markers = [Path(home) / f".reasonrl-sbx-{tag}"]
    if os.access("/run", os.W_OK):
        markers.append(Path("/run") / f"reasonrl-sbx-{tag}")
    for marker in markers:
        marker.write_text(SECRET)
    try:
        res = run_python(attempts(*[f"os.stat({str(m)!r})" for m in markers], "print(os.listdir('/run'))"))
    finally:
        for marker in markers:
            marker.unlink()
    # "No such file or directory", not "Permission denied": the file is gone, not merely unreadable
    expected = "".join(f"refused {i} No such file or directory\n" for i in range(len(markers)))
    assert (res.status, res.stdout) == ("ok", expected + f"[]\nDONE {len(markers)}\n")


def test_ipc_uts_and_pid_namespaces_are_private(info):
    for feature in ("ipc-ns", "uts-ns", "net-ns", "mount-ns", "pid-ns"):
        need(info, feature)
    kinds = ["ipc", "uts", "net", "mnt", "pid"]
    hostname = socket.gethostname()
    res = run_python(
        f"import os\nprint(*[os.readlink('/proc/self/ns/' + k) for k in {kinds!r}])\n"
        "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
        + attempts("socket.sethostname('reasonrl-sandbox')")
    )
    inside, pids, renamed = res.stdout.splitlines()
    host = [os.readlink(f"/proc/self/ns/{k}") for k in kinds]
    shared = [ns for ns in inside.split() if ns in host]
    assert shared == [], f"namespaces shared with the host at level {res.isolation}: {shared}"
    assert pids == "[1, 2]"  # the runner (init of the namespace) and the program: nothing of the host
    assert renamed == "refused 0 Operation not permitted" and socket.gethostname() == hostname


@pytest.mark.parametrize("level", ["auto", "rlimits"])
def test_detached_grandchild_does_not_outlive_the_call(level, info):
    # "rlimits" is forced here on purpose: it tests the subreaper clean-up of the weak levels
    # with a benign program (the marker dir is world-writable so any level could write there).
    marker_dir = Path(tempfile.mkdtemp(prefix="reasonrl-sbx-marker-", dir="/tmp"))
    os.chmod(marker_dir, 0o777)
    marker = marker_dir / "alive"
    sleep = 1.0
    try:
        t0 = time.monotonic()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", core.SandboxWarning)
            res = run_python(detached_grandchild(marker, sleep), level=level, timeout=3)
        # No timing is asserted (benchmarks/speed/sandbox_speed.py measures that the call does not wait).
        # Right after the call a surviving grandchild is either still alive (found here) or writes its
        # marker, stamped with the time, after the call returned (found below), however slow the machine is.
        returned = time.time()
        survivors = procs_matching(uid=res.uid, text=res.workdir)
        assert (res.status, res.stdout) == ("ok", "parent done\n")
        assert survivors == [], f"detached processes survived at level {res.isolation}"
        time.sleep(max(0.0, t0 + sleep + 0.3 - time.monotonic()))  # past the time it would have written
        # on a loaded machine the call itself may outlast the sleep: a marker written inside the call is no escape
        written = float(marker.read_text()) if marker.exists() else None
        assert written is None or written <= returned, (
            f"a detached grandchild wrote its marker after the call at level {res.isolation}"
        )
    finally:
        shutil.rmtree(marker_dir)


SCRIPT_HEAD = """import json, os, sys, warnings
sys.path.insert(0, {src!r})
from reasonrl.rewards.sandbox import SandboxUnavailable, isolation, run_python
"""
NON_ROOT_SCRIPT = (
    SCRIPT_HEAD
    + """info = isolation()
probe = "import os\\nprint(os.getuid(), open('/proc/self/status').read().split('CapEff:')[1].split()[0])\\n"
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    auto, weak = run_python(probe + {write!r}, timeout=10), run_python("print(7)", level="rlimits", timeout=10)
print(json.dumps(dict(level=info.level, unavailable=info.unavailable, warned=len(caught),
                      auto=[auto.status, auto.isolation, auto.stdout], weak=[weak.status, weak.stdout])))
"""
)
UID_LEVEL_SCRIPT = (
    SCRIPT_HEAD
    + """try:
    isolation("uid")
except SandboxUnavailable as exc:
    sys.exit(print(json.dumps(dict(skip=str(exc)))))
me, run = os.getpid(), lambda code, **kw: run_python(code, level="uid", **kw)
bomb = run("import os\\nwhile True:\\n    try:\\n        os.fork()\\n    except OSError:\\n        pass",
           timeout=0.5, max_procs=8)
spy = run({spy!r}.replace("ME", str(me))
          + f"print(os.access('/proc/{{me}}/environ', os.R_OK), 'SECRET_TOKEN' in os.environ)")
root, detached = run({root!r}), run("import os, time\\nif os.fork() == 0:\\n    os.setsid()\\n    time.sleep(3)")
alive = []
for p in filter(str.isdigit, os.listdir("/proc")):
    try:
        alive += [p] if f"Uid:\\t{{detached.uid}}\\t" in open(f"/proc/{{p}}/status").read() else []
    except OSError:
        pass
print(json.dumps(dict(bomb=bomb.status, spy=spy.stdout, root=root.stdout, alive=alive, uid=spy.uid)))
"""
)
UID_SETUID_SCRIPT = (
    SCRIPT_HEAD
    + """try:
    isolation("uid")
except SandboxUnavailable as exc:
    sys.exit(print(json.dumps(dict(skip=str(exc)))))
res = run_python({code!r}, level="uid")
print(json.dumps(dict(status=res.status, stdout=res.stdout, stderr=res.stderr, uid=res.uid)))
"""
)


def test_non_root_caller_gets_userns_or_a_reported_fallback(info):
    """Run the library as an UNPRIVILEGED user (inside the root sandbox) and check its choice."""
    need(info, "uid-drop")
    from reasonrl.rewards.sandbox.levels import HIDDEN_DIRS, PRIVATE_TMP

    hidden = [*PRIVATE_TMP, *HIDDEN_DIRS, os.path.expanduser("~")]
    if any(str(SRC.resolve()).startswith(h.rstrip("/") + "/") for h in hidden):  # the inner script imports SRC
        pytest.skip(
            f"this checkout ({SRC}) lies under a directory the sandbox hides ({hidden}), so the library "
            "cannot be imported from inside it"
        )
    inner = NON_ROOT_SCRIPT.format(src=str(SRC), write=attempts(f"open({str(SRC / 'x')!r}, 'w')"))
    res = run_python(inner, timeout=25, max_procs=64, memory_mb=1024)
    assert res.status == "ok", res.stderr
    out = json.loads(res.stdout.splitlines()[-1])
    assert out["weak"] == ["ok", "7\n"] and out["auto"][1] == out["level"]
    assert out["level"] in ("userns", "rlimits")
    if out["level"] == "userns":  # uid 0 of its namespace, no capabilities, read-only host
        assert out["auto"][:2] == ["ok", "userns"]
        assert out["auto"][2] == "0 0000000000000000\nrefused 0 Read-only file system\n"
    else:  # the fallback is reported, with the reason, and warned about
        assert "userns" in out["unavailable"] and out["warned"] >= 1


def at_uid_level(script: str) -> dict:
    """The JSON last printed by ``script`` run at the 'uid' level, by the first interpreter that can
    (the level needs a Python install other users can read: the current one or the system one)."""
    if not ROOT:
        pytest.skip("the 'uid' level needs root")
    reasons = []
    for python in dict.fromkeys([sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"]):
        if not os.path.exists(python):
            continue
        run = subprocess.run(
            [python, "-I", "-c", script],
            env={"PATH": "/usr/bin:/bin", "SECRET_TOKEN": SECRET},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, f"{python}: {run.stderr[-2000:]}"
        out = json.loads(run.stdout.splitlines()[-1])
        if "skip" not in out:
            return out
        reasons.append(f"{python}: {out['skip']}")
    pytest.skip("no interpreter can run the 'uid' level here: " + " | ".join(reasons))


def test_uid_level_without_namespaces():
    """The fallback for root without namespaces (e.g. a container whose seccomp profile forbids unshare)."""
    out = at_uid_level(
        UID_LEVEL_SCRIPT.format(
            src=str(SRC),
            root=attempts("open('/root/x', 'w')"),
            spy=attempts("os.kill(os.getppid(), 9)", "os.kill(ME, 9)"),
        )
    )
    assert out["bomb"] == "timeout" and out["alive"] == [] and out["uid"] >= 1_000_000
    assert out["spy"] == "refused 0 Operation not permitted\nrefused 1 Operation not permitted\nFalse False\n"
    assert out["root"] == "refused 0 Permission denied\n"


def test_no_new_privs_alone_makes_setuid_inert_at_the_uid_level(setuid_id):
    """Without a mount namespace the helper's mount honours setuid (the fixture checked it on the
    host), so no_new_privs is the only protection here."""
    res = at_uid_level(UID_SETUID_SCRIPT.format(src=str(SRC), code=setuid_probe(setuid_id)))
    assert res["status"] == "ok", res["stderr"]
    euid, no_new_privs, _ = res["stdout"].splitlines()
    assert (euid, no_new_privs) == (str(res["uid"]), "1"), f"the setuid-root helper ran with euid {euid}"


def test_pool_keeps_order():
    # the later programs sleep less, so with 4 workers they tend to finish first; the speed-up of
    # the pool is measured in benchmarks/speed/sandbox_speed.py
    codes = [f"import time\ntime.sleep({0.1 * (3 - i):.1f})\nprint({i})" for i in range(4)]
    results = run_many(codes, workers=4)
    assert [(r.status, r.stdout) for r in results] == [("ok", f"{i}\n") for i in range(4)]
    echo = Sandbox(timeout=2).run_many(["print(input())"] * 2, stdins=["a", "b"], workers=2)
    assert [r.stdout for r in echo] == ["a\n", "b\n"]
    with pytest.raises(ValueError, match="2 stdins for 3 programs"):
        run_many(["pass"] * 3, stdins=["a", "b"])
    with pytest.raises(ValueError, match="workers=0"):
        run_many(["pass"], workers=0)
