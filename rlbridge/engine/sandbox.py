"""Running untrusted (model-written) Python in a sandbox, on one Linux machine, as root.

Layers (docs/sandbox.md says what each one stops):

1. `unshare --net --mount --pid --ipc --uts --fork --kill-child`: a network namespace with only a
   loopback device that is down (no connect, no DNS, not even to 127.0.0.1), a PID namespace (the
   program sees and can signal only its own processes; when its PID 1 dies all of them die), own
   IPC and hostname.
2. Mount namespace (rlbridge/engine/_sandbox_init.py): a new root on tmpfs holding read-only binds
   of /usr, /etc and the Python installation only (no /root, /home, /work, /tmp of the host), a
   fresh /proc, four device nodes, and a size-limited tmpfs /tmp (the scratch dir; it vanishes
   with the namespace, nothing to clean up on the host).
3. Unprivileged identity: the program runs as a fresh uid/gid of its own (no supplementary
   groups, no_new_privs), so it cannot remount, chroot, read root-only files, or share its
   process budget with another run.
4. rlimits: CPU seconds, address space, processes (per that uid), file size, open files, no core.
5. The host side: a clean environment (no host variables), a wall-clock timeout that SIGKILLs the
   whole process group (PID 1 of the namespace with it), and a cap on captured output.
"""

from __future__ import annotations

import marshal
import os
import random
import selectors
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rlbridge.errors import RLBridgeError

INIT = Path(__file__).with_name("_sandbox_init.py")
SETUP_ERROR = "rlbridge-sandbox-setup-error:"
OUTCOMES = ("ok", "failed", "timeout", "cpu_limit", "memory_limit", "output_limit", "killed", "setup_error")
"""ok: exit 0; failed: a non-zero exit (an exception, a failed test); timeout: past wall_s;
cpu_limit: past cpu_s (SIGXCPU/SIGKILL); memory_limit: MemoryError or killed for memory;
output_limit: more than output_bytes on stdout+stderr; killed: ended by another signal;
setup_error: the sandbox itself could not be built (not the program's fault)."""


class SandboxUnavailable(RLBridgeError):
    """The machine cannot make the sandbox (not root, no namespaces, no unshare)."""


@dataclass
class Limits:
    wall_s: float = 10.0
    """Wall-clock limit; the whole sandbox is killed at this point."""
    cpu_s: int = 5
    """CPU seconds of the program (RLIMIT_CPU)."""
    memory_mb: int = 512
    """Address space per process (RLIMIT_AS), MiB."""
    nproc: int = 32
    """Processes and threads of the sandbox's own uid (RLIMIT_NPROC)."""
    fsize_mb: int = 16
    """Largest file the program may write (RLIMIT_FSIZE), MiB; the scratch tmpfs is 2x this."""
    nofile: int = 64
    """Open file descriptors (RLIMIT_NOFILE)."""
    output_bytes: int = 65536
    """stdout + stderr kept; more kills the program (outcome output_limit)."""


@dataclass
class Result:
    outcome: str
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    uid: int = 0
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def python_paths() -> list[str]:
    """Directories the sandboxed interpreter needs: its installation (and the venv's, which has
    the interpreter link), read-only."""
    paths = {sys.base_prefix, sys.prefix, os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))}
    stdlib = sysconfig.get_paths().get("stdlib")
    if stdlib:
        paths.add(os.path.dirname(os.path.dirname(os.path.realpath(stdlib))))
    return sorted(p for p in paths if p and os.path.isdir(p))


SYSTEM_PATHS = ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc"]


def check_available() -> None:
    if os.geteuid() != 0:
        raise SandboxUnavailable(
            "the code sandbox needs root (Linux namespaces, a fresh uid per run); run the engine as root "
            "or use a reward that does not execute code"
        )
    if shutil.which("unshare") is None:
        raise SandboxUnavailable("the code sandbox needs `unshare` (util-linux): apt-get install util-linux")


def _fresh_uid() -> int:
    # a uid no account uses, one per run: RLIMIT_NPROC counts per uid, so runs do not share a budget
    return random.randrange(200_000, 2_000_000_000)


