"""One fresh interpreter state per job of a batch, INSIDE the sandbox (issue 41).

A batch harness (the line tracer of ``tasks/codegen.py``, the environment runner of
``tasks/env_runtime.py``) is one sandboxed program that runs many model-written jobs. Run one after
another in one interpreter, a job could change every later one: ``builtins.int = lambda *x: 42``,
a patched ``random.Random.choices``, a fake ``sys.modules`` entry, a seeded global ``random``. So the
host prepends this file (standard library only, never reasonrl; :func:`batch_program` of
:mod:`.core`) to the harness, which imports what its jobs need once and then calls
:func:`each_fresh`: every job runs in its own ``os.fork()`` of that warmed-up process, which never
runs job code itself, so each job starts from the same pristine state (builtins, classes,
``sys.modules``, random state) at the cost of one fork (benchmarks/speed/sandbox_speed.py). Same level,
limits and uid as the batch: the fork happens inside the sandbox.

What a job can no longer reach, and how:

* the batch's results: they leave on a private duplicate of stdout that every job closes first, and
  fd 1 itself points at stderr for the jobs (:func:`protect`); a job's own result travels on a pipe
  of its own, read until the job exits;
* the harness process: it is made non-dumpable, so a job running as the same uid can neither ptrace
  it nor open its descriptors or memory through ``/proc/<pid>``;
* later jobs: the harness is a child subreaper; whatever a job leaves running (a detached
  grandchild) is re-parented to it and killed before the next job starts (:func:`sweep`).

What remains (docs/sandbox.md): a job decides its OWN result (it could print anything anyway, and the
host type-checks every result); jobs share the batch's work directory and private /tmp, so a job can
leave a file that a later job of the same batch reads; at ``rlimits`` as root nothing of this holds.
"""

import gc
import json
import os
import select
import time

_PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 4, 36
_SIGSTOP, _SIGKILL = 19, 9
RESULT_CAP = 32 << 20  # bytes one job may send back; past it the job is killed and fails
_dumps, _loads = json.dumps, json.loads  # bound before any job runs: a job patching json changes only itself
_CHANNEL = []  # [the descriptor the batch's results leave on], once protect() ran


def _prctl(option, value):
    import ctypes  # already loaded by the sandbox runner: free here

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}, {value}): {os.strerror(err)}")


def protect():
    """Once, before the first job (see the module docstring): the private result channel, non-dumpable,
    child subreaper."""
    if not _CHANNEL:
        _prctl(_PR_SET_DUMPABLE, 0)
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        _CHANNEL.append(os.dup(1))
        os.dup2(2, 1)  # what a job writes to fd 1 (or leaves in a child) lands in the captured stderr


def send(mark, results):
    """The batch's results, as ``mark`` + one JSON line, on the private channel (after :func:`each_fresh`)."""
    protect()
    data = (mark + _dumps(results) + "\n").encode("utf-8")
    view = memoryview(data)
    while view:
        view = view[os.write(_CHANNEL[0], view) :]


def _descendants(root):
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue  # exited meanwhile
            children.setdefault(ppid, []).append(int(name))
    found, todo = set(), [root]
    while todo:
        for kid in children.get(todo.pop(), ()):
            if kid not in found:
                found.add(kid)
                todo.append(kid)
    return found


def sweep():
    """Kill what the last job left running: stop the whole tree first (a stopped process cannot fork),
    then SIGKILL it and reap. As subreaper, every orphan of the job is our child."""
    try:
        os.waitpid(-1, os.WNOHANG)  # a child left (running, or a zombie now reaped): sweep below
    except ChildProcessError:
        return  # nothing left (the common case: one cheap syscall)
    stopped = set()
    while True:
        fresh = _descendants(os.getpid()) - stopped
        if not fresh:
            break
        for pid in fresh:
            _signal(pid, _SIGSTOP)
        stopped |= fresh
    for pid in stopped:
        _signal(pid, _SIGKILL)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _child(job, item, work, failed, read_fd, write_fd):
    """In the fork: run the job, send its JSON result, exit without interpreter teardown."""
    code = 0
    try:
        os.close(read_fd)
        os.close(_CHANNEL[0])
        try:
            result = work(item)
        except BaseException as exc:  # noqa: B036, BLE001 - the job's failure is its result
            result = failed(job, f"{type(exc).__name__}: {exc}")
        data = _dumps(result).encode("utf-8")
        view = memoryview(data)
        while view:
            view = view[os.write(write_fd, view) :]
    except BaseException:  # noqa: B036, BLE001 - e.g. a result that is not JSON: the parent reports the exit
        code = 70
    os._exit(code)


