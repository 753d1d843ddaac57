"""`rlbridge bench SPEC`: A/B runs of one canonical job on several engines, versions or settings.

A bench spec names a base config, the arms (backend, engine version and `--set` overrides each)
and the seeds. Before anything runs, every arm x seed is resolved to a canonical config, and arms
that differ in anything their overrides do not declare are refused. Then every arm x seed is one
real `rlbridge train` (or, for `kind: native`, the engine's own entry point) in a fresh process,
one at a time, measured from outside the same way for every engine: process-tree peak memory,
start-up time, the arrival time of every step. A finished run is kept under a key of its resolved
config, engine environment and rlbridge version, so an interrupted bench resumes where it stopped.
The statistics, report.md, results.json and plots are in rlbridge.bench.report.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rlbridge import __version__
from rlbridge.contract.config import RunConfig
from rlbridge.errors import ConfigError, RLBridgeError
from rlbridge.helpers import flatten, process_tree_rss
from rlbridge.run.loading import format_validation_error, load_config

# Keys that differ per run by construction, never a difference between arms.
PER_RUN_KEYS = ("run_name", "output_dir", "checkpoint.dir", "training.seed")


class ArmSpec(BaseModel):
    """One arm of a bench: the base config plus this arm's declared overrides."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, description="Label in the report (default: the arm written as a string).")
    kind: Literal["rlbridge", "native"] = Field(
        "rlbridge",
        description="rlbridge: `rlbridge train`; native: the same plan through the engine's own entry point, "
        "without rlbridge around it (to measure rlbridge's overhead).",
    )
    backend: str | None = Field(None, description="backend of this arm (declares `backend` as a difference).")
    engine_version: str | None = Field(None, description="Engine version / environment label, e.g. 0.9.1.")
    set: list[str] = Field(
        default_factory=list, description="`key=value` overrides; their keys are declared differences."
    )
    config: str | None = Field(
        None,
        description="Another base config for this arm (relative to the spec); it may differ only in declared keys.",
    )

    @classmethod
    def parse(cls, item: Any) -> "ArmSpec":
        """An arm written as a string: `trl`, `verl@0.9.1`, `verl rollout.engine=hf`, `native:trl`."""
        if not isinstance(item, str):
            return cls.model_validate(item)
        words = item.split()
        if not words:
            raise ConfigError("arms: an empty arm; write e.g. 'trl' or 'verl@0.9.1 rollout.engine=hf'")
        head, sets = words[0], words[1:]
        kind = "rlbridge"
        if head.startswith("native:"):
            kind, head = "native", head[len("native:") :]
        backend, _, version = head.partition("@")
        if "=" in backend:
            raise ConfigError(f"arms: '{item}' must start with a backend (e.g. 'trl {item}')")
        return cls(name=item, kind=kind, backend=backend, engine_version=version or None, set=sets)

    def label(self) -> str:
        if self.name:
            return self.name
        head = ("native:" if self.kind == "native" else "") + (self.backend or "base")
        head += f"@{self.engine_version}" if self.engine_version else ""
        return " ".join([head, *self.set])

    def declared(self) -> set[str]:
        keys = {item.partition("=")[0].strip() for item in self.set}
        if self.backend:
            keys.add("backend")
        if self.engine_version:
            keys.add("engine_version")
        return keys


class BenchSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    config: str = Field(..., description="The base canonical config (path relative to the spec file).")
    set: list[str] = Field(default_factory=list, description="Overrides applied to every arm (e.g. training.steps=60).")
    arms: list[ArmSpec] = Field(..., min_length=1, description="The arms to compare (strings or mappings).")
    seeds: list[int] = Field(
        default_factory=lambda: [0], min_length=1, description="training.seed values; every arm runs each."
    )
    target_reward: float | None = Field(
        None, description="Reward for time- and steps-to-target (first step with reward/mean >= it)."
    )
    reward_at: list[int] | None = Field(
        None,
        description="Steps at which mean reward is compared across arms (default: 25, 50, 75 and 100 % of the steps).",
    )
    window: int | None = Field(
        None,
        ge=1,
        description="Steps averaged for the reward at a step (s-window+1..s); default: a tenth of the steps.",
    )
    alpha: float = Field(
        0.05, gt=0, lt=1, description="Significance level of the pairwise verdicts (95 % intervals: 0.05)."
    )
    output_dir: str = Field("runs/bench/{name}", description="Bench directory ({name}: the spec file's stem).")

    @field_validator("arms", mode="before")
    @classmethod
    def _arms(cls, value: Any) -> Any:
        return [ArmSpec.parse(item) for item in value] if isinstance(value, list) else value


