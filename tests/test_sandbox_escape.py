"""The code sandbox against programs that try to get out: each attempt is contained, ends within its
limit plus a small margin, leaves no process behind, and gets the right outcome.

Each program prints what it managed to do; a test fails if an attempt worked. Needs root and
`unshare` (util-linux); skipped elsewhere with the reason.
"""

from __future__ import annotations

import os
import socket
import textwrap
import threading
import time
from pathlib import Path

from rlbridge.engine.sandbox import Limits, run_python, run_tests
from tests.conftest import needs_sandbox

pytestmark = needs_sandbox
MARGIN = 3.0  # seconds over a limit that an attempt may take to be stopped (loaded 2-core CI machine)


def processes_of(uid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("Uid:") and int(line.split()[1]) == uid:
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def run(code: str, **limits):
    started = time.monotonic()
    result = run_python({"main.py": textwrap.dedent(code)}, limits=Limits(**limits))
    took = time.monotonic() - started
    # the kernel reaps a dead PID namespace's processes asynchronously: give it a moment (a fork
    # bomb's hundreds on a loaded machine), never more than 2 s
    deadline = time.monotonic() + 2.0
    while processes_of(result.uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_of(result.uid) == [], "a sandboxed process outlived the call"
    return result, took


def test_network_loopback_is_unreachable():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(3)
    port = listener.getsockname()[1]
    accepted = []
    thread = threading.Thread(target=lambda: accepted.append(_accept(listener)))
    thread.start()
    result, took = run(f"""
        import socket
        for host in ("127.0.0.1", "localhost", "::1"):
            try:
                socket.create_connection((host, {port}), timeout=2)
                print("CONNECTED", host)
            except OSError as exc:
                print("blocked", host, type(exc).__name__)
    """)
    thread.join()
    listener.close()
    assert "CONNECTED" not in result.stdout and result.stdout.count("blocked") == 3, result
    assert accepted == [None]
    assert result.outcome == "ok" and took < 10 + MARGIN


def _accept(listener):
    try:
        conn, _ = listener.accept()
        conn.close()
        return "accepted"
    except OSError:
        return None


def test_public_network_and_dns_fail_fast():
    result, took = run("""
        import socket
        for addr in [("1.1.1.1", 53), ("8.8.8.8", 443), ("93.184.216.34", 80)]:
            try:
                socket.create_connection(addr, timeout=3)
                print("CONNECTED", addr)
            except OSError as exc:
                print("blocked", type(exc).__name__)
        try:
            print("RESOLVED", socket.getaddrinfo("pypi.org", 443))
        except OSError as exc:
            print("dns blocked", type(exc).__name__)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.sendto(b"x", ("8.8.8.8", 53))
            print("SENT UDP")
        except OSError:
            print("udp blocked")
    """)
    assert "CONNECTED" not in result.stdout and "RESOLVED" not in result.stdout and "SENT" not in result.stdout, result
    assert result.stdout.count("blocked") == 5
    assert took < 2 + MARGIN  # unreachable at once, not a timeout


def test_writes_outside_scratch_fail_and_scratch_is_private(tmp_path):
    host_file = tmp_path / "host.txt"
    result, took = run(f"""
        import os
        for path in ["/etc/rlb-escape", "/usr/rlb-escape", "/rlb-escape", "{host_file}", "/opt/rlb-escape",
                     "/proc/rlb-escape", "/dev/rlb-escape"]:
            try:
                with open(path, "w") as fh:
                    fh.write("x")
                print("WROTE", path)
            except OSError as exc:
                print("blocked", type(exc).__name__)
        with open("/tmp/scratch/mine.txt", "w") as fh:
            fh.write("scratch is writable")
        print("scratch ok", os.getcwd())
    """)
    assert "WROTE" not in result.stdout and result.stdout.count("blocked") == 7, result
    assert "scratch ok /tmp/scratch" in result.stdout
    assert not host_file.exists() and not Path("/etc/rlb-escape").exists() and not Path("/rlb-escape").exists()
    assert not Path("/tmp/scratch/mine.txt").exists()  # the scratch tmpfs went away with the namespace


def test_host_secrets_and_environment_are_out_of_reach(tmp_path, monkeypatch):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-FILE")
    home_secret = Path("/root/.rlbridge-sandbox-test-secret")
    repo_file = Path(__file__).resolve().parents[1] / "pyproject.toml"  # the checkout on the host
    home_secret.write_text("TOPSECRET-HOME")
    monkeypatch.setenv("RLB_TEST_TOKEN", "TOPSECRET-ENV")
    try:
        result, _ = run(f"""
            import os, glob
            print(sorted(os.environ))
            for path in ["{secret}", "{home_secret}", "/etc/shadow", "/proc/1/environ", "/proc/self/environ",
                         "{repo_file}", "/root/.bash_history"]:
                try:
                    print("READ", path, open(path, "rb").read()[:200])
                except OSError as exc:
                    print("blocked", type(exc).__name__)
            print("pids", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
            print("uid", os.getuid(), os.getgid(), os.getgroups())
        """)
    finally:
        home_secret.unlink()
    assert "TOPSECRET" not in result.stdout + result.stderr, result
    assert "['HOME', 'LANG', 'PATH', 'PYTHONDONTWRITEBYTECODE']" in result.stdout
    pids = eval(result.stdout.split("pids ")[1].splitlines()[0])
    assert max(pids) < 10  # its own PID namespace: the host's processes are not there
    uid_line = result.stdout.split("uid ")[1].splitlines()[0].split()
    assert int(uid_line[0]) == result.uid != 0


def test_fork_bomb_is_contained():
    result, took = run(
        """
        import os
        n = 0
        while True:
            try:
                if os.fork() == 0:
                    while True:
                        pass
                n += 1
            except OSError:
                pass
    """,
        wall_s=3,
        cpu_s=2,
        nproc=16,
    )
    assert result.outcome in ("timeout", "cpu_limit") and took < 3 + MARGIN, (result, took)


def test_memory_bomb_is_contained():
    result, took = run(
        """
        chunks = []
        while True:
            chunks.append(bytearray(50 * 2**20))
    """,
        memory_mb=256,
        wall_s=5,
    )
    assert result.outcome == "memory_limit" and took < 5 + MARGIN, result


def test_infinite_loop_hits_the_cpu_limit():
    result, took = run("while True: pass", cpu_s=1, wall_s=10)
    assert result.outcome == "cpu_limit" and took < 1 + MARGIN, (result, took)


def test_sleeping_program_hits_the_wall_clock():
    result, took = run("import time; time.sleep(60)", wall_s=1)
    assert result.outcome == "timeout" and 1 <= took < 1 + MARGIN


def test_huge_output_is_capped():
    result, took = run("while True: print('x' * 10000)", output_bytes=100_000, wall_s=10)
    assert result.outcome == "output_limit" and len(result.stdout) <= 100_000 and took < 2 + MARGIN, (
        result.outcome,
        took,
    )


def test_huge_file_is_capped():
    result, _ = run(
        """
        with open("big", "wb") as fh:
            fh.write(b"x" * (64 * 2**20))
    """,
        fsize_mb=4,
    )
    assert result.outcome in ("failed", "killed") and "File too large" in result.stderr or result.returncode != 0


def test_a_process_left_running_is_killed():
    result, took = run(
        """
        import os, subprocess, time
        subprocess.Popen(["sleep", "1000"], start_new_session=True)
        if os.fork() == 0:
            os.setsid()
            time.sleep(1000)
        print("parent leaves")
    """,
        wall_s=5,
    )
    assert result.outcome == "ok" and "parent leaves" in result.stdout and took < 2 + MARGIN
    # run() asserted that no process of the sandbox's uid is left


def test_signalling_the_parent_and_the_host_fails():
    host_pid = os.getpid()
    result, _ = run(f"""
        import os, signal
        for pid in (os.getppid(), 1, {host_pid}, -1):
            try:
                os.kill(pid, signal.SIGKILL)
                print("SIGNALLED", pid)
            except OSError as exc:
                print("blocked", pid, type(exc).__name__)
        print("still here")
    """)
    assert "still here" in result.stdout, result
    assert f"SIGNALLED {host_pid}" not in result.stdout and "SIGNALLED 1" not in result.stdout
    # kill(-1) may only reach the program's own processes; the host test process is alive
    assert os.getpid() == host_pid


def test_subprocesses_stay_inside():
    result, _ = run("""
        import subprocess
        out = subprocess.run(["/bin/sh", "-c", "id -u; echo x > /usr/rlb-sub 2>&1 || echo write-blocked; "
                              "cat /etc/shadow >/dev/null 2>&1 || echo read-blocked; ls /root/.ssh 2>&1 | head -1"],
                             capture_output=True, text=True)
        print(out.stdout)
    """)
    lines = result.stdout.split()
    assert int(lines[0]) == result.uid
    assert "write-blocked" in result.stdout and "read-blocked" in result.stdout
    assert not Path("/usr/rlb-sub").exists()


def test_code_against_tests_scores_passed_fraction_even_after_a_hang():
    # every call is a process of its own: the hang of one test fails it (cpu_limit), the rest count
    score, judged = run_tests(
        "def f(x):\n    while x < 0:\n        pass\n    return x + 1\n",
        ["assert f(1) == 2", "assert f(2) == 4", "assert f(-1) == 0", "assert f(3) == 4"],
        Limits(cpu_s=1, wall_s=5),
    )
    assert score == 0.5 and [v.outcome for v in judged.verdicts] == ["ok", "failed", "cpu_limit", "ok"]
    score, judged = run_tests("def f(x) return", ["assert f(1) == 2"])
    assert score == 0.0 and judged.outcome == "failed" and "SyntaxError" in judged.stderr


def test_throughput_of_a_trivial_program():
    started = time.monotonic()
    for _ in range(10):
        assert run_python({"main.py": "print(1)"}).outcome == "ok"
    assert (time.monotonic() - started) / 10 < 1.0  # the benchmark measures the real rate
