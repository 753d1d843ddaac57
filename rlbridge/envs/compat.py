"""The compatibility matrix runner: `rlbridge compat run`.

For every cell of compat_matrix/matrix.yaml (engine, version or environment label, tests), it creates
the engine environment, runs the conformance suite inside it, and writes compat_matrix/results.json
and the generated table compat_matrix/RESULTS.md.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import yaml

from rlbridge import __version__
from rlbridge.envs.create import REPO_ROOT, create, env_python, has_cuda
from rlbridge.errors import RLBridgeError

MATRIX_FILE = REPO_ROOT / "compat_matrix" / "matrix.yaml"
RESULTS_DIR = REPO_ROOT / "compat_matrix"


def _matrix_file() -> Path:
    return Path(os.environ.get("RLBRIDGE_MATRIX") or MATRIX_FILE)


def results_dir() -> Path:
    """Where results.json and RESULTS.md go (RLBRIDGE_COMPAT_RESULTS overrides, e.g. for tests)."""
    return Path(os.environ.get("RLBRIDGE_COMPAT_RESULTS") or RESULTS_DIR)

# What each test kind runs inside the engine environment (pytest arguments, from the repo root).
TEST_KINDS = {
    "translate": ["tests/conformance", "tests/engines", "-m", "not engine"],
    "e2e-cpu": ["tests/conformance", "tests/engines", "-m", "engine"],
    "e2e-cpu-vllm": ["tests/test_trl_vllm.py", "-m", "engine"],
    "e2e-gpu": ["tests/conformance", "tests/engines", "-m", "engine"],
}


def load_matrix(path: Path | None = None) -> list[dict[str, Any]]:
    path = path or _matrix_file()
    cells = yaml.safe_load(path.read_text())["cells"]
    for cell in cells:
        unknown = set(cell["tests"]) - set(TEST_KINDS)
        if unknown:
            raise RLBridgeError(f"{path}: cell {cell['engine']}=={cell['version']} has unknown tests {sorted(unknown)}")
    return cells


def run_matrix(engine: str | None = None, version: str | None = None, echo=print) -> list[dict[str, Any]]:
    cells = [c for c in load_matrix() if (engine is None or c["engine"] == engine) and (version is None or str(c["version"]) == version)]
    if not cells:
        raise RLBridgeError(f"no matrix cell matches engine={engine} version={version} (see {_matrix_file()})")
    results = _load_results()
    for cell in cells:
        label = f"{cell['engine']}=={cell['version']}"
        echo(f"== {label}")
        try:
            env = create(label, echo=lambda m: echo("   " + m))
            env_error = None
        except RLBridgeError as exc:
            env, env_error = None, str(exc).splitlines()[0]
        for test in cell["tests"]:
            if env_error:
                outcome = {"status": "fail", "reason": f"environment: {env_error}"}
            elif test == "e2e-gpu" and not has_cuda():
                outcome = {"status": "skip", "reason": "no NVIDIA GPU on this machine"}
            else:
                outcome = _run_tests(env, test)
            outcome.update(engine=cell["engine"], version=str(cell["version"]), test=test,
                           date=dt.date.today().isoformat(), rlbridge=__version__)
            echo(f"   {test}: {outcome['status']}" + (f" ({outcome['reason']})" if outcome.get("reason") else ""))
            results[f"{cell['engine']}|{cell['version']}|{test}"] = outcome
        _save(results)
    return [results[f"{c['engine']}|{c['version']}|{t}"] for c in cells for t in c["tests"]]


def _run_tests(env: Path, test: str) -> dict[str, Any]:
    report = env / ".rlbridge" / f"junit-{test}.xml"
    cmd = [str(env_python(env)), "-m", "pytest", "-q", "-p", "no:cacheprovider", *TEST_KINDS[test], f"--junitxml={report}"]
    started = time.time()
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    elapsed = round(time.time() - started, 1)
    (env / ".rlbridge" / f"pytest-{test}.log").write_text(proc.stdout + proc.stderr)
    if not report.exists():
        return {"status": "fail", "reason": f"pytest exited {proc.returncode} without a report", "seconds": elapsed}
    suite = ET.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    reasons, failures = [], []
    for case in suite.iter("testcase"):
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                (reasons if tag == "skipped" else failures).append(f"{case.get('name')}: {_root_cause(node)[:200]}")
    if counts["failures"] or counts["errors"]:
        status, reason = "fail", "; ".join(failures)[:400]
    elif passed == 0:
        status, reason = "skip", "; ".join(reasons)[:400] or "no test selected"
    else:
        status, reason = "pass", ""
    return {"status": status, "reason": reason, "passed": passed, **counts, "seconds": elapsed}


def _root_cause(node) -> str:
    """The first error line pytest printed ('E   SomeError: ...'), else the message's first line."""
    for line in (node.text or "").splitlines():
        stripped = line[1:].strip() if line.startswith("E ") else ""
        if stripped and ("Error" in stripped.split(":")[0] or "Exception" in stripped.split(":")[0]):
            return stripped
    message = node.get("message") or node.tag
    return message.splitlines()[0] if message else node.tag


