"""Start-up time of the `rlbridge` command: `rlbridge --help` and `rlbridge plan configs/quickstart.yaml`
(targets 0.2 s and 0.35 s of wall time on a quiet machine, issue 31).

Each command runs --runs times in a fresh process (the commands interleaved, after one warm-up run of
each that also writes the bytecode cache), measured from outside: wall time, and CPU time (user +
system of the process, from wait4), which is far steadier than wall time when other jobs load the
machine. Prints the medians, min and max, the 1-minute load average before and after, and the CPU
count: on a loaded machine only the CPU column is comparable with a quiet machine's wall time.

Bytecode: an installed rlbridge runs from its .pyc files. Where PYTHONDONTWRITEBYTECODE is set (as in
some sandboxes), every run would compile rlbridge from source; the script then points
PYTHONPYCACHEPREFIX at a private cache so the runs measure what a user's machine does.

--importtime N: also prints, for each command, the N imports with the largest cumulative time of one
run under `python -X importtime` (what to make lazy next).

Usage: python benchmarks/startup.py [--runs 15] [--importtime 15] [--python PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMANDS = {
    "rlbridge --help": (["--help"], 0.2),
    "rlbridge plan configs/quickstart.yaml": (["plan", "configs/quickstart.yaml"], 0.35),
}


def run_once(python: str, args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s) of one `python -m rlbridge ARGS`."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [python, "-m", "rlbridge", *args], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"rlbridge {' '.join(args)} failed ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def slowest_imports(python: str, args: list[str], env: dict[str, str], count: int) -> list[tuple[int, str]]:
    """The `count` imports with the largest cumulative time (us) in one run."""
    res = subprocess.run(
        [python, "-X", "importtime", "-m", "rlbridge", *args], cwd=REPO, env=env, capture_output=True, text=True
    )
    rows = []
    for line in res.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line.split("|")
            if cumulative.strip().isdigit():
                rows.append((int(cumulative), name.rstrip()))
    return sorted(rows, reverse=True)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--importtime", type=int, default=0, metavar="N")
    parser.add_argument("--python", default=sys.executable, help="the Python that has rlbridge installed")
    opts = parser.parse_args()

    env = {**os.environ, "COLUMNS": "100"}
    if env.get("PYTHONDONTWRITEBYTECODE"):
        env.pop("PYTHONDONTWRITEBYTECODE")
        env.setdefault("PYTHONPYCACHEPREFIX", str(Path(tempfile.gettempdir()) / "rlbridge-startup-pycache"))
    for args, _ in COMMANDS.values():  # warm-up: page cache and bytecode
        run_once(opts.python, args, env)
    load_before = os.getloadavg()[0]
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in COMMANDS}
    for _ in range(opts.runs):
        for name, (args, _) in COMMANDS.items():
            samples[name].append(run_once(opts.python, args, env))
    load_after = os.getloadavg()[0]

    print(
        f"{opts.runs} runs each; load average (1 min) {load_before:.2f} before, {load_after:.2f} after, "
        f"{os.cpu_count()} CPUs; {opts.python}"
    )
    print("| command | wall median (s) | wall min-max (s) | CPU median (s) | target (s) |")
    print("|---|---|---|---|---|")
    for name, (_, target) in COMMANDS.items():
        walls = [w for w, _ in samples[name]]
        cpus = [c for _, c in samples[name]]
        print(
            f"| `{name}` | {statistics.median(walls):.3f} | {min(walls):.3f}-{max(walls):.3f} | "
            f"{statistics.median(cpus):.3f} | {target} |"
        )
    if opts.importtime:
        for name, (args, _) in COMMANDS.items():
            print(f"\nslowest imports of `{name}` (cumulative ms, one run):")
            for cumulative, module in slowest_imports(opts.python, args, env, opts.importtime):
                print(f"  {cumulative / 1000:8.1f}  {module}")


if __name__ == "__main__":
    main()
