"""PID 1 of a sandbox (see rlbridge.engine.sandbox): runs as root inside fresh network, mount, PID,
IPC and UTS namespaces made by `unshare`, builds the sandbox's root file system, then runs the
program as an unprivileged user with rlimits and waits for it. When it exits, the kernel kills
every process left in the PID namespace and the mounts (the scratch tmpfs included) vanish with
the namespace.

Started as `python -I -S _sandbox_init.py` with a marshal-encoded job on stdin. It imports as
little as it can (marshal, not json; no runpy): each module costs milliseconds per execution.

Two modes. `program` (rlbridge.engine.sandbox.run_python): one program, its stdout and stderr go
to the host. `judge` (rlbridge.engine.sandbox.Judge): this process is the driver. It reads call
requests from the host on fd 0 (length-prefixed marshal, made by the host), and for each one forks
a fresh process under a fresh uid, with its own scratch dir and rlimits, that loads the solution
and calls one function (or runs it as a program on the given stdin). That process reports the
return value as tagged JSON of builtin types on a pipe of its own (fd 3); the driver takes exactly
one such message per call, kills every other process left in the namespace, and answers the host
on fd 1, which no solution process holds (they are forked with fds 0-3 replaced and the rest
closed, and run under a uid that cannot open /proc/1/fd or read this process's memory). Expected
values never enter the sandbox: the host compares.
"""

import _json
import ctypes
import marshal
import os
import resource
import select
import signal
import sys
import time

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_NO_NEW_PRIVS = 38
SETUP_MARK = b"rlbridge-sandbox-setup-error:"
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217}[os.uname().machine]

libc = ctypes.CDLL(None, use_errno=True)