def _load_results() -> dict[str, Any]:
    path = results_dir() / "results.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _save(results: dict[str, Any]) -> None:
    results_dir().mkdir(parents=True, exist_ok=True)
    (results_dir() / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    (results_dir() / "RESULTS.md").write_text(render(results))


def render(results: dict[str, Any]) -> str:
    tests = [t for t in TEST_KINDS if any(r["test"] == t for r in results.values())]
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for r in results.values():
        rows.setdefault((r["engine"], r["version"]), {})[r["test"]] = r
    icon = {"pass": "pass", "fail": "**FAIL**", "skip": "skip"}
    lines = [
        "# Compatibility matrix",
        "",
        "Generated by `rlbridge compat run` (`make compat`); do not edit by hand. Each cell ran the",
        "conformance suite (tests/conformance) inside its own engine environment, created from",
        "compat_matrix/engines.yaml. translate: plans validate with the engine's own config code,",
        "capability table complete, rejected knobs error. e2e-cpu: a 2-step run through the engine's own",
        "trainer calls the rlbridge reward shim and streams canonical metrics; checkpoints are reported and a",
        "resumed run goes on from the last one; where the backend runs environment plugins, a 2-step multi-turn",
        "run goes through its own multi-turn machinery. e2e-gpu: the same on a GPU.",
        "",
        f"Machine of the last run: {platform.system()} {platform.machine()}, Python {platform.python_version()}, "
        f"{'CUDA' if has_cuda() else 'no GPU'}.",
        "",
        "| engine | version | " + " | ".join(tests) + " | date | rlbridge |",
        "|---|---|" + "---|" * len(tests) + "---|---|",
    ]
    for (engine, version), by_test in sorted(rows.items(), key=lambda kv: (kv[0][0], _version_key(kv[0][1]))):
        cells = []
        for t in tests:
            r = by_test.get(t)
            cells.append("" if r is None else icon[r["status"]] + (f" ({r['passed']})" if r.get("passed") else ""))
        any_r = next(iter(by_test.values()))
        lines.append(f"| {engine} | {version} | " + " | ".join(cells) + f" | {any_r['date']} | {any_r['rlbridge']} |")
    notes = [(k, r) for k, r in sorted(results.items()) if r["status"] != "pass" and r.get("reason")]
    if notes:
        lines += ["", "## Why not pass", ""]
        lines += [f"- {r['engine']} {r['version']} {r['test']}: {r['status']}: {r['reason']}" for _, r in notes]
    lines += ["", "Numbers in parentheses: tests passed in the cell."]
    return "\n".join(lines) + "\n"


def _version_key(version: str):
    parts = version.split("-")[0].split(".")
    return tuple(int(p) if p.isdigit() else 0 for p in parts), version
