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

`run_python` runs one program. `Judge` / `run_tests` judge a solution against tests with the
verdict on the host: the sandbox's PID 1 runs each call of the solution in a fresh process under a
fresh uid and sends back its return value as data; the tests and expected values never enter the
sandbox (docs/sandbox.md, "The judge").
"""

from __future__ import annotations

import builtins
import json
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
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

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
    """Wall-clock limit; the whole sandbox is killed at this point (in a Judge: each call's processes)."""
    cpu_s: int = 5
    """CPU seconds of the program (RLIMIT_CPU; in a Judge, of each call's process)."""
    memory_mb: int = 512
    """Address space per process (RLIMIT_AS), MiB."""
    nproc: int = 32
    """Processes and threads of the sandbox's own uid (RLIMIT_NPROC)."""
    fsize_mb: int = 16
    """Largest file the program may write (RLIMIT_FSIZE), MiB; the scratch tmpfs is 2x this."""
    nofile: int = 64
    """Open file descriptors (RLIMIT_NOFILE)."""
    output_bytes: int = 65536
    """stdout + stderr kept; more kills the program (outcome output_limit). In a Judge, per call,
    and the most a call's reported value may take."""


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
    cmd = [
        "unshare",
        "--net",
        "--mount",
        "--pid",
        "--ipc",
        "--uts",
        "--fork",
        "--kill-child",
        sys.executable,
        "-I",
        "-S",
        "-B",
        str(INIT),
    ]
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin"},
        start_new_session=True,
        close_fds=True,
    )
    assert proc.stdin and proc.stdout and proc.stderr
    try:
        proc.stdin.write(_framed(marshal.dumps(job)))
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
    # 125 is PID 1's own (a program's 125 is passed on as 1): only the sandbox's set-up can end so
    if returncode == 125 and (SETUP_ERROR in stderr or "unshare:" in stderr):
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


def _framed(payload: bytes) -> bytes:
    return len(payload).to_bytes(8, "little") + payload


# --- the judge: code against tests, the verdict on the host ---------------------------------------

JUDGE_OUTCOMES = (*OUTCOMES, "invalid")
"""A judged call's outcomes: those of OUTCOMES, and invalid: the process ended normally but did not
report exactly one well-formed value of builtin types (e.g. it exited before returning)."""
LIMIT_RULE = (
    "a test passes only if every process it ran ended ok: timeout, cpu_limit, memory_limit, output_limit, killed, "
    "invalid and setup_error fail it, whatever it reported before"
)


@dataclass
class Call:
    """One call of the solution, in a fresh process of its own, as the host received it."""

    outcome: str
    value: Any = None
    """The return value (call kind), decoded to builtin types by exact type; None unless ok."""
    stdout: str = ""
    stderr: str = ""
    error: str = ""
    wall_s: float = 0.0


class CallFailed(BaseException):
    """A call of the solution did not return a value (it raised, hit a limit, or reported garbage).
    A BaseException, so a test's own `except Exception` does not turn it into a pass; the test is
    failed either way (Judge records every failed call)."""

    def __init__(self, call: Call) -> None:
        last = call.stderr.strip().splitlines()[-1:]
        super().__init__(f"{call.outcome}: {call.error or (last[0] if last else '')}")
        self.call = call