@dataclass
class RunJob:
    """One arm x seed, resolved."""

    arm: str
    arm_index: int
    kind: str
    seed: int
    config: RunConfig
    engine: str  # where it runs: "here:trl==1.16.0" or the engine environment's directory name
    key: str
    plan: dict[str, Any] = field(default_factory=dict)
    approximations: list[str] = field(default_factory=list)

    @property
    def dirname(self) -> str:
        slug = "".join(c if c.isalnum() or c in "._-" else "-" for c in self.arm).strip("-")[:40]
        return f"{self.arm_index:02d}-{slug}-seed{self.seed}-{self.key}"


def load_spec(path: str | Path) -> tuple[BenchSpec, Path]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"bench spec not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"bench spec {path}: YAML syntax error: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"bench spec {path}: the top level must be a mapping (config:, arms:, seeds:)")
    try:
        spec = BenchSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            f"bench spec {path}: " + format_validation_error(exc).removeprefix("invalid config: ")
        ) from exc
    labels = [arm.label() for arm in spec.arms]
    dup = {x for x in labels if labels.count(x) > 1}
    if dup:
        raise ConfigError(f"arms: two arms are both named '{sorted(dup)[0]}'; give one a name:")
    return spec, path


def bench_dir(spec: BenchSpec, spec_path: Path, output: str | Path | None) -> Path:
    return Path(output) if output else Path(spec.output_dir.replace("{name}", spec_path.stem))


def _covered(key: str, declared: set[str]) -> bool:
    return any(key == d or key.startswith(d + ".") or d.startswith(key + ".") for d in declared)


def arm_config(spec: BenchSpec, spec_path: Path, arm: ArmSpec, seed: int) -> RunConfig:
    base = spec_path.parent / (arm.config or spec.config)
    overrides = list(spec.set)
    if arm.backend:
        overrides.append(f"backend={arm.backend}")
    if arm.engine_version:
        overrides.append(f"engine_version={arm.engine_version}")
    overrides += list(arm.set) + [f"training.seed={seed}"]
    try:
        config = load_config(base, overrides)
    except ConfigError as exc:
        raise ConfigError(f"arm '{arm.label()}': {exc}") from exc
    if config.training.steps is None:
        raise ConfigError(f"arm '{arm.label()}': training.steps: a bench needs a step count (set training.steps)")
    return config


def differences(configs: dict[str, RunConfig]) -> dict[str, dict[str, Any]]:
    """Canonical keys whose values differ between arms: {key: {arm: value}}."""
    flat = {arm: flatten(cfg.model_dump(mode="json")) for arm, cfg in configs.items()}
    keys = sorted({k for f in flat.values() for k in f})
    out = {}
    for key in keys:
        if any(key == p or key.startswith(p + ".") for p in PER_RUN_KEYS):
            continue
        values = {arm: f.get(key, "<unset>") for arm, f in flat.items()}
        if len({json.dumps(v, sort_keys=True) for v in values.values()}) > 1:
            out[key] = values
    return out


def check_fairness(spec: BenchSpec, diffs: dict[str, dict[str, Any]]) -> None:
    """Refuse differences between two arms that neither arm declares."""
    arms = {arm.label(): arm for arm in spec.arms}
    for key, values in diffs.items():
        names = list(values)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                if values[a] == values[b]:
                    continue
                if not (_covered(key, arms[a].declared()) or _covered(key, arms[b].declared())):
                    raise ConfigError(
                        f"arms '{a}' and '{b}' differ in {key} ({values[a]!r} vs {values[b]!r}), which neither arm "
                        f"declares; use one base config, or declare it in an arm's set: ({key}=...)"
                    )


