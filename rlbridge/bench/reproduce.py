"""`rlbridge reproduce RUN_DIR`: rerun a finished run in an engine environment that matches its
manifest, into a new directory, and say whether the two agree step by step.

The verdict is one of
* identical: every step's metrics are equal (timings, throughput and memory are not compared);
* same within noise: they differ, but no metric's curve is told apart from the original's by the
  bench's statistics (rlbridge.bench.report.verdict: Welch's t-test, here on the per-step values
  of each run, the steps standing in for the bench's seeds);
* different: some metric's curve differs, or a step is missing.
The last two name the first step and metric that differ, and every difference between the two
manifests (rlbridge.run.manifest.differences) that may explain it.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from rlbridge.errors import RLBridgeError
from rlbridge.run import manifest as manifests

# measured, not computed: they differ between any two runs (as do durations elsewhere, named *_s:
# async/rollout_idle_s, rollout/backpressure_s)
UNCOMPARED_PREFIXES = ("timing/", "throughput/", "memory/")
DURATION_SUFFIX = "_s"


def compared(metric: str) -> bool:
    """Whether two runs that computed the same thing must agree on `metric` (not a time or a rate)."""
    return metric != "step" and not metric.startswith(UNCOMPARED_PREFIXES) and not metric.endswith(DURATION_SUFFIX)


NOISE_METRIC = "reward/mean"
REPORT_FILE = "reproduce.json"


class ReproduceError(RLBridgeError):
    """The run cannot be reproduced here (no matching engine environment, no manifest...)."""


def candidate_pythons(recorded: str | None) -> list[Path | None]:
    """Where a matching environment may be: the one the run used, this process's, every engine
    environment under ~/.cache/rlbridge/envs. None stands for this process."""
    from rlbridge.envs.create import list_envs
    from rlbridge.engine.environments import env_python

    found: list[Path | None] = []
    if recorded and Path(recorded).exists() and Path(recorded) != Path(sys.executable):
        found.append(Path(recorded))
    found.append(None)
    for env in list_envs():
        python = env_python(Path(env["path"]))
        if env.get("complete") and python.exists() and python not in found:
            found.append(python)
    return found


def environment_differences(manifest: dict[str, Any], python: Path | None) -> list[str]:
    """What in the environment of `python` (None: this process's) differs from the manifest's: its
    Python version, then every package (`package torch: 2.0.1 -> 2.13.0`)."""
    from rlbridge.envs.provenance import package_set, site_dirs

    wanted = manifest["engine_env"]
    diffs = manifests.package_differences(wanted["packages"], package_set(site_dirs(python)))
    version = manifests._env_python_version(python)
    if version != wanted.get("python_version"):
        diffs.insert(0, f"python {wanted.get('python_version')} -> {version}")
    return diffs


def _shown(diffs: list[str]) -> str:
    return "; ".join(diffs[:12]) + (f"; and {len(diffs) - 12} more" if len(diffs) > 12 else "")


def find_environment(manifest: dict[str, Any]) -> Path | None:
    """The Python of an environment whose package set and Python version are the manifest's (None:
    this process's). Raises ReproduceError naming the differences to the closest one when none matches."""
    wanted = manifest["engine_env"]
    closest: tuple[int, str, list[str]] | None = None
    for python in candidate_pythons(wanted.get("python")):
        diffs = environment_differences(manifest, python)
        if not diffs:
            return python
        where = str(python) if python else sys.executable
        if closest is None or len(diffs) < closest[0]:
            closest = (len(diffs), where, diffs)
    assert closest is not None
    _, where, diffs = closest
    raise ReproduceError(
        f"no engine environment here matches the run's manifest ({len(wanted['packages'])} packages, "
        f"sha256 {wanted.get('packages_sha256', '')[:12]}); the closest, {where}, differs: {_shown(diffs)}. Install "
        "exactly "
        f"manifest.json's engine_env.packages into an environment (or let `rlbridge reproduce` rebuild one: "
        f"without --no-rebuild) and run reproduce again"
    )


def rebuild_spec(manifest: dict[str, Any]) -> str:
    """The engine recipe (compat_matrix/engines.yaml) to start a rebuild from: the label of the
    environment the run used (e.g. trl 1.16.0-vllm), else the engine's recorded version."""
    job = manifest["job"]
    engine, version = job["backend"], job.get("engine_version")
    used = Path(manifest["engine_env"].get("python") or "").parent.parent.name  # <envs>/<engine>-<label>/bin/python
    if used.startswith(f"{engine}-"):
        version = used[len(engine) + 1 :].split(REBUILT_MARK)[0]
    if not version:
        raise ReproduceError(f"the manifest names no {engine} version (job.engine_version): nothing to rebuild from")
    return f"{engine}=={version}"


REBUILT_MARK = "-reproduce-"  # <envs>/<engine>-<label>-reproduce-<packages sha256>: environments rebuilt here


def rebuild_environment(manifest: dict[str, Any], echo=print) -> Path:
    """Build an engine environment for the manifest through the environment recipes (rlbridge.envs.create,
    beside the existing ones, which it never touches), then pin every distribution to the manifest's
    version. Returns its Python; raises ReproduceError naming what still differs when it cannot."""
    from rlbridge.envs.create import EnvError, create, pin_packages
    from rlbridge.engine.environments import env_python, envs_dir

    wanted = manifest["engine_env"]
    here = manifests._env_python_version(None)  # a rebuilt environment runs this Python (rlbridge.envs.create)
    if wanted.get("python_version") and wanted["python_version"] != here:
        raise ReproduceError(
            f"cannot rebuild the run's environment: it ran Python {wanted['python_version']}, and an "
            f"environment built here runs this one's, {here}. Run reproduce with a Python "
            f"{wanted['python_version']}"
        )
    spec = rebuild_spec(manifest)
    engine, _, label = spec.partition("==")
    path = envs_dir() / f"{engine}-{label}{REBUILT_MARK}{wanted.get('packages_sha256', 'unknown')[:12]}"
    echo(
        f"no engine environment matches the manifest: building {path} from the {spec} recipe, then pinning the "
        "manifest's versions"
    )
    try:
        create(spec, echo=echo, path=path)
        pin_packages(path, wanted["packages"], echo=echo)
    except EnvError as err:
        raise ReproduceError(f"cannot rebuild the run's environment ({spec}) at {path}: {err}") from err
    python = env_python(path)
    diffs = environment_differences(manifest, python)
    if diffs:
        raise ReproduceError(
            f"the environment rebuilt at {path} from the {spec} recipe still differs from the run's "
            f"manifest: {_shown(diffs)}. Install those versions there (or drop them) and run reproduce again"
        )
    return python


def rerun_dir(run_dir: Path) -> Path:
    n = 1
    while (candidate := run_dir.with_name(f"{run_dir.name}-reproduce{'' if n == 1 else f'-{n}'}")).exists():
        n += 1
    return candidate


def reproduce(
    run_dir: Path | str,
    output: Path | str | None = None,
    progress: bool | None = False,
    rebuild: bool = True,
    echo=print,
) -> dict[str, Any]:
    """Rerun RUN_DIR's job into `output` (default RUN_DIR-reproduce) and compare; returns the report
    (also written to the new directory as reproduce.json). With no matching environment, `rebuild`
    builds one (rebuild_environment); without it, or when that fails, ReproduceError names the differences."""
    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import train

    run_dir = Path(run_dir)
    if not (run_dir / manifests.MANIFEST_FILE).exists():
        raise ReproduceError(
            f"{run_dir}: no {manifests.MANIFEST_FILE} (the run predates run manifests, or this is not a run directory)"
        )
    original = manifests.read(run_dir)
    try:
        python = find_environment(original)
    except ReproduceError as refused:
        if not rebuild:
            raise
        try:
            python = rebuild_environment(original, echo=echo)
        except ReproduceError as failed:
            raise ReproduceError(f"{failed} (before rebuilding: {refused})") from failed
    new_dir = Path(output) if output is not None else rerun_dir(run_dir)
    if new_dir.resolve() == run_dir.resolve():
        raise ReproduceError("--output: the rerun needs a directory of its own, not the original run's")
    config = load_config(run_dir / "config.yaml", [])
    config.output_dir = str(new_dir)
    config.checkpoint.dir = None  # the rerun's own (resolve puts it under output_dir)
    config.checkpoint.resume = False
    config.engine_env = "current" if python is None else str(python)
    train(config, progress=progress)
    rerun = manifests.read(new_dir)
    report = {
        "original": str(run_dir),
        "rerun": str(new_dir),
        **compare(read_metrics(run_dir), read_metrics(new_dir)),
        "manifest_differences": manifests.differences(original, rerun),
    }
    (new_dir / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n")
    return report


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def compare(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any]:
    """Step by step: the verdict, the first (step, metric) that differs with both values, and the
    noise statistics on reward/mean when they are not identical."""
    from rlbridge.bench.report import verdict

    by_step_a = {row["step"]: row for row in a}
    by_step_b = {row["step"]: row for row in b}
    first: dict[str, Any] | None = None
    for step in sorted(set(by_step_a) | set(by_step_b)):
        ra, rb = by_step_a.get(step), by_step_b.get(step)
        if ra is None or rb is None:
            first = {
                "step": step,
                "metric": "(step)",
                "original": "present" if ra else "missing",
                "rerun": "present" if rb else "missing",
            }
            break
        for metric in sorted(set(ra) | set(rb)):
            if not compared(metric):
                continue
            if not _equal(ra.get(metric), rb.get(metric)):
                first = {"step": step, "metric": metric, "original": ra.get(metric), "rerun": rb.get(metric)}
                break
        if first:
            break
    out: dict[str, Any] = {"steps": [len(a), len(b)], "first_difference": first}
    if first is None:
        out["verdict"] = "identical" if a else "nothing to compare (no steps)"
        return out
    # the bench's test, per metric, on the per-step values of each run (steps stand in for seeds)
    metrics = sorted({m for row in a + b for m, v in row.items() if compared(m) and isinstance(v, (int, float))})
    tests = {}
    for metric in metrics:
        tests[metric] = verdict([row.get(metric) for row in a], [row.get(metric) for row in b])
    differing = [m for m, t in tests.items() if t["verdict"].startswith("differs")]
    shown = tests.get(differing[0] if differing else NOISE_METRIC) or next(
        iter(tests.values()), {"verdict": "no metrics"}
    )
    out["statistics"] = {
        **shown,
        "metric": differing[0] if differing else NOISE_METRIC,
        "on": "the per-step values of each run",
        "differing_metrics": differing,
    }
    noise = len(a) == len(b) and not differing
    out["verdict"] = "same within noise" if noise else "different"
    return out


def _equal(x: Any, y: Any) -> bool:
    if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
        return True
    return x == y


def describe(report: dict[str, Any]) -> str:
    """The report as a few lines for the console."""
    lines = [
        f"{report['verdict']}: {report['original']} and its rerun {report['rerun']} ({report['steps'][0]} and "
        f"{report['steps'][1]} steps)"
    ]
    first = report.get("first_difference")
    if first:
        lines.append(
            f"first difference: step {first['step']}, {first['metric']}: {first['original']} (original) vs "
            f"{first['rerun']} (rerun)"
        )
    stats = report.get("statistics")
    if stats and stats.get("p") is not None:
        lines.append(f"{stats['metric']} per step: {stats['verdict']} (p={stats['p']:.3g}, {stats['method']})")
    diffs = report.get("manifest_differences") or []
    if diffs:
        lines.append("the manifests differ in:")
        lines += [f"  {d}" for d in diffs]
    elif report["verdict"] != "identical":
        lines.append(
            "the manifests agree in everything recorded (source, packages, patches, data, models, seeds, hardware)"
        )
    return "\n".join(lines)
