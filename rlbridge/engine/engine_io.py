"""Plumbing shared by adapters whose engine runs its work in other processes (Ray actors, vLLM
engines): an events file those processes append to, the follower that turns it into canonical
steps, the rlbridge reward plugins as seen from inside an engine process, and the run's model
directory with the chat template the run asks for. Imports no engine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlbridge.contract.rewards import RewardInput
from rlbridge.helpers import process_tree_rss

from rlbridge.engine.events import EVENTS_ENV, REWARDS_ENV, write_event  # noqa: F401 (adapters import them from here)

PASSTHROUGH_CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"


class CpuDeviceIndex(str):
    """What a CPU stand-in for `torch.cuda.current_device()` returns: the string 'cpu', so that
    `tensor.to(device=...)` and `torch.tensor(..., device=...)` land on the CPU, which formats as
    '0' where engines build f'{device_name}:{index}' strings."""

    def __format__(self, spec: str) -> str:
        return "0"


# --- events -------------------------------------------------------------------------------------


class EventFollower(threading.Thread):
    """Follows the events file and emits one canonical step per engine metrics event.

    Events: {"kind": "metrics", "step", "data"} (the engine's per-step log), {"kind": "reward",
    "train", "stats", optional "samples" and "totals"} (batch statistics from a reward manager, with
    a few sampled rows and every sample's total), {"kind": "reward_sample", "total", "plugins",
    optional "prompt", "completion"} (one sample, from per-sample reward hooks), {"kind": "weight_sync",
    "bytes", "tensors"} (one transfer of weights to the rollout engine), {"kind":
    "reward_error", "error"}. The step's sampled rows and reward totals go to `ctx.emit_step` with
    its metrics (samples.jsonl, the sinks' tables and histograms).
    """

    def __init__(
        self,
        path: Path,
        ctx,
        to_canonical: Callable[[dict, dict], dict],
        is_step: Callable[[dict], bool],
        checkpoint_dir: str | None = None,
        checkpoint_glob: str = "global_step*",
        to_eval: Callable[[dict], dict] | None = None,
        checkpoint_complete: Callable[[Path], bool] | None = None,
    ) -> None:
        super().__init__(daemon=True)
        # whether a checkpoint directory is saved to the end (rlbridge.engine.checkpoints): only complete
        # ones are reported, as the checkpoint hook promises, not one the engine is still writing
        self.checkpoint_complete = checkpoint_complete or (lambda path: True)
        self.to_eval = to_eval  # native metrics -> canonical eval/... ones (data.eval), for ctx.emit_eval
        self.path = Path(path)
        self.ctx = ctx
        self.to_canonical = to_canonical
        self.is_step = is_step
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.checkpoint_glob = checkpoint_glob
        self.stop = threading.Event()
        self.rewards: dict[str, float] = {}
        self.samples: list[dict[str, Any]] = []
        self.batch_rows: list[dict[str, Any]] = []  # sampled rows a batch reward manager sent
        self.batch_totals: list[float] = []
        self.reward_errors: list[str] = []
        self.fault_counts: dict[str, int] = {}  # reward faults of the step (rlbridge.engine.workers)
        self.plugin_metrics: dict[str, list[float]] = {}  # "reward/<plugin>/<key>" -> [sum of value x samples, samples]
        # complete checkpoints already there (a resumed run's) were reported by the run that saved them;
        # an incomplete one left by a killed run is reported once this run has saved it again
        self.seen_checkpoints: set[str] = (
            {p.name for p in self.checkpoint_dir.glob(checkpoint_glob) if self.checkpoint_complete(p)}
            if self.checkpoint_dir and self.checkpoint_dir.exists() else set()
        )
        self.peak_mb = 0.0
        self.weight_sync: dict[str, int] = {}  # bytes and tensors sent to the rollout engine since the last step
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._follow()
            self._checkpoints()  # one saved after the last step's metrics
        except BaseException as exc:  # surfaced by the caller: the engine is stopped at once
            self.error = exc
            if not self.stop.is_set():
                import _thread

                _thread.interrupt_main()  # the engine runs in the main thread; `following` raises our error

    def _follow(self) -> None:
        while not self.path.exists() and not self.stop.is_set():
            time.sleep(0.2)
        if not self.path.exists():
            return
        sampled = 0.0
        with open(self.path, encoding="utf-8") as fh:
            while True:
                line = fh.readline()
                if line:
                    self._handle(json.loads(line))
                    continue
                if self.stop.is_set():
                    break
                if time.monotonic() - sampled >= 1.0:  # a /proc scan of the whole tree: ms of CPU, once a second
                    self.peak_mb = max(self.peak_mb, process_tree_rss(os.getpid()) / 2**20)
                    sampled = time.monotonic()
                time.sleep(0.2)

    def _handle(self, event: dict[str, Any]) -> None:
        kind = event["kind"]
        if kind == "reward" and event.get("train"):
            self.rewards = event["stats"]
            self.batch_rows += event.get("samples", [])
            self.batch_totals += event.get("totals", [])
        elif kind == "reward_sample":
            self.samples.append(event)
        elif kind == "reward_error":
            self.reward_errors.append(event["error"])
        elif kind == "reward_faults":
            for key, n in event["counts"].items():
                self.fault_counts[key] = self.fault_counts.get(key, 0) + n
        elif kind == "reward_metrics":  # a reward plugin's extra metrics of one scoring call
            for plugin, values in event["metrics"].items():
                for key, value in values.items():
                    acc = self.plugin_metrics.setdefault(f"reward/{plugin}/{key}", [0.0, 0.0])
                    acc[0] += float(value) * event["n"]
                    acc[1] += event["n"]
        elif kind == "weight_sync":  # one transfer of weights to the rollout engine, from the engine's seam
            for key in ("bytes", "tensors"):
                self.weight_sync[key] = self.weight_sync.get(key, 0) + event[key]
        elif kind == "reward_fault":  # the first faults of the run: their error lines and row reach the console
            print(f"rlbridge: reward '{event['plugin']}' {event['outcome']} on row {event['row']}:\n{event['error']}", file=sys.stderr)
        elif kind == "eval_metrics":  # an evaluation logged on its own (OpenRLHF's log_eval)
            if self.to_eval is not None:
                self.ctx.emit_eval(int(event["step"]), self.to_eval(event["data"]))
        elif kind == "metrics":
            native = event["data"]
            evaluation = self.to_eval(native) if self.to_eval is not None else {}
            if evaluation:  # verl logs validation with the step's metrics
                self.ctx.emit_eval(int(event["step"]), evaluation)
            if not self.is_step(native):
                return  # validation-only logs
            if self.samples:
                names = self.samples[0]["plugins"].keys()
                self.rewards = reward_stats(
                    [s["total"] for s in self.samples], {n: [s["plugins"].get(n) for s in self.samples] for n in names}
                )
            canonical = self.to_canonical(native, self.rewards)
            from rlbridge.engine.workers import COUNTERS

            canonical.update({f"reward/{k}": float(self.fault_counts.get(k, 0)) for k in COUNTERS})
            self.fault_counts = {}
            canonical.update({k: total / n for k, (total, n) in self.plugin_metrics.items() if n})
            self.plugin_metrics = {}
            canonical.update({f"weight_sync/{k}": float(v) for k, v in self.weight_sync.items()})
            self.weight_sync = {}
            if "memory/peak_mb" not in canonical and self.peak_mb:
                canonical["memory/peak_mb"] = self.peak_mb
            rows = self.batch_rows + [sample_row(s) for s in self.samples if "completion" in s]
            totals = self.batch_totals + [s["total"] for s in self.samples]
            self.ctx.emit_step(int(event["step"]), canonical, native=native, samples=rows, rewards=totals)
            self.rewards, self.samples, self.batch_rows, self.batch_totals = {}, [], [], []
            self._checkpoints()

    def _checkpoints(self) -> None:
        if self.checkpoint_dir is None or not self.checkpoint_dir.exists():
            return
        for path in sorted(self.checkpoint_dir.glob(self.checkpoint_glob)):
            if path.name not in self.seen_checkpoints and self.checkpoint_complete(path):
                self.seen_checkpoints.add(path.name)
                digits = "".join(c for c in path.name if c.isdigit())
                self.ctx.checkpoint_saved(int(digits or 0), str(path))


@contextmanager
def following(follower: EventFollower) -> Iterator[EventFollower]:
    """Run the follower while the body runs; afterwards read what is left and raise its error."""
    follower.start()
    try:
        yield follower
    except KeyboardInterrupt:
        if follower.error is None:
            raise
    finally:
        follower.stop.set()
        follower.join(timeout=30)
    if follower.error is not None:
        raise follower.error


@contextmanager
def ray_cluster(num_cpus: int, env: dict[str, str], logical_gpus: int = 0, resources: dict | None = None,
                run_dir: Path | None = None, address: str | None = None) -> Iterator[None]:
    """The Ray cluster a run trains on. By default one of this run only: `address="local"` never
    attaches to a cluster someone else started (engines' own `ray.init()` would), its temp dir is
    private, and it is stopped by its own handle (never the Ray CLI's stop command, which kills every
    Ray process on the machine). On CPU, `logical_gpus` declares the GPUs engines' resource requests
    ask for. With `address` (resources.ray_address) the run joins that existing, possibly multi-node
    cluster instead, and only disconnects from it at the end. If the run fails, Ray's logs are copied to
    `run_dir`/logs/ray and the error gets a `failure`: the process that died, its first error lines
    and its log."""
    import ray

    tmp = Path(tempfile.mkdtemp(prefix="rlb-ray-"))  # short: Ray's socket paths have a length limit
    if address:  # someone else's cluster (resources.ray_address): join it, never start or stop it
        init: dict[str, Any] = {"address": address, "runtime_env": {"env_vars": env}}
        # inside a Ray job (rlbridge submit) the job's runtime env already sets some of these variables:
        # the run's own values win instead of ray.init refusing the overlap
        os.environ.setdefault("RAY_OVERRIDE_JOB_RUNTIME_ENV", "1")
    else:
        # a cluster this process starts inherits its environment: the variables go there, not into a
        # job-wide runtime_env, with which Ray starts every worker through its runtime-env agent instead
        # of from its pool of prestarted ones (measured on verl 0.9.1's quickstart: ~25 s more start-up)
        os.environ.update(env)
        init = {
            "address": "local",
            "num_cpus": num_cpus,
            "_temp_dir": str(tmp),
            "include_dashboard": False,
        }
        if logical_gpus:
            init["num_gpus"] = logical_gpus
        if resources:
            init["resources"] = resources
    from rlbridge.engine.lifeline import descendants, kill_descendants

    before = set(descendants())
    ray.init(**init)
    try:
        yield
    except BaseException as exc:
        if run_dir is not None and getattr(exc, "failure", None) is None:
            try:
                exc.failure = describe_ray_failure(exc, _keep_ray_logs(tmp, Path(run_dir)))
            except Exception:  # describing a failure must never hide it
                pass
        raise
    finally:
        try:
            if run_dir is not None:  # where the engine placed its actors, read while the cluster is up
                from rlbridge.engine.placement import snapshot

                snapshot(run_dir, env.get(EVENTS_ENV))
            ray.shutdown()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            if not address:  # what the private cluster started and left (orphaned vLLM engines...) goes too
                kill_descendants(grace_s=3.0, exclude=before)


def _keep_ray_logs(tmp: Path, run_dir: Path) -> Path:
    """Copy the session's logs (workers, raylet, GCS) out of the private temp dir before it goes."""
    target = run_dir / "logs" / "ray"
    sessions = sorted(tmp.glob("session_*/logs"))
    if sessions:
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(sessions[-1], target, ignore=shutil.ignore_patterns("*.sock", "events"), dirs_exist_ok=True)
    return target


_PID = re.compile(r"\bpid[=:]\s*(\d+)")
_CLASS = re.compile(r"class_name:\s*(\S+)")
_TASK = re.compile(r"ray::([\w.]+)")


def describe_ray_failure(exc: BaseException, logs: Path) -> dict[str, Any]:
    """Which engine process died, its first error lines and its log. Ray nests errors (the driver's
    task failed because an actor it called died...): the innermost actor Ray names, with its pid, is
    the process that died; its own log is used when it wrote an error there, else Ray's error."""
    text = f"{type(exc).__name__}: {exc}"
    pids = _PID.findall(text)
    classes = [c.split(".")[-1] for c in _CLASS.findall(text)]
    tasks = _TASK.findall(text)
    pid = pids[-1] if pids else None
    actor = classes[-1] if classes else (tasks[-1] if tasks else None)
    process = " ".join(p for p in ((f"Ray actor {actor}" if actor else "Ray driver"), f"(pid {pid})" if pid else "") if p)
    log = None
    if pid and logs.is_dir():
        candidates = sorted(logs.glob(f"worker-*-{pid}.err")) + sorted(logs.glob(f"worker-*-{pid}.out")) + sorted(logs.glob(f"*_{pid}.log"))
        log = next((c for c in candidates if _error_lines(c.read_text(errors="replace").splitlines())), candidates[0] if candidates else None)
    lines = _error_lines(log.read_text(errors="replace").splitlines()) if log else []
    if not lines:  # the process left no traceback (SIGKILL, OOM killer): Ray's account of its death
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith(" ")][-8:]
    how = next((ln.strip() for ln in text.splitlines()
                if any(w in ln for w in ("Worker exit type", "SIGKILL", "exit code", "out of memory", "OOM", "SIGSEGV"))), "")
    out = {"process": process, "how": how[:300], "error": lines[:8], "log": str(log or logs)}
    if tasks and (actor is None or tasks[0] != actor) and len(pids) > 1:
        out["via"] = f"Ray task {tasks[0]} (pid {pids[0]})"
    return out


def _error_lines(lines: list[str]) -> list[str]:
    starts = [i for i, ln in enumerate(lines) if ln.startswith("Traceback")]
    if not starts:
        return []
    block = lines[starts[0]:]
    last = next((ln for ln in block[1:] if ln and not ln.startswith(" ")), None)
    return ([last] if last else []) + block[:7]


# --- rewards inside engine processes --------------------------------------------------------------


def score_inputs(inputs: list[RewardInput]) -> tuple[list[float], dict[str, list[float | None]]]:
    """Weighted total per input (a plugin's None counts as not applicable) and each plugin's scores,
    through the run's worker pool (rollout_workers: timeouts, fault counts and the on_error policy).
    Thread-safe: async reward loops call it from worker threads, concurrently."""
    from rlbridge.engine.workers import engine_scorer

    scored = engine_scorer().score(inputs)
    if scored.counts:
        write_event({"kind": "reward_faults", "counts": scored.counts})
    if scored.metrics:  # native rewards' extra metrics (verl `score` dicts, OpenRLHF extra_logs)
        write_event({"kind": "reward_metrics", "n": len(inputs), "metrics": scored.metrics})
    return scored.totals, scored.per_plugin


SAMPLE_ROWS_SENT = 16  # rows with text a batch reward manager sends per call (the run keeps telemetry.samples_per_step)
SAMPLE_TEXT_CHARS = 2000


def sample_row(event: dict[str, Any]) -> dict[str, Any]:
    """A sampled row as samples.jsonl and the sinks see it: prompt, completion, total reward, and
    each reward plugin's score."""
    return {
        "prompt": event.get("prompt"),
        "completion": event.get("completion"),
        "reward": event["total"] if "total" in event else event.get("reward"),
        "rewards": event.get("plugins", event.get("rewards", {})),
    }


def sample_fields(x: RewardInput) -> dict[str, str]:
    """The text of one scored sample, for reward events (capped: events cross process boundaries)."""
    return {"prompt": str(x.prompt)[:SAMPLE_TEXT_CHARS], "completion": str(x.completion)[:SAMPLE_TEXT_CHARS]}


def batch_reward_event(inputs: list[RewardInput], totals: list[float], per_plugin: dict[str, list[float | None]], train: bool) -> dict:
    """The event a batch reward manager writes: statistics, a few rows with text, every total."""
    rows = [
        {**sample_fields(x), "reward": totals[i], "rewards": {k: v[i] for k, v in per_plugin.items()}}
        for i, x in enumerate(inputs[:SAMPLE_ROWS_SENT])
    ]
    return {"kind": "reward", "train": train, "stats": reward_stats(totals, per_plugin), "samples": rows, "totals": list(totals)}


def reward_stats(totals: list[float], per_plugin: dict[str, list[float | None]]) -> dict[str, float]:
    out = {"reward/mean": statistics.fmean(totals), "reward/std": statistics.pstdev(totals) if len(totals) > 1 else 0.0}
    for name, values in per_plugin.items():
        present = [v for v in values if v is not None]
        if present:
            out[f"reward/{name}/mean"] = statistics.fmean(present)
    return out


# --- the model directory the engine loads ---------------------------------------------------------


def run_and_model_dirs(ctx, chat_template: str | None) -> tuple[Path, str]:
    """What every engine launcher starts with: the run directory (absolute) and the model directory
    the engine loads (the builtin model built on first use, carrying the run's chat template)."""
    from rlbridge.contract.models import materialize_model, materialize_path

    run_dir = Path(ctx.run_dir).resolve()
    if ctx.config.critic.path:  # the plan names its resolved path; a builtin one is built here on first use
        materialize_path(ctx.config.critic.path, "critic.path", ctx.plugins)
    for i, spec in enumerate(ctx.config.reward):  # reward models, likewise
        if spec.model:
            materialize_path(spec.model, f"reward[{i}].model", ctx.plugins)
    return run_dir, model_dir_with_template(materialize_model(ctx.config, ctx.plugins), chat_template, run_dir)


def model_dir_with_template(base: str, template: str | None, run_dir: Path) -> str:
    """The model directory the engine loads: the base one, or a copy of its small files (weights
    linked) with the chat template this run needs, so that every engine process tokenizes the same way."""
    if template is None:
        return base
    target = Path(run_dir) / "model"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for item in Path(base).iterdir():
        if item.name in ("tokenizer_config.json", "chat_template.jinja"):
            continue
        (target / item.name).symlink_to(item.resolve())
    config_path = Path(base) / "tokenizer_config.json"
    data = json.loads(config_path.read_text()) if config_path.exists() else {}
    data["chat_template"] = template
    (target / "tokenizer_config.json").write_text(json.dumps(data, indent=2))
    (target / "chat_template.jinja").write_text(template)
    return str(target)