class Judge:
    """One sandbox (the same namespaces, new root, scratch tmpfs and rlimits as run_python) whose
    PID 1 is a driver: each `call` runs in a fresh process under a fresh uid, with a scratch dir of
    its own; the driver answers on a pipe no solution process holds; values come back as data.

    `total_wall_s` bounds the whole judge: calls after it fail at once with outcome timeout."""

    def __init__(self, solution: str, limits: Limits | None = None, total_wall_s: float = 60.0) -> None:
        check_available()
        self.limits = limits or Limits()
        self.started = time.monotonic()
        self.deadline = self.started + total_wall_s
        self.failed: str | None = None
        self.calls: list[Call] = []
        job = {
            "mode": "judge",
            "solution": solution,
            "sys_path": [p for p in sys.path[1:] if p.startswith(sys.base_prefix) and "site-packages" not in p],
            "env": {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"},
            "ro_paths": [*SYSTEM_PATHS, *python_paths()],
            "scratch_mb": max(1, 2 * self.limits.fsize_mb),
            "limits": asdict(self.limits),
        }
        cmd = [
            "unshare",
            "--net",
            "--mount",
            "--pid",
            "--ipc",
            "--uts",
            "--fork",
            "--kill-child",
            sys.executable,
            "-I",
            "-S",
            "-B",
            str(INIT),
        ]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin"},
            start_new_session=True,
            close_fds=True,
        )
        assert self.proc.stdin and self.proc.stdout
        os.set_blocking(self.proc.stdout.fileno(), False)
        self._send(marshal.dumps(job))

    def _send(self, payload: bytes) -> None:
        try:
            assert self.proc.stdin
            self.proc.stdin.write(_framed(payload))
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            self.failed = self.failed or "setup_error"

    def call(self, name: str, args: Sequence = (), kwargs: dict | None = None) -> Call:
        """`name(*args, **kwargs)` of the solution; the value arrives decoded (see Call)."""
        encode = _codec()[0]
        call = self._request(
            {"kind": "call", "name": name, "args": encode(list(args)), "kwargs": encode(dict(kwargs or {}))}
        )
        if call.outcome == "ok":
            call = _with_value(call)
        else:  # what it reported, if anything, is not a value: at most the name of what it raised
            text, call.value = str(call.value or ""), None
            call.error = call.error or (text[1:200] if text.startswith("E") else "")
        return call

    def program(self, stdin: str) -> Call:
        """The solution as a program (`__main__`) with `stdin`; its stdout is the answer."""
        call = self._request({"kind": "program", "stdin": stdin})
        call.value = None
        return call

    def _request(self, req: dict) -> Call:
        if self.failed is None and time.monotonic() >= self.deadline:
            self.failed = "timeout"
        if self.failed:
            call = Call(self.failed, error=f"the judge stopped earlier ({self.failed})")
            self.calls.append(call)
            return call
        self._send(marshal.dumps({**req, "uid": _fresh_uid()}))
        answer = self._receive(min(self.deadline, time.monotonic() + self.limits.wall_s + 5.0))
        if answer is None:
            self.failed = self.failed or "setup_error"
            stderr = self._stderr()
            # only the driver's own stderr can say the machine cannot sandbox: a call's stderr is the
            # solution's to write, and a solution that could raise this would stop the run
            if SETUP_ERROR in stderr and "Operation not permitted" in stderr:
                raise SandboxUnavailable(f"the code sandbox could not be built here: {stderr.strip().splitlines()[-1]}")
            call = Call(self.failed, error="the judge's driver did not answer", stderr=stderr)
        else:
            call = Call(
                answer["outcome"],
                value=answer.get("value", ""),
                stdout=answer.get("stdout", ""),
                stderr=answer.get("stderr", ""),
                wall_s=float(answer.get("wall_s", 0.0)),
            )
        self.calls.append(call)
        return call

    def _receive(self, deadline: float) -> dict | None:
        """The driver's next answer (8-byte length, JSON), or None if it is late, dead or oversized."""
        assert self.proc.stdout
        buf = bytearray()
        need = 8
        cap = 16 * self.limits.output_bytes + 65536
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while len(buf) < need:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.failed = "timeout"
                    self.close()
                    return None
                if not sel.select(timeout=left):
                    continue
                try:
                    chunk = os.read(self.proc.stdout.fileno(), need - len(buf))  # unbuffered: select sees what is left
                except BlockingIOError:
                    continue
                if not chunk:
                    return None
                buf.extend(chunk)
                if need == 8 and len(buf) == 8:
                    need = 8 + int.from_bytes(buf, "little")
                    if need > cap:
                        self.close()
                        return None
        return json.loads(bytes(buf[8:]))

    def _stderr(self) -> str:
        """The driver's stderr once it has exited (its set-up errors), else nothing."""
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            return ""
        if not self.proc.stderr or self.proc.stderr.closed:
            return ""
        return self.proc.stderr.read(65536)[-4096:].decode(errors="replace")

    def close(self) -> None:
        if self.proc.returncode is not None:
            return
        try:
            if self.proc.stdin:
                self.proc.stdin.close()  # the driver exits at EOF, and the namespace with it
            self.proc.wait(timeout=2.0)
        except (OSError, subprocess.TimeoutExpired):
            _kill_group(self.proc)
            self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()

    def __enter__(self) -> "Judge":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _codec():
    from rlbridge.engine._sandbox_init import decode_value, encode_value

    return encode_value, decode_value