def run_key(config: RunConfig, engine: str, kind: str) -> str:
    """A finished run's identity: the resolved config, where it ran, the kind of run, rlbridge's version.
    Fields at their default value are left out, so that a knob added to rlbridge (whose default keeps
    the old behaviour) does not orphan finished runs; a changed default comes with a new version."""
    data = config.model_dump(mode="json", exclude_defaults=True)
    data.pop("run_name", None)
    data.pop("output_dir", None)
    data.get("checkpoint", {}).pop("dir", None)
    blob = json.dumps({"config": data, "engine": engine, "kind": kind, "rlbridge": __version__}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def engine_label(config: RunConfig, backend) -> str:
    from rlbridge.run.runner import choose_engine_python

    python = choose_engine_python(config, backend)
    if python is None:
        return f"here:{backend.distribution}=={backend.installed_version()}"
    return python.parent.parent.name if python.parent.name == "bin" else str(python)


def build_jobs(spec: BenchSpec, spec_path: Path, plugins=None) -> tuple[list[RunJob], dict[str, dict[str, Any]]]:
    """Resolve every arm x seed, check fairness and plans; nothing is started or written."""
    from rlbridge.contract.registry import get_plugin_manager
    from rlbridge.run.runner import prepare

    pm = plugins or get_plugin_manager()
    first = {arm.label(): arm_config(spec, spec_path, arm, spec.seeds[0]) for arm in spec.arms}
    diffs = differences(first)
    check_fairness(spec, diffs)
    for arm in spec.arms:
        if arm.kind == "native" and pm.backend(first[arm.label()].backend).native_arm is None:
            with_arm = sorted(name for name, r in pm.items["backend"].items() if r.item.native_arm)
            raise ConfigError(
                f"arm '{arm.label()}': kind native is available for {', '.join(with_arm)} "
                f"(not '{first[arm.label()].backend}')"
            )
    jobs = []
    # seed-major order: the arms alternate, so drift in machine load falls on every arm alike; every
    # other seed in reverse, so of two neighbouring arms (an rlbridge arm and its native arm) each runs
    # first in half the pairs (a run warms the page cache for the next)
    for n, seed in enumerate(spec.seeds):
        arms = list(enumerate(spec.arms))
        for index, arm in arms if n % 2 == 0 else reversed(arms):
            label = arm.label()
            config = arm_config(spec, spec_path, arm, seed)
            try:
                prepared = prepare(config, pm)
                engine = engine_label(prepared.config, prepared.backend)
            except RLBridgeError as exc:
                raise type(exc)(f"arm '{label}': {exc}") from exc
            if arm.kind == "native" and prepared.backend.native_arm_runs_here and not engine.startswith("here:"):
                raise ConfigError(
                    f"arm '{label}': kind native runs the engine installed here; {engine} is an engine environment"
                )
            key = run_key(prepared.config, engine, arm.kind)
            jobs.append(
                RunJob(
                    label,
                    index,
                    arm.kind,
                    seed,
                    config,
                    engine,
                    key,
                    prepared.plan.to_dict(),
                    prepared.plan.approximations,
                )
            )
    return jobs, diffs


# --- running -------------------------------------------------------------------------------


def _tree_cpu(proc) -> float:
    """CPU seconds (user + system) used so far by a process, its live descendants and those they reaped."""
    import psutil

    total = 0.0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


@contextlib.contextmanager
def _locked(locks: list[Path] | None, poll_s: float = 7.0):
    """Hold an exclusive flock on one of `locks` (the first that is free) for the duration; yields the wait (s).

    Several lock files are several slots: a machine that fits two engine runs at once is shared through
    two files, and each run of the bench takes whichever slot frees first (between runs it holds none).
    """
    if not locks:
        yield 0.0
        return
    import fcntl

    started = time.perf_counter()
    handles = [open(path, "a") for path in locks]
    held = None
    try:
        while held is None:
            for fh in handles:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | (fcntl.LOCK_NB if len(handles) > 1 else 0))
                except BlockingIOError:
                    continue
                held = fh
                break
            else:
                time.sleep(poll_s)
        yield time.perf_counter() - started
    finally:
        if held is not None:
            fcntl.flock(held, fcntl.LOCK_UN)
        for fh in handles:
            fh.close()