def _pidfd(pid):
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None  # kernels before 5.3: end of file on the job's pipe alone ends the wait


def _collect(pid, fd, limit):
    """(what the job sent, None) or (b"", why it failed); ends when the job exits (a descendant still
    holding the pipe does not keep us waiting), or kills it at ``limit`` seconds or past RESULT_CAP."""
    deadline = None if limit is None else time.monotonic() + limit
    pidfd, chunks, size = _pidfd(pid), [], 0
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    os.set_blocking(fd, False)
    try:
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic()) * 1000
            events = poller.poll(wait)
            if not events:
                _signal(pid, _SIGKILL)
                return b"", f"TimeoutError: the job ran past its {limit:g} s"
            exited = any(ready == pidfd for ready, _ in events)
            while True:  # drain what is there
                try:
                    data = os.read(fd, 1 << 16)
                except BlockingIOError:
                    break
                if not data:
                    return b"".join(chunks), None
                chunks.append(data)
                size += len(data)
                if size > RESULT_CAP:
                    _signal(pid, _SIGKILL)
                    return b"", f"the job's result is larger than {RESULT_CAP} bytes"
            if exited:
                return b"".join(chunks), None
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _exit_text(status):
    code = os.waitstatus_to_exitcode(status)
    return f"killed by signal {-code}" if code < 0 else f"exit status {code}"


def _run_one(job, item, work, failed, limit):
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        _child(job, item, work, failed, read_fd, write_fd)  # never returns
    os.close(write_fd)
    try:
        data, why = _collect(pid, read_fd, limit)
    finally:
        os.close(read_fd)
    status = os.waitpid(pid, 0)[1]
    sweep()
    if why is None:
        try:
            return _loads(data.decode("utf-8"))
        except ValueError:  # nothing (an os._exit, a crash) or something that is not JSON
            why = f"the job's process ended without a result ({_exit_text(status)})"
    return failed(job, why)


class Done:
    """What ``prepare`` returns for a job it settled itself (e.g. a syntax error): its result, no fork."""

    def __init__(self, result):
        self.result = result


def _prepared(job, prepare, failed):
    try:
        return prepare(job)
    except Exception as exc:  # noqa: BLE001 - e.g. a RecursionError of the compiler: the job's failure
        return Done(failed(job, f"{type(exc).__name__}: {exc}"))


def each_fresh(jobs, work, failed, seconds=None, prepare=None):
    """``[work(prepare(job)) for job in jobs]``, each ``work`` in a fresh fork of this process (its result
    must be JSON). ``prepare(job)`` runs here, before the forks, and only ever reads the job's text
    (parse, compile: never run it), so that the forks need not redo it on copy-on-write pages (the
    parser and compiler are most of a short job's page faults); it returns what ``work`` takes, or a
    :class:`Done`. ``failed(job, why)``: the result of a job whose process died, ran past
    ``seconds(job)`` (None: no limit of its own) or sent no JSON."""
    protect()
    ready = [(job, job if prepare is None else _prepared(job, prepare, failed)) for job in jobs]
    gc.freeze()  # the jobs' forks then neither walk nor copy (copy-on-write) the warmed-up heap
    return [
        item.result
        if isinstance(item, Done)
        else _run_one(job, item, work, failed, None if seconds is None else seconds(job))
        for job, item in ready
    ]