def _with_value(call: Call) -> Call:
    """A call's value message checked: b"V" + one JSON document of encoded builtin values."""
    text, call.value = call.value, None
    if not isinstance(text, str) or not text.startswith("V"):
        call.outcome, call.error = "invalid", "the process ended without reporting a value"
        return call
    try:
        call.value = _codec()[1](json.loads(text[1:]))
    except (ValueError, RecursionError) as exc:
        call.outcome, call.error = "invalid", f"malformed value: {str(exc)[:200]}"
    return call


@dataclass
class Verdict:
    """One test's verdict: passed, the outcome of its processes (the first that was not ok, else
    ok; failed for a wrong answer) and why."""

    index: int
    passed: bool
    outcome: str
    detail: str = ""


@dataclass
class Judged:
    """run_tests' account: exactly one verdict per test index."""

    score: float
    verdicts: list[Verdict]
    calls: list[Call]
    wall_s: float

    @property
    def outcome(self) -> str:
        """The first test outcome that was not ok, else ok (a wrong answer is failed)."""
        return next((v.outcome for v in self.verdicts if v.outcome != "ok"), "ok")

    @property
    def stderr(self) -> str:
        return "\n".join(v.detail for v in self.verdicts if v.detail)


def normalise_output(text: str) -> str:
    """Program output as compared: newlines unified, each line's trailing blanks and the trailing
    empty lines dropped (APPS / CodeContests style)."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def strict_equal(a: Any, b: Any) -> bool:
    """Equality of builtin values by type: 2 == 2.0, but True != 1, [1] != (1,), and a container's
    items compare the same way."""
    ta, tb = type(a), type(b)
    if ta in (int, float) and tb in (int, float):
        return a == b
    if ta is not tb:
        return False
    if ta in (list, tuple):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b))
    if ta is dict:
        return a.keys() == b.keys() and all(strict_equal(a[k], b[k]) for k in a)
    return a == b


def solution_names(solution: str) -> list[str]:
    """The top-level names a solution defines (functions, classes, assignments), read by parsing
    it on the host (nothing of it runs here)."""
    import ast

    names = []
    for node in ast.parse(solution).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
    return names


def test_kind(test: Any) -> str:
    """assert (a string of assert statements), call, program or check; ValueError otherwise."""
    if isinstance(test, str):
        return "assert"
    if isinstance(test, dict):
        for kind, keys in (
            ("call", {"call", "expected"}),
            ("program", {"stdin", "stdout"}),
            ("check", {"check", "entry_point"}),
        ):
            if keys <= set(test):
                return kind
    raise ValueError(
        f"a code test must be a string of assert statements, {{call, args, kwargs, expected}}, {{stdin, stdout}} "
        f"or {{check, entry_point, prelude}}, not {str(test)[:120]!r}"
    )


class _Proxy:
    """A solution function as the host's test code sees it: each call runs in the sandbox and
    returns the value as data, or raises CallFailed."""

    def __init__(self, judge: Judge, name: str, failures: list[Call]) -> None:
        self.judge, self.name, self.failures = judge, name, failures

    def __call__(self, *args, **kwargs):
        call = self.judge.call(self.name, args, kwargs)
        if call.outcome != "ok":
            self.failures.append(call)
            raise CallFailed(call)
        return call.value


def _compile_asserts(test: str, index: int):
    import ast

    tree = ast.parse(test, f"test_{index}")
    if not tree.body or not all(isinstance(node, ast.Assert) for node in tree.body):
        raise ValueError(
            f"code test {index} must be assert statements only (the host evaluates them), not {test[:120]!r}"
        )
    return compile(tree, f"test_{index}", "exec")


def _judge_one(judge: Judge, names: list[str], test: Any, kind: str, index: int) -> Verdict:
    failures: list[Call] = []
    try:
        if kind == "call":
            call = judge.call(
                test["call"], _codec()[1](test.get("args", [])), _codec()[1](test.get("kwargs", {"t": "dict", "v": []}))
            )
            if call.outcome != "ok":
                failures.append(call)
            elif not strict_equal(call.value, _codec()[1](test["expected"])):
                return Verdict(index, False, "failed", f"test {index}: returned {str(call.value)[:100]}")
        elif kind == "program":
            call = judge.program(str(test["stdin"]))
            if call.outcome != "ok":
                failures.append(call)
            elif normalise_output(call.stdout) != normalise_output(str(test["stdout"])):
                return Verdict(index, False, "failed", f"test {index}: wrong output {call.stdout[:100]!r}")
        else:
            namespace: dict[str, Any] = {"__name__": f"test_{index}", "__builtins__": __builtins__}
            if kind == "assert":
                # a solution's `abs` or `len` would let it answer the test's own expression: builtins stay the host's
                namespace.update({name: _Proxy(judge, name, failures) for name in names if not hasattr(builtins, name)})
                exec(_compile_asserts(test, index), namespace)  # the dataset's own test text, on builtin values
            else:
                exec(compile(f"{test.get('prelude', '')}\n{test['check']}", f"test_{index}", "exec"), namespace)
                candidate = _Proxy(judge, test["entry_point"], failures)
                namespace[test["entry_point"]] = candidate
                namespace["check"](candidate)
    except CallFailed:
        pass
    except SandboxUnavailable:
        raise
    except Exception as exc:  # AssertionError, or the test's own code raising on a wrong value
        if not failures:
            return Verdict(index, False, "failed", f"test {index}: {type(exc).__name__} {str(exc)[:200]}")
    if failures:
        first = failures[0]
        return Verdict(
            index, False, first.outcome, f"test {index}: {first.outcome} {first.error or first.stderr.strip()[-300:]}"
        )
    return Verdict(index, True, "ok")


def run_tests(
    solution: str, tests: Sequence[Any], limits: Limits | None = None, total_wall_s: float = 60.0
) -> tuple[float, Judged]:
    """Judge `solution` against `tests`: the share of tests passed (in [0, 1]) and the account.

    Each test is a string of assert statements (evaluated on the host, each call of a solution
    function in it made in the sandbox), {call, args, kwargs, expected} (values in the tagged form
    of rlbridge.engine._sandbox_init.encode_value; strict_equal on the host), {stdin, stdout} (the
    solution as a program; normalise_output on the host) or {check, entry_point, prelude} (a
    HumanEval check(candidate), run on the host with a candidate that calls into the sandbox).
    Every call is a fresh process; LIMIT_RULE says how limits count. A malformed test raises
    ValueError (the row's fault, not the solution's)."""
    started = time.monotonic()
    kinds = [test_kind(t) for t in tests]
    for i, (test, kind) in enumerate(zip(tests, kinds)):
        if kind == "assert":
            _compile_asserts(test, i)
    try:
        names = solution_names(solution)
    except (SyntaxError, ValueError) as exc:
        verdicts = [
            Verdict(i, False, "failed", f"solution does not parse: SyntaxError {exc}") for i in range(len(tests))
        ]
        return 0.0, Judged(0.0, verdicts, [], time.monotonic() - started)
    verdicts = []
    with Judge(solution, limits, total_wall_s) as judge:
        for i, (test, kind) in enumerate(zip(tests, kinds)):
            verdicts.append(_judge_one(judge, names, test, kind, i))
    assert [v.index for v in verdicts] == list(range(len(tests)))  # exactly one verdict per test
    score = sum(v.passed for v in verdicts) / len(tests) if tests else 0.0
    score = min(1.0, max(0.0, score))
    return score, Judged(score, verdicts, judge.calls, time.monotonic() - started)