class _StepTail:
    """Reads new step lines of a metrics.jsonl as they appear and stamps their arrival time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.buffer = ""
        self.arrivals: list[tuple[int, float]] = []

    def poll(self, now: float) -> None:
        try:
            with open(self.path, "r", encoding="utf-8") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
                self.offset = fh.tell()
        except OSError:  # not written yet (or a directory: an engine log read after the run)
            return
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split("\n")
        for line in lines:
            if line.strip():
                with contextlib.suppress(ValueError, KeyError):
                    self.arrivals.append((int(json.loads(line)["step"]), now))


@dataclass
class RunCommand:
    """What run_one times: the command, the per-step JSONL it writes (its lines' arrival is stamped),
    extra environment, and for engine-native arms the mapping of that log to canonical names."""

    argv: list[str]
    metrics: Path
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    canonical: list[str] | None = None  # argv that writes <run>/metrics.jsonl from `metrics` (not timed)
    cleanup: list[Path] = field(default_factory=list)


def command_for(job: RunJob, run_dir: Path) -> RunCommand:
    """The command of one run, and the metrics.jsonl it writes."""
    out = run_dir / "run"
    if job.kind == "native":
        from rlbridge.contract.data import load_rows
        from rlbridge.contract.models import materialize_model
        from rlbridge.run.runner import resolve

        config = resolve(job.config)
        plan = json.loads(json.dumps(job.plan))
        # the canonical config this native run stands for (its key is computed from it, as for rlbridge runs)
        (run_dir / "config.in.yaml").write_text(
            yaml.safe_dump(job.config.model_dump(mode="json", exclude_unset=True), sort_keys=False)
        )
        rows = load_rows(config.data.train, config, "data.train")
        # the engine's own entry point, prepared in its environment by the adapter's module (Backend.native_arm)
        from rlbridge.contract.registry import get_plugin_manager
        from rlbridge.engine.environments import engine_env_vars
        from rlbridge.run.runner import choose_engine_python

        backend = get_plugin_manager().backend(config.backend)
        python = choose_engine_python(config, backend) or Path(sys.executable)
        module = backend.native_arm
        native_job = {
            "plan": plan,
            "model_dir": materialize_model(config),
            "rows": rows,
            "reward": [r.model_dump(mode="json") for r in config.reward],
            "batch_size": config.training.batch_size,
            "steps": config.training.steps,
            "use_chat_template": config.model.use_chat_template,
            "max_new_tokens": config.rollout.max_new_tokens,
        }
        (run_dir / "native_job.json").write_text(json.dumps(native_job))
        prep = subprocess.run(
            [str(python), "-m", module, "prepare", str(run_dir / "native_job.json"), str(out)],
            capture_output=True,
            text=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        if prep.returncode != 0:
            raise RLBridgeError(f"arm '{job.arm}': preparing the native run failed: {prep.stderr.strip()[-1500:]}")
        native = json.loads((out / "native_cmd.json").read_text())
        return RunCommand(
            native["argv"],
            Path(native["metrics"]),
            {**engine_env_vars(python), **native["env"]},
            Path(native["cwd"]),
            [str(python), "-m", module, "canonical", native["metrics"], str(out / "metrics.jsonl")],
            [Path(native["ray_temp_dir"])] if native.get("ray_temp_dir") else [],
        )
    config = job.config.model_copy(deep=True)
    config.output_dir = str(out.absolute())
    config.run_name = f"{job.arm} seed {job.seed}"
    # what the user set (the spec's and the arm's overrides included), so that defaults are left to
    # the config's own validation exactly as in `rlbridge train CONFIG --set ...`
    (run_dir / "config.in.yaml").write_text(
        yaml.safe_dump(config.model_dump(mode="json", exclude_unset=True), sort_keys=False)
    )
    return RunCommand(
        [sys.executable, "-m", "rlbridge", "train", str(run_dir / "config.in.yaml"), "--no-progress"],
        out / "metrics.jsonl",
    )


def run_one(
    job: RunJob, run_dir: Path, lock: list[Path] | None = None, on_step=None, poll_s: float = 0.05
) -> dict[str, Any]:
    """Run one job in a fresh process and measure it from outside; returns run.json's content."""
    try:
        import psutil
    except ImportError as exc:
        raise RLBridgeError("rlbridge bench needs psutil and scipy: pip install 'rlbridge[bench]'") from exc

    run_dir.mkdir(parents=True, exist_ok=True)
    command = command_for(job, run_dir)
    cmd, metrics_path = command.argv, command.metrics
    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    if metrics_path.is_dir():
        shutil.rmtree(metrics_path)
    metrics_path.unlink(missing_ok=True)
    (run_dir / "run" / "metrics.jsonl").unlink(missing_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", **command.env}
    tail = _StepTail(metrics_path)
    peak = 0
    import resource

    with _locked(lock) as waited, open(run_dir / "output.log", "w") as log:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        started_at = time.time()
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=command.cwd
        )
        ps = psutil.Process(proc.pid)
        last_mem = 0.0
        try:
            step_cpu: dict[int, float] = {}
            while proc.poll() is None:
                now = time.perf_counter() - started
                seen = len(tail.arrivals)
                tail.poll(now)
                if len(tail.arrivals) > seen:  # the tree's CPU time when a step arrives: per-step CPU, load or not
                    cpu = _tree_cpu(ps)
                    for step, _ in tail.arrivals[seen:]:
                        step_cpu[step] = cpu
                if now - last_mem >= 0.2:
                    peak = max(peak, process_tree_rss(proc.pid))
                    last_mem = now
                if on_step and tail.arrivals:
                    on_step(tail.arrivals[-1][0])
                time.sleep(poll_s)
        except BaseException:
            from rlbridge.run.launch import stop_process_group

            stop_process_group(proc)
            raise
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the run's process and every descendant it reaped
        tail.poll(wall)
        if command.canonical is not None:  # an engine's native run: what it left behind goes (the slot is still held)
            from rlbridge.run.launch import stop_process_group

            stop_process_group(proc)
    if command.canonical is not None:  # then its log is mapped to canonical names
        for path in command.cleanup:
            shutil.rmtree(path, ignore_errors=True)
        metrics_path = run_dir / "run" / "metrics.jsonl"
        if command.metrics.exists():
            subprocess.run(command.canonical, check=False, capture_output=True)
    history = (
        [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
        if metrics_path.exists()
        else []
    )
    if command.canonical is not None and not tail.arrivals:  # a log read after the run: its own wall-clock stamps
        tail.arrivals = [(int(row["step"]), row["_wall_time"] - started_at) for row in history if "_wall_time" in row]
    for row in history:
        row.pop("_wall_time", None)
    result: dict[str, Any] = {
        "arm": job.arm,
        "kind": job.kind,
        "seed": job.seed,
        "key": job.key,
        "engine": job.engine,
        "command": cmd,
        "returncode": proc.returncode,
        "status": "completed"
        if proc.returncode == 0 and len(history) >= (job.config.training.steps or 0)
        else "failed",
        "started_at": started_at,
        "lock_wait_s": waited,
        "wall_s": wall,
        # CPU seconds, user + system: far less sensitive than wall time to other jobs on a shared machine
        # (complete for a process tree that reaps its children, e.g. TRL and its reward workers)
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "peak_tree_rss_mb": peak / 2**20,
        "step_arrival_s": {str(step): t for step, t in tail.arrivals},
        "step_cpu_s": {str(step): t for step, t in step_cpu.items()},
        "history": history,
    }
    summary = metrics_path.parent / "summary.json"
    if summary.exists():
        data = json.loads(summary.read_text())
        result["engine_version"] = data.get("engine_version")
    if result["status"] != "completed":
        result["error"] = (run_dir / "output.log").read_text()[-2000:]
    result["rlbridge_commit"] = run_commit(run_dir)
    (run_dir / "run.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def run_commit(run_dir: Path) -> str | None:
    """The rlbridge commit a run ran (its run manifest); None for a run without one (a native arm)."""
    from rlbridge.run import manifest

    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        return manifest.read(run_dir / "run")["rlbridge"]["commit"]
    return None


def key_from_files(run_dir: Path) -> str | None:
    """A finished run's key under this rlbridge, from the config it ran (config.in.yaml) and where and
    how it ran (run.json); None when they do not load (e.g. a knob since removed)."""
    from rlbridge.run.runner import resolve

    try:
        data = json.loads((run_dir / "run.json").read_text())
        return run_key(resolve(load_config(run_dir / "config.in.yaml")), data["engine"], data["kind"])
    except (OSError, ValueError, KeyError, RLBridgeError):
        return None


def load_done(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / "run.json"
    if not path.exists():
        return None
    with contextlib.suppress(ValueError):
        data = json.loads(path.read_text())
        if data.get("status") == "completed":
            if "rlbridge_commit" not in data:  # run.json written before it recorded the commit
                data["rlbridge_commit"] = run_commit(run_dir)
            return data
    return None


def describe(jobs: list[RunJob], diffs: dict[str, dict[str, Any]]) -> str:
    """What differs between arms, in canonical terms, and what each arm approximates."""
    lines = ["What differs between arms (canonical config):"]
    if not diffs:
        lines.append("  nothing but the kind of run")
    for key, values in diffs.items():
        lines.append(f"  {key}: " + "; ".join(f"{arm} = {json.dumps(v)}" for arm, v in values.items()))
    seen = set()
    for job in jobs:
        if job.arm in seen:
            continue
        seen.add(job.arm)
        lines.append(
            f"Arm '{job.arm}' ({job.kind}, {job.engine}) approximates:" + ("" if job.approximations else " nothing")
        )
        lines.extend(f"  - {note}" for note in job.approximations)
    return "\n".join(lines)


def run_bench(
    spec_path: str | Path,
    output: str | Path | None = None,
    lock: str | Path | list[str | Path] | None = None,
    progress: bool = True,
    echo=print,
    dry_run: bool = False,
    report_only: bool = False,
) -> dict[str, Any]:
    """Plan, check fairness, run what is not done yet, and write the report. Returns results.json."""
    spec, path = load_spec(spec_path)
    jobs, diffs = build_jobs(spec, path)
    echo(describe(jobs, diffs))
    out = bench_dir(spec, path, output)
    if dry_run:
        return {"jobs": [j.dirname for j in jobs]}
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.yaml").write_text(yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False))
    (out / "fairness.txt").write_text(describe(jobs, diffs) + "\n")
    results: list[dict[str, Any]] = []
    todo = []
    # a finished run is found by its key, whatever its arm's name or position in the spec
    by_key = {d.name.rsplit("-", 1)[-1]: d for d in sorted((out / "runs").glob("*-*")) if (d / "run.json").exists()}
    if any(
        job.key not in by_key for job in jobs
    ):  # runs keyed by an older key function: the key of the config they ran
        for d in list(by_key.values()):
            key = key_from_files(d)
            if key is not None:
                by_key.setdefault(key, d)
    for job in jobs:
        done = load_done(by_key.get(job.key, out / "runs" / job.dirname))
        if done is not None:
            done["arm"] = job.arm  # the arm may have been renamed in the spec
            done["key"] = job.key
            results.append(done)
        else:
            todo.append(job)
    if report_only:
        echo(
            f"{len(jobs)} runs: {len(results)} done; --report-only: {len(todo)} not run, the report covers the done "
            "ones"
        )
        todo = []
    else:
        echo(f"{len(jobs)} runs: {len(results)} already done (reused), {len(todo)} to run")
    if todo:  # build built-in models now, so that no run's start-up includes the build
        from rlbridge.contract.models import materialize_model

        for path in sorted({job.config.model.path for job in todo}):
            materialize_model(next(job.config for job in todo if job.config.model.path == path))
    locks = [Path(p) for p in ([lock] if isinstance(lock, (str, Path)) else (lock or []))]
    bar = _BenchProgress(len(jobs), len(results)) if progress else None
    failed = []
    with bar if bar is not None else contextlib.nullcontext():
        for job in todo:
            if bar is not None:
                bar.start_run(f"{job.arm} seed {job.seed}", job.config.training.steps)
            result = run_one(job, out / "runs" / job.dirname, locks, on_step=bar.step if bar is not None else None)
            if result["status"] != "completed":
                failed.append(job)
                echo(
                    f"run failed: {job.arm} seed {job.seed} (rc {result['returncode']}); log: "
                    f"{out / 'runs' / job.dirname / 'output.log'}"
                )
            results.append(result)
            if bar is not None:
                bar.finish_run()
    from rlbridge.bench.report import write_report

    order = {j.key: i for i, j in enumerate(jobs)}
    results.sort(key=lambda r: order.get(r["key"], 0))
    data = write_report(out, spec, jobs, diffs, results)
    data["bench_dir"] = str(out)
    if failed:
        raise RLBridgeError(
            f"{len(failed)} of {len(jobs)} runs failed (see their output.log); the report covers the rest; "
            f"run the bench again to retry them"
        )
    return data


class _BenchProgress:
    def __init__(self, total: int, done: int) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
        )
        self.runs = self.progress.add_task("runs", total=total, completed=done)
        self.current = None

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()

    def start_run(self, name: str, steps: int | None) -> None:
        self.current = self.progress.add_task(f"  {name}: step", total=steps)

    def step(self, step: int) -> None:
        if self.current is not None:
            self.progress.update(self.current, completed=step)

    def finish_run(self) -> None:
        if self.current is not None:
            self.progress.remove_task(self.current)
            self.current = None
        self.progress.advance(self.runs)