def _check(rc, what):
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(src, target, fstype, flags, data=None):
    _check(
        libc.mount(
            src.encode() if src else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def bind_ro(src, target):
    mount(src, target, None, MS_BIND | MS_REC)
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def build_root(job):
    new = "/tmp"  # a tmpfs mounted over /tmp in this mount namespace only
    mount("none", "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for path in job["ro_paths"]:
        target = new + path
        if os.path.islink(path):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if not os.path.lexists(target):
                os.symlink(os.readlink(path), target)
        elif os.path.isdir(path):
            os.makedirs(target, exist_ok=True)
            bind_ro(path, target)
    os.makedirs(new + "/dev", exist_ok=True)
    for dev in ("null", "zero", "random", "urandom"):
        open(new + "/dev/" + dev, "w").close()
        mount("/dev/" + dev, new + "/dev/" + dev, None, MS_BIND)
    for d in ("/proc", "/tmp", "/old"):
        os.makedirs(new + d, exist_ok=True)
    # the scratch dir: a size-limited tmpfs, the only writable place
    mount("tmpfs", new + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={job['scratch_mb']}m,mode=1777")
    _check(libc.syscall(SYS_PIVOT_ROOT, new.encode(), (new + "/old").encode()), "pivot_root")
    os.chdir("/")
    _check(libc.umount2(b"/old", MNT_DETACH), "umount old root")
    os.rmdir("/old")
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def run_program(job, work):
    """The program, in this (forked, unprivileged) interpreter: a second interpreter start would
    cost more than the rest of the sandbox together."""
    del sys.path[:]
    sys.path.extend([work, *job["sys_path"]])
    sys.argv = [job["main"]]
    if job["site"]:
        import site

        site.main()
    main_module = type(sys)("__main__")
    main_module.__file__ = job["main"]
    sys.modules["__main__"] = main_module
    code = 0
    try:
        with open(job["main"], encoding="utf-8") as fh:
            source = fh.read()
        exec(compile(source, job["main"], "exec"), main_module.__dict__)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    os._exit(code & 0xFF)


# --- values as data: tagged JSON of builtin types (shared with the host, rlbridge.engine.sandbox) --

_TAGGED = ("tuple", "dict", "set", "frozenset", "bytes", "complex")


def encode_value(value, depth=0):
    """A JSON-able form of a value made of builtin types only, by exact type (a subclass of int or
    str, an object with its own __eq__, a generator: TypeError). None, bool, int, float, str and
    list are themselves; the rest is {"t": tag, "v": ...}."""
    if depth > 100:
        raise TypeError("value nested deeper than 100 levels")
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is float or kind is str:
        return value
    if kind is list:
        return [encode_value(v, depth + 1) for v in value]
    if kind is tuple or kind is set or kind is frozenset:
        return {"t": kind.__name__, "v": [encode_value(v, depth + 1) for v in value]}
    if kind is dict:
        return {"t": "dict", "v": [[encode_value(k, depth + 1), encode_value(v, depth + 1)] for k, v in value.items()]}
    if kind is bytes:
        return {"t": "bytes", "v": value.hex()}
    if kind is complex:
        return {"t": "complex", "v": [value.real, value.imag]}
    raise TypeError(f"returned a {kind.__module__}.{kind.__qualname__}, not a value of builtin types")


def decode_value(data, depth=0):
    """The value encode_value made, from parsed JSON: every node checked by exact type, so what
    comes back holds builtin types only (their own ==, hash and repr). ValueError if malformed."""
    if depth > 100:
        raise ValueError("value nested deeper than 100 levels")
    kind = type(data)
    if data is None or kind is bool or kind is int or kind is float or kind is str:
        return data
    if kind is list:
        return [decode_value(v, depth + 1) for v in data]
    if kind is not dict or set(data) != {"t", "v"} or data["t"] not in _TAGGED:
        raise ValueError(f"not an encoded value: {str(data)[:80]}")
    tag, body = data["t"], data["v"]
    try:
        if tag == "bytes":
            return bytes.fromhex(body)
        if tag == "complex":
            real, imag = body
            if type(real) is not float or type(imag) is not float:
                raise ValueError("complex parts must be floats")
            return complex(real, imag)
        if type(body) is not list:
            raise ValueError(f"{tag} body must be a list")
        if tag == "dict":
            out = {}
            for pair in body:
                if type(pair) is not list or len(pair) != 2:
                    raise ValueError("dict items must be [key, value] pairs")
                out[decode_value(pair[0], depth + 1)] = decode_value(pair[1], depth + 1)
            return out
        items = [decode_value(v, depth + 1) for v in body]
        return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
    except (TypeError, ValueError, KeyError) as exc:  # an unhashable key, a bad hex string...
        raise ValueError(f"malformed {tag}: {exc}") from None


# --- judge mode: the driver -----------------------------------------------------------------------

VALUE_FD = 3
"""The fd on which a call's process reports its value: one message, b"V" + JSON or b"E" + error."""


def _read_exact(fd, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf.extend(chunk)
    return bytes(buf)


def _send(fd, payload: bytes):
    data = len(payload).to_bytes(8, "little") + payload
    while data:
        data = data[os.write(fd, data) :]


def _drop_privileges(job, uid, work):
    os.setsid()
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    lim = job["limits"]
    # CPU: SIGXCPU at cpu_s (the outcome cpu_limit), SIGKILL a second later if caught
    resource.setrlimit(resource.RLIMIT_CPU, (lim["cpu_s"], lim["cpu_s"] + 1))
    for res, value in (
        (resource.RLIMIT_AS, lim["memory_mb"] * 2**20),
        (resource.RLIMIT_NPROC, lim["nproc"]),
        (resource.RLIMIT_FSIZE, lim["fsize_mb"] * 2**20),
        (resource.RLIMIT_NOFILE, lim["nofile"]),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(res, (value, value))
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    os.chdir(work)
    os.environ.clear()
    os.environ.update(job["env"])


def _call_in_child(job, req, uid, work, fds):
    """The forked process of one call: fds 0-3 become its stdin, stdout, stderr and value pipe,
    every other fd (the host's channel among them) is closed, privileges go, then the solution."""
    try:
        high = [os.dup(fd) for fd in fds]  # above every target, so no dup2 below overwrites a source
        for target, fd in enumerate(high):
            os.dup2(fd, target)
        os.closerange(len(fds), 1 << 16)
        _drop_privileges(job, uid, work)
        os.environ.update({"HOME": work, "TMPDIR": work})
    except BaseException as exc:
        os.write(2, f"rlbridge-sandbox-setup-error: {exc}\n".encode())
        os._exit(125)
    del sys.path[:]
    sys.path.extend([work, *job["sys_path"]])
    sys.argv = ["solution.py"]
    code = 0
    try:
        if req["kind"] == "program":
            main_module = type(sys)("__main__")
            main_module.__file__ = "solution.py"
            sys.modules["__main__"] = main_module
            exec(compile(job["solution"], "solution.py", "exec"), main_module.__dict__)
        else:
            namespace = {"__name__": "__solution__", "__file__": "solution.py"}
            exec(compile(job["solution"], "solution.py", "exec"), namespace)
            fn = namespace.get(req["name"])
            if fn is None:
                raise NameError(f"the solution defines no {req['name']!r}")
            args, kwargs = decode_value(req["args"]), decode_value(req["kwargs"])
            message = b"V" + json_text(encode_value(fn(*args, **kwargs))).encode()
            while message:
                message = message[os.write(VALUE_FD, message) :]
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:
        try:
            _print_exception(exc)
            os.write(VALUE_FD, b"E" + type(exc).__name__.encode(errors="replace")[:200])
        except BaseException:
            pass
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    os._exit(code & 0xFF)


def _print_exception(exc):
    """A traceback on stderr without the traceback module (it imports ~38 ms of modules, per
    failing call)."""
    lines = ["Traceback (most recent call last):"]
    tb = exc.__traceback__.tb_next if exc.__traceback__ else None  # from the solution's frames on
    while tb is not None:
        code = tb.tb_frame.f_code
        lines.append(f'  File "{code.co_filename}", line {tb.tb_lineno}, in {code.co_name}')
        tb = tb.tb_next
    try:
        message = str(exc)
    except BaseException:
        message = "<unprintable>"
    lines.append(f"{type(exc).__name__}: {message[:2000]}" if message else type(exc).__name__)
    os.write(2, ("\n".join(lines[-30:]) + "\n").encode(errors="replace"))


def _end_everything_else():
    """Kill every process in the namespace but this one (a call's forked reporters, daemons), and
    reap them: kill(-1) from PID 1 of a PID namespace reaches exactly those."""
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def _remove_tree(path):
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            _remove_tree(entry.path)
        else:
            try:
                os.unlink(entry.path)
            except OSError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass


def run_call(job, req, number):
    """One call in a fresh process; its outcome and what it reported, for the host."""
    uid = req["uid"]
    lim = job["limits"]
    work = f"/tmp/c{number}"
    os.mkdir(work, 0o700)
    os.chown(work, uid, uid)
    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    val_r, val_w = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        for fd in (stdin_w, out_r, err_r, val_r):
            os.close(fd)
        _call_in_child(job, req, uid, work, (stdin_r, out_w, err_w, val_w))
    for fd in (stdin_r, out_w, err_w, val_w):
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    pending = req.get("stdin", "").encode()
    bufs = {out_r: bytearray(), err_r: bytearray(), val_r: bytearray()}
    poller = select.poll()  # select and poll are built in; the selectors module costs ~5 ms to import
    for fd in (*bufs, pidfd):
        os.set_blocking(fd, False)
        poller.register(fd, select.POLLIN)
    if pending:
        os.set_blocking(stdin_w, False)
        poller.register(stdin_w, select.POLLOUT)
    else:
        os.close(stdin_w)
    deadline = started + lim["wall_s"]
    verdict = None
    exited = False
    while not exited and verdict is None:
        left = deadline - time.monotonic()
        if left <= 0:
            verdict = "timeout"
            break
        for fd, _ in poller.poll(max(1, int(left * 1000))):
            if fd == pidfd:
                exited = True
            elif fd == stdin_w:
                try:
                    pending = pending[os.write(stdin_w, pending[:65536]) :]
                except OSError:  # the program closed its stdin: the rest is not read
                    pending = b""
                if not pending:
                    poller.unregister(stdin_w)
                    os.close(stdin_w)
            elif not _drain(fd, bufs):
                poller.unregister(fd)
            if len(bufs[out_r]) + len(bufs[err_r]) > lim["output_bytes"] or len(bufs[val_r]) > lim["output_bytes"]:
                verdict = "output_limit"
                break
    if exited or verdict is None:
        _, status = os.waitpid(pid, 0)
        returncode = os.waitstatus_to_exitcode(status)
    else:
        returncode = None
    _end_everything_else()  # the call's process too, on a limit; its forked children always
    for fd in bufs:
        _drain(fd, bufs)
    for fd in (*bufs, pidfd):
        os.close(fd)
    if pending:
        os.close(stdin_w)
    _remove_tree(work)
    stderr = bytes(bufs[err_r])
    if verdict is None and (
        len(bufs[out_r]) + len(stderr) > lim["output_bytes"] or len(bufs[val_r]) > lim["output_bytes"]
    ):
        verdict = "output_limit"
    if verdict is None:
        verdict = _call_outcome(returncode, stderr)
    keep = lim["output_bytes"]
    return {
        "outcome": verdict,
        "returncode": returncode,
        "value": bytes(bufs[val_r])[:keep].decode(errors="replace"),
        "stdout": bytes(bufs[out_r])[:keep].decode(errors="replace"),
        "stderr": stderr[-4096:].decode(errors="replace"),
        "wall_s": time.monotonic() - started,
    }


def _drain(fd, bufs):
    """Read what fd has now; False at EOF."""
    try:
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                return False
            bufs[fd].extend(chunk)
    except BlockingIOError:
        return True
    except OSError:
        return False


def json_text(value):
    """JSON of None, bool, int, float, str, list and str-keyed dict (encode_value's output, the
    driver's answers), without the json module: it imports re, ~15 ms per sandbox."""
    kind = type(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return int.__repr__(value)
    if kind is float:
        if value != value:
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "Infinity" if value > 0 else "-Infinity"
        return float.__repr__(value)
    if kind is str:
        return _json.encode_basestring_ascii(value)
    if kind is list:
        return "[" + ",".join([json_text(v) for v in value]) + "]"
    if kind is dict:
        return "{" + ",".join([_json.encode_basestring_ascii(k) + ":" + json_text(v) for k, v in value.items()]) + "}"
    raise TypeError(f"json_text: {kind.__name__}")


def _call_outcome(returncode, stderr):
    if returncode == 125 and SETUP_MARK in stderr:
        return "setup_error"
    if returncode == 0:
        return "ok"
    if returncode == -signal.SIGXCPU:
        return "cpu_limit"
    if b"MemoryError" in stderr or b"Cannot allocate memory" in stderr:
        return "memory_limit"
    if returncode is not None and returncode < 0:
        return "killed"
    return "failed"


def judge(job):
    """The driver loop: one request in, one answer out, until the host closes fd 0."""
    # the calls' dirs only are writable: a call cannot plant a file or link where a later call's
    # dir will be made
    os.chmod("/tmp", 0o755)
    number = 0
    while True:
        head = _read_exact(0, 8)
        if head is None:
            os._exit(0)
        req = marshal.loads(_read_exact(0, int.from_bytes(head, "little")))
        try:
            answer = run_call(job, req, number)
        except BaseException as exc:  # the driver could not run it: not the solution's fault
            _end_everything_else()
            answer = {
                "outcome": "setup_error",
                "returncode": None,
                "value": "",
                "stdout": "",
                "stderr": f"rlbridge-sandbox-setup-error: {exc}",
                "wall_s": 0.0,
            }
        number += 1
        _send(1, json_text(answer).encode())


def main():
    job = marshal.loads(_read_exact(0, int.from_bytes(_read_exact(0, 8), "little")))
    try:
        build_root(job)
        if job.get("mode") == "judge":
            judge(job)
        uid = job["uid"]
        work = "/tmp/scratch"
        os.mkdir(work, 0o700)
        for name, content in job["files"].items():
            path = os.path.join(work, name)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(content)
            os.chown(path, uid, uid)
        os.chown(work, uid, uid)
    except Exception as exc:  # set-up failed: say so on the channel the host reads
        os.write(2, f"rlbridge-sandbox-setup-error: {exc}\n".encode())
        os._exit(125)
    null = os.open("/dev/null", os.O_RDONLY)
    # set-up failures of the child are told on this pipe, which it closes before the program runs:
    # a program that prints the set-up error line and exits 125 is a failed program, not a machine
    # that cannot sandbox
    status_r, status_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(status_r)
            os.dup2(null, 0)
            _drop_privileges(job, uid, work)
        except BaseException as exc:
            os.write(status_w, str(exc).encode(errors="replace"))
            os._exit(125)
        os.closerange(3, 1 << 16)
        run_program(job, work)
    os.close(status_w)
    # PID 1: reap everything; when the program exits, leave (the kernel kills the rest)
    while True:
        try:
            got, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(125)
        if got == pid:
            report = os.read(status_r, 4096)
            if report:
                os.write(2, SETUP_MARK + b" " + report + b"\n")
                os._exit(125)
            code = os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
            os._exit(1 if code == 125 else code)  # 125 is the set-up error's alone


if __name__ == "__main__":  # run as a script by the sandbox, never imported for effect
    main()