def run_python(
    files: dict[str, str],
    main: str = "main.py",
    limits: Limits | None = None,
    site_packages: bool = False,
) -> Result:
    """Run `python main.py` in the sandbox with `files` in its scratch working directory."""
    check_available()
    limits = limits or Limits()
    uid = _fresh_uid()
    job = {
        "uid": uid,
        "files": files,
        "main": main,
        "site": site_packages,
        "sys_path": [p for p in sys.path[1:] if p.startswith(sys.base_prefix) and "site-packages" not in p],
        "env": {"PATH": "/usr/bin:/bin", "HOME": "/tmp/scratch", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"},
        "ro_paths": [*SYSTEM_PATHS, *python_paths()],
        "scratch_mb": max(1, 2 * limits.fsize_mb),
        "limits": asdict(limits),
    }
    cmd = ["unshare", "--net", "--mount", "--pid", "--ipc", "--uts", "--fork", "--kill-child",
           sys.executable, "-I", "-S", "-B", str(INIT)]
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin"}, start_new_session=True, close_fds=True,
    )
    assert proc.stdin and proc.stdout and proc.stderr
    try:
        proc.stdin.write(marshal.dumps(job))
        proc.stdin.close()
    except BrokenPipeError:
        pass
    out = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    sel = selectors.DefaultSelector()
    for stream in out:
        os.set_blocking(stream.fileno(), False)
        sel.register(stream, selectors.EVENT_READ)
    deadline = started + limits.wall_s
    verdict = None
    total = 0
    while sel.get_map():
        left = deadline - time.monotonic()
        if left <= 0:
            verdict = "timeout"
            break
        for key, _ in sel.select(timeout=min(left, 0.5)):
            chunk = key.fileobj.read(65536)  # type: ignore[union-attr]
            if not chunk:
                sel.unregister(key.fileobj)
                continue
            total += len(chunk)
            out[key.fileobj].extend(chunk)  # type: ignore[index]
            if total > limits.output_bytes:
                verdict = "output_limit"
                break
        if verdict:
            break
    if verdict:
        _kill_group(proc)
    try:
        returncode = proc.wait(timeout=max(0.5, deadline + 1.0 - time.monotonic()))
    except subprocess.TimeoutExpired:
        verdict = verdict or "timeout"
        _kill_group(proc)
        returncode = proc.wait()
    sel.close()
    for stream in out:
        stream.close()
    wall = time.monotonic() - started
    stdout = bytes(out[proc.stdout])[: limits.output_bytes].decode(errors="replace")
    stderr = bytes(out[proc.stderr])[: limits.output_bytes].decode(errors="replace")
    if verdict is None:
        verdict = _outcome(returncode, stderr)
    if verdict == "setup_error" and "Operation not permitted" in stderr:
        raise SandboxUnavailable(f"the code sandbox could not be built here: {stderr.strip().splitlines()[-1]}")
    return Result(verdict, returncode, stdout, stderr, wall, uid)


def _outcome(returncode: int, stderr: str) -> str:
    if SETUP_ERROR in stderr or returncode == 125 and "unshare:" in stderr:
        return "setup_error"
    if returncode == 0:
        return "ok"
    if returncode in (128 + signal.SIGXCPU, 128 + signal.SIGKILL) and "MemoryError" not in stderr:
        return "cpu_limit" if returncode == 128 + signal.SIGXCPU else "killed"
    if "MemoryError" in stderr or "Cannot allocate memory" in stderr:
        return "memory_limit"
    if returncode > 128:
        return "killed"
    return "failed"


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # unshare and PID 1 of the namespace; the rest die with PID 1
    except ProcessLookupError:
        pass


# --- code against tests ---------------------------------------------------------------------------

PASS_MARK = "RLBRIDGE-TEST-PASSED "
HARNESS = '''
import sys
sys.setrecursionlimit(2000)
_tests = {tests!r}
_ns = {{"__name__": "__solution__"}}
try:
    exec(compile(open("solution.py").read(), "solution.py", "exec"), _ns)
except BaseException as _e:
    print("solution failed to load:", type(_e).__name__, _e, file=sys.stderr)
    sys.exit(1)
for _i, _t in enumerate(_tests):
    try:
        exec(compile(_t, f"test_{{_i}}", "exec"), _ns)
    except BaseException as _e:
        print(f"test {{_i}} failed:", type(_e).__name__, str(_e)[:200], file=sys.stderr)
    else:
        sys.stdout.flush()
        sys.__stdout__.write("{mark}%d\\n" % _i)
        sys.__stdout__.flush()
'''


def run_tests(solution: str, tests: list[str], limits: Limits | None = None) -> tuple[float, Result]:
    """Run `solution` then each test (Python statements, e.g. asserts) in the sandbox: the fraction
    of tests that passed, and the run's result. Tests that ran before a timeout or crash count."""
    harness = HARNESS.format(tests=list(tests), mark=PASS_MARK)
    result = run_python({"solution.py": solution, "main.py": harness}, limits=limits)
    passed = {line[len(PASS_MARK):] for line in result.stdout.splitlines() if line.startswith(PASS_MARK)}
    result.extra["passed"] = len(passed)
    result.extra["total"] = len(tests)
    return (len(passed) / len(tests) if tests else 0.0), result
