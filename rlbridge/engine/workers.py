"""The worker pool behind every reward (and environment step) call in an engine process.

Engines call reward shims from their own processes (TRL's trainer, verl's reward loop workers,
OpenRLHF's vLLM actors). Scoring there, in-process and serially, lets one plugin freeze or fail the
run: a hang cannot be interrupted by asyncio or signals in CPU-bound code, a forked pool deadlocks
on inherited locks. Here every call goes to a pool of *spawned* worker processes
([pebble](https://pypi.org/project/Pebble/)'s ProcessPool: a per-task timeout kills the worker
process and starts a new one, a worker that dies is reported as such, and the pool keeps serving),
so that a plugin that raises, hangs, crashes its process or returns garbage costs the samples it
was scoring, is counted (canonical `reward/errors`, `reward/timeouts`, ...), logged with its first
error lines and the failing row, and handled by `rollout_workers.on_error`.

`mode: inline` calls the plugins in the engine process (for debuggers and profilers); faults are
still counted and handled, but a hang cannot be interrupted there.
"""

from __future__ import annotations

import atexit
import importlib
import json
import logging
import math
import os
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlbridge.contract.rewards import BoundReward, RewardInput
from rlbridge.errors import RLBridgeError

log = logging.getLogger("rlbridge.rewards")

WORKERS_ENV = "RLBRIDGE_ROLLOUT_WORKERS"
FAULT_LOG_ENV = "RLBRIDGE_FAULT_LOG"

OUTCOMES = ("errors", "timeouts", "crashes", "nonfinite", "invalid")
"""Fault kinds, each a canonical per-step metric reward/<kind>: the plugin raised; it ran past
timeout_s (its worker was killed and replaced); its worker process died (os._exit, a signal, a
segfault); it returned NaN or inf; it returned something that is not a score (a non-number, the
wrong number of scores, or None for every plugin of a sample)."""
COUNTERS = (*OUTCOMES, "skipped")
"""The per-step counters; skipped: samples left with no score under on_error: skip (their total is 0)."""
MIN_SAMPLES_FOR_THRESHOLD = 16


class RewardFailure(RLBridgeError):
    """A reward plugin faulted and the run's on_error policy (or its threshold) says stop."""


@dataclass
class Settings:
    """rollout_workers as seen in an engine process (the fields of contract.config.RolloutWorkersConfig)."""

    mode: str = "process"
    num_workers: int = 2
    timeout_s: float = 30.0
    batch_size: int = 32
    max_concurrency: int | None = None
    on_error: str = "zero"
    error_threshold: float = 0.5
    batch_wait_ms: float = 5.0
    ray_resource: str = "rollout_cpu"
    ray_num_cpus: float = 1.0

    @property
    def samples_in_flight(self) -> int:
        """The most samples the pool scores at once: max_concurrency (else num_workers) calls of
        batch_size samples. A caller that submits one sample per thread needs this many threads."""
        return (self.max_concurrency or self.num_workers) * self.batch_size

    @classmethod
    def from_any(cls, value: Any) -> "Settings":
        if value is None:
            raw = os.environ.get(WORKERS_ENV)
            value = json.loads(raw) if raw else {}
        if isinstance(value, Settings):
            return value
        if hasattr(value, "model_dump"):
            value = value.model_dump()
        return cls(**{k: v for k, v in dict(value).items() if k in cls.__dataclass_fields__})


@dataclass
class Fault:
    plugin: str
    outcome: str
    message: str
    index: int
    value: float | None = None


@dataclass
class Scored:
    """The result of one scoring call: the weighted total per sample, each plugin's scores after
    the on_error policy (None: not applicable or skipped), and this call's fault counts."""

    totals: list[float]
    per_plugin: dict[str, list[float | None]]
    counts: dict[str, int] = field(default_factory=dict)
    raw: dict[str, list[float | None]] = field(default_factory=dict)
    """Each plugin's scores as returned where they were numbers, NaN and inf included (telemetry:
    the engine never sees these, it gets per_plugin)."""
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    """Each plugin's extra metrics of this call (a native reward's `last_metrics`, averaged over
    its chunks), for engines whose reward path has no metric channel of its own (verl, OpenRLHF)."""


# --- worker side (runs in the spawned processes) -------------------------------------------------

_worker_rewards: dict[str, Callable] = {}


def specs_with_factories(specs: Sequence[dict], plugins) -> list[dict]:
    """The run's reward specs ({name, weight, args, native?, function?}) as spawned workers can
    rebuild them: each plugin factory's import path (so a plugin registered by hand in this process
    is found if its module is importable); a plugin that exists only in this process's plugin
    manager (a closure, a test's object) is marked `inline` and scored here, with a log line; so is
    one that declares isolate=False (quick and pure), without one. A spec that already names its
    factory (or is native, or a reward model) is kept as it is."""
    out = []
    for i, spec in enumerate(specs):
        if spec.get("native") or spec.get("model") or "factory" in spec:
            out.append(dict(spec))  # loaded from its file, module, model directory or factory path in any process
            continue
        plugin = plugins.get("reward", spec["name"], f"reward[{i}].name")
        if not plugin.isolate:  # declared quick and pure: no pool for it
            out.append({**spec, "factory": _import_path(plugin.factory), "inline": True})
            continue
        factory = plugin.factory
        ref = _import_path(factory)
        try:
            same = ref is not None and _resolve_factory({"factory": ref}, i) is factory
        except Exception:
            same = False
        if not same:
            log.warning(
                "reward '%s' is registered in this process only (its factory is not importable by a worker "
                "process): it is scored inline, without a timeout",
                spec["name"],
            )
        out.append({**spec, "factory": ref if same else None, "inline": not same})
    return out


def _import_path(obj: Any) -> str | None:
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if not module or "<" in qualname:
        return None
    return f"{module}:{qualname}"


def _resolve_factory(spec: dict, index: int) -> Callable:
    module, _, qualname = spec["factory"].partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def build_reward(spec: dict, index: int, plugins=None) -> Callable:
    """The reward callable of one spec: from the factory's import path when the spec has one, else
    as the engine process builds it (the registry: entry points and the run's local plugins; or a
    native function)."""
    if spec.get("factory"):
        return _resolve_factory(spec, index)(**(spec.get("args") or {}))
    from rlbridge.contract.native_rewards import reward_fn
    from rlbridge.contract.registry import get_plugin_manager

    return reward_fn(
        {k: v for k, v in spec.items() if k not in ("factory", "inline")},
        plugins or get_plugin_manager(),
        f"reward[{index}]",
    )


def _init_worker(specs_json: str) -> None:
    """Pool initializer, in every worker at its start (replacements after a kill too): build the
    run's rewards now, so that imports and model loads do not count against a call's timeout. A
    factory that fails is raised again by the first call that needs it (and counted there)."""
    for i, spec in enumerate(json.loads(specs_json)):
        if spec.get("inline"):
            continue
        key = f"{specs_json}\0{spec['name']}"
        try:
            _worker_rewards[key] = build_reward(spec, i)
        except Exception as exc:  # an initializer that raises would make the pool restart it forever
            _worker_rewards[key] = exc


def _worker_reward(specs_json: str, name: str) -> Callable:
    key = f"{specs_json}\0{name}"
    if isinstance(_worker_rewards.get(key), Exception):
        error = _worker_rewards.pop(key)
        raise error
    if key not in _worker_rewards:
        for i, spec in enumerate(json.loads(specs_json)):
            if spec["name"] == name:
                _worker_rewards[key] = build_reward(spec, i)
                break
        else:
            raise KeyError(f"reward '{name}' is not among the run's rewards")
    return _worker_rewards[key]


def _score_chunk(specs_json: str, name: str, inputs: list[RewardInput]) -> tuple[Any, dict | None]:
    """One task: a plugin over a chunk of samples: its raw output (checked in the engine process)
    and the extra metrics a native reward leaves in `last_metrics`."""
    fn = _worker_reward(specs_json, name)
    out = fn(inputs)
    try:
        out = list(out)
    except TypeError:
        pass
    return out, getattr(fn, "last_metrics", None)


def _call(fn: Callable, args: tuple) -> Any:
    """One task: any picklable callable (environment steps)."""
    return fn(*args)


def _warm() -> int:
    return os.getpid()


# --- rollout_workers.mode: ray -------------------------------------------------------------------


class RewardActor:
    """One Ray actor of the pool: the run's rewards built once at its start (as a process worker's
    initializer does), then one call at a time (a sync actor runs its methods serially)."""

    def __init__(self, specs_json: str) -> None:
        _init_worker(specs_json)

    def run(self, fn: Callable, args: tuple) -> Any:
        return fn(*args)

    def where(self) -> dict:
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}


def _pebble_expired():
    import pebble

    return pebble.ProcessExpired


class RayActorPool:
    """`rollout_workers.mode: ray`: the worker pool as num_workers Ray actors of ray_num_cpus CPUs each,
    with pebble's ProcessPool interface (`schedule(fn, args, timeout) -> Future`), so that the scorer
    treats both alike. A call past its timeout kills the actor (`ray.kill`) and starts a replacement;
    an actor that dies is replaced and its call fails as a crash (pebble.ProcessExpired). When the
    cluster offers the custom resource ray_resource (CPU-only nodes), every actor asks for
    ray_num_cpus of it and so runs there. Needs Ray initialised in this process (a Ray engine's)."""

    START_TIMEOUT_S = 300  # an actor's start: a worker process, the imports, the rewards built
    START_ATTEMPTS = 2  # an actor that dies before it starts is started again once

    def __init__(self, settings: Settings, specs_json: str) -> None:
        import queue

        import ray

        if not ray.is_initialized():
            raise RLBridgeError(
                "rollout_workers.mode is 'ray', but this engine process is not part of a Ray cluster: "
                "mode ray needs a backend that runs on Ray; use rollout_workers.mode: process"
            )
        self.settings, self._specs_json = settings, specs_json
        resource = settings.ray_resource
        options: dict[str, Any] = {"num_cpus": settings.ray_num_cpus, "max_restarts": 0, "max_task_retries": 0}
        if ray.cluster_resources().get(resource, 0) >= settings.ray_num_cpus:
            options["resources"] = {resource: settings.ray_num_cpus}
            self.placement = f"on the nodes with the custom resource '{resource}'"
        else:
            self.placement = f"anywhere (no node offers the custom resource '{resource}')"
        self._actor_class = ray.remote(**options)(RewardActor)
        self._free: queue.Queue = queue.Queue()
        self._actors = []
        self._starting: dict = {}  # actor -> the ref of its first where() call, until it has started
        self.replaced = 0  # actors killed for a call's hang or death (the process pool's meaning)
        self.restarted_at_start = 0  # actors that died before they started, started again
        for _ in range(settings.num_workers):
            self._new_actor()
        for actor in list(self._actors):  # every actor built its rewards (they start in parallel)
            self._free.put(self._started(actor))
        self._threads = ThreadPoolExecutor(max_workers=settings.num_workers, thread_name_prefix="rlbridge-ray-pool")
        log.info(
            "rollout_workers: %d Ray actors of %s CPU(s) %s",
            settings.num_workers,
            settings.ray_num_cpus,
            self.placement,
        )

    def _new_actor(self):
        actor = self._actor_class.remote(self._specs_json)
        self._actors.append(actor)
        self._starting[actor] = actor.where.remote()
        return actor

    def _replace(self, actor, at_start: bool = False) -> Any:
        """Kill `actor` and start another in its place; `at_start`: it died before it started."""
        import ray

        ray.kill(actor, no_restart=True)
        self._actors.remove(actor)
        self._starting.pop(actor, None)
        if at_start:
            self.restarted_at_start += 1
        else:
            self.replaced += 1
        return self._new_actor()

    def _started(self, actor) -> Any:
        """`actor` once it has started (worker process, imports, the rewards built), so that no call's
        timeout counts a start-up: a replacement starts while the cluster is busy, and its first call
        would otherwise time out for the start's sake. An actor that dies before it starts (Ray could not
        start its worker process) is started again, up to START_ATTEMPTS times in all."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        for attempt in range(1, self.START_ATTEMPTS + 1):
            ref = self._starting.get(actor)
            if ref is None:
                return actor
            try:
                ray.get(ref, timeout=self.START_TIMEOUT_S)
            except GetTimeoutError:
                raise RLBridgeError(
                    f"rollout_workers: a Ray reward actor of {self.settings.ray_num_cpus} CPU(s) {self.placement} "
                    f"did not start in {self.START_TIMEOUT_S} s: the cluster has no free CPUs for it; lower "
                    "rollout_workers.num_workers or rollout_workers.ray_num_cpus, or add CPU nodes"
                ) from None
            except RayActorError as exc:
                if attempt == self.START_ATTEMPTS:
                    raise RLBridgeError(
                        f"rollout_workers: a Ray reward actor died before it started, {attempt} times: {exc}"
                    ) from None
                log.warning("rollout_workers: a Ray reward actor died before it started; starting another: %s", exc)
                actor = self._replace(actor, at_start=True)
                continue
            self._starting.pop(actor, None)
            return actor
        return actor  # not reached: the last attempt returns or raises

    def schedule(self, fn: Callable, args: tuple = (), timeout: float | None = None) -> Future:
        return self._threads.submit(self._run, fn, args, timeout)

    def _run(self, fn: Callable, args: tuple, timeout: float | None) -> Any:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        actor = self._free.get()
        try:
            actor = self._started(actor)  # a replacement's start-up is not part of this call's timeout
            ref = actor.run.remote(fn, args)
            try:
                return ray.get(ref, timeout=timeout)
            except GetTimeoutError:
                actor = self._replace(actor)
                raise FutureTimeout() from None
            except RayActorError as exc:
                actor = self._replace(actor)
                raise _pebble_expired()(f"Ray actor died: {type(exc).__name__}", code=None, pid=None) from None
            except RayTaskError as exc:  # the call raised: its own exception, with the actor's traceback
                error = RuntimeError(f"{type(exc.cause).__name__ if exc.cause else 'error'}: {exc.cause}")
                error.traceback = str(exc)  # type: ignore[attr-defined]
                raise error from None
        finally:
            self._free.put(actor)

    def where(self) -> list[dict]:
        """Node id and pid of every live actor (tests, benchmarks)."""
        import ray

        return ray.get([a.where.remote() for a in self._actors], timeout=60)

    def stop(self) -> None:
        import ray

        self._threads.shutdown(wait=False, cancel_futures=True)
        for actor in self._actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # Ray already shut down: its actors went with it
                pass
        self._actors = []

    def join(self, timeout: float | None = None) -> None:
        pass


# --- the engine-process side ----------------------------------------------------------------------


def _first_lines(text: str, n: int = 6) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join(lines[-n:])


def _row_text(x: RewardInput, limit: int = 400) -> str:
    text = json.dumps(
        {"prompt": x.prompt, "completion": x.completion, "answer": x.answer, "metadata": x.metadata}, default=str
    )
    return text if len(text) <= limit else text[:limit] + "...(truncated)"


def check_scores(raw: Any, n: int) -> tuple[list[float | None], dict[int, tuple[str, str]]]:
    """A plugin's raw output as scores, and the faults found: {index: (outcome, message)}."""
    try:
        values = list(raw)
    except TypeError:
        return [None] * n, {i: ("invalid", f"returned {type(raw).__name__}, not a list of scores") for i in range(n)}
    if len(values) != n:
        return [None] * n, {i: ("invalid", f"returned {len(values)} scores for {n} samples") for i in range(n)}
    out: list[float | None] = []
    faults: dict[int, tuple[str, str]] = {}
    for i, v in enumerate(values):
        if v is None:
            out.append(None)
            continue
        try:
            number = float(v)
        except (TypeError, ValueError):
            faults[i] = ("invalid", f"returned {type(v).__name__} {str(v)[:60]!r}, not a number")
            out.append(None)
            continue
        if not math.isfinite(number):
            faults[i] = ("nonfinite", f"returned {number}")
            out.append(None)
            continue
        out.append(number)
    return out, faults


class RewardScorer:
    """Scores samples with the run's reward plugins through the worker pool (or inline).

    `specs`: [{name, weight, args, factory?}], the run's rewards as the engine process receives them
    (RLBRIDGE_REWARDS). `rewards`: already built plugins for inline mode (built from specs if None).
    """

    def __init__(
        self,
        specs: Sequence[dict],
        settings: Any = None,
        rewards: Sequence[BoundReward] | None = None,
        fault_log: str | Path | None = None,
        on_fault: Callable[[dict], None] | None = None,
    ) -> None:
        self.specs = [dict(s) for s in specs]
        self.settings = Settings.from_any(settings)
        self.weights = {s["name"]: float(s.get("weight", 1.0)) for s in self.specs}
        self.names = [s["name"] for s in self.specs]
        self._specs_json = json.dumps(self.specs, sort_keys=True)
        self._inline = {r.name: r.fn for r in rewards} if rewards is not None else {}
        self._inline_only = {s["name"] for s in self.specs if s.get("inline")}
        self.last_metrics: dict[str, dict] = {}
        self.fault_log = (
            Path(fault_log)
            if fault_log
            else (Path(os.environ[FAULT_LOG_ENV]) if os.environ.get(FAULT_LOG_ENV) else None)
        )
        self.on_fault = on_fault
        self._lock = threading.Lock()
        self._pool_lock = threading.Lock()
        self._pool = None
        self._semaphores: dict[str, threading.Semaphore] = {}
        self._batch: list[dict[str, Any]] = []
        self._batch_cond = threading.Condition()
        self._call = threading.local()  # the extra metrics of the call running in this thread
        self._step_counts: Counter = Counter()
        self._run_counts: Counter = Counter()
        self._logged = 0

    # -- lifecycle

    def start_in_background(self) -> None:
        """Start the worker pool (spawn + imports + building the rewards) in a thread, so that it
        overlaps the engine's own start-up instead of delaying the first reward call. A no-op inline
        or when no reward is scored in the pool (inline-only plugins, reward models)."""
        pooled = [s for s in self.specs if not s.get("model") and s["name"] not in self._inline_only]
        if self.settings.mode == "inline" or self._pool is not None or not pooled:
            return
        threading.Thread(target=self._get_pool, name="rlbridge-reward-pool-start", daemon=True).start()

    def _get_pool(self):
        with self._pool_lock:  # the background start and the first call never start two pools
            return self._start_pool()

    def _start_pool(self):
        if self._pool is None and self.settings.mode == "ray":
            self._pool = RayActorPool(self.settings, self._specs_json)
            atexit.register(self.close)
        if self._pool is None:
            import multiprocessing

            try:
                import pebble
            except ImportError:  # an engine environment made before rlbridge depended on pebble
                log.warning(
                    "rollout_workers: the package 'pebble' is missing in this environment (%s), so rewards are scored "
                    "inline, without timeouts; `rlbridge env create <engine>` reinstalls rlbridge with its "
                    "dependencies",
                    sys.prefix,
                )
                self.settings.mode = "inline"
                return None

            self._pool = pebble.ProcessPool(
                max_workers=self.settings.num_workers,
                context=multiprocessing.get_context("spawn"),
                initializer=_init_worker,
                initargs=(self._specs_json,),
            )
            atexit.register(self.close)
            # start every worker now (spawn + imports) so that no first call pays for it
            for fut in [self._pool.schedule(_warm) for _ in range(self.settings.num_workers)]:
                fut.result(timeout=120)
        return self._pool

    def _replace_pool(self, pool):
        """pebble stops a pool for good when a worker dies at a moment its task table does not show (every task
        then fails with BrokenProcessPool("All workers expired")): the next chunks and calls get a new one."""
        with self._pool_lock:
            if self._pool is pool:
                self._pool = None
        pool.stop()
        pool.join(timeout=10)
        return self._get_pool()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.stop()
            self._pool.join(timeout=10)
            self._pool = None

    def __enter__(self) -> "RewardScorer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- counts

    def take_counts(self) -> dict[str, float]:
        """Fault counts since the last call (one training step), every counter present."""
        with self._lock:
            counts, self._step_counts = self._step_counts, Counter()
        return {f"reward/{k}": float(counts.get(k, 0)) for k in COUNTERS}

    # -- scoring

    def score(self, inputs: Sequence[RewardInput]) -> Scored:
        """Every plugin over the inputs, with the on_error policy applied, and the weighted totals.
        Thread-safe; in process mode, calls smaller than batch_size that arrive within batch_wait_ms
        of each other are scored as one batch (verl 0.9 scores one sample per call, many at once),
        unless every plugin is scored in this process (no worker call to save, no wait)."""
        inputs = list(inputs)
        pooled = any(name not in self._inline_only for name in self.names)  # else nothing to batch for: score now
        if (
            self.settings.mode == "process"
            and pooled
            and self.settings.batch_wait_ms > 0
            and 0 < len(inputs) < self.settings.batch_size
        ):
            return self._coalesced(inputs)
        return self._score_now(inputs)

    def _coalesced(self, inputs: list[RewardInput]) -> Scored:
        ticket: dict[str, Any] = {"inputs": inputs}
        with self._batch_cond:
            self._batch.append(ticket)
            if len(self._batch) > 1:  # a leader is collecting: wait for it to score us
                self._batch_cond.notify_all()
                while "result" not in ticket and "error" not in ticket:
                    self._batch_cond.wait()
                if "error" in ticket:
                    raise ticket["error"]
                return ticket["result"]
            deadline = time.monotonic() + self.settings.batch_wait_ms / 1000
            while sum(len(t["inputs"]) for t in self._batch) < self.settings.batch_size:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._batch_cond.wait(left)
            group, self._batch = self._batch, []
        merged = [x for t in group for x in t["inputs"]]
        try:
            scored = self._score_now(merged)
        except BaseException as exc:
            with self._batch_cond:
                for t in group[1:]:
                    t["error"] = exc
                self._batch_cond.notify_all()
            raise
        lo = 0
        with self._batch_cond:
            for i, t in enumerate(group):
                hi = lo + len(t["inputs"])
                t["result"] = Scored(
                    scored.totals[lo:hi],
                    {n: v[lo:hi] for n, v in scored.per_plugin.items()},
                    scored.counts if i == 0 else {},  # the batch's counts once: callers sum them
                    {n: v[lo:hi] for n, v in scored.raw.items()},
                    scored.metrics,  # the batch's averages, for each caller's share
                )
                lo = hi
            self._batch_cond.notify_all()
        return group[0]["result"]

    def _score_now(self, inputs: list[RewardInput]) -> Scored:
        self._call.metrics = {}
        raw_faults: list[Fault] = []
        per_plugin: dict[str, list[float | None]] = {}
        for name in self.names:
            values, faults = self._score_one(name, inputs)
            per_plugin[name] = values
            raw_faults += faults
        # a sample that no plugin scored (every one returned None) has no reward
        faulted = {(f.plugin, f.index) for f in raw_faults}
        for i in range(len(inputs)):
            if (
                self.names
                and all(per_plugin[n][i] is None for n in self.names)
                and not any((n, i) in faulted for n in self.names)
            ):
                raw_faults.append(
                    Fault(self.names[-1], "invalid", "no reward plugin scored this sample (every one returned None)", i)
                )
        scored = self._finish(inputs, per_plugin, raw_faults)
        scored.metrics = dict(self._call.metrics)
        return scored

    def score_plugin_result(self, name: str, inputs: Sequence[RewardInput]) -> Scored:
        """One plugin over the inputs (TRL calls each reward function on its own)."""
        inputs = list(inputs)
        values, faults = self._score_one(name, inputs)
        return self._finish(inputs, {name: values}, faults)

    def score_plugin(self, name: str, inputs: Sequence[RewardInput]) -> list[float | None]:
        return self.score_plugin_result(name, inputs).per_plugin[name]

    def _finish(
        self, inputs: list[RewardInput], per_plugin: dict[str, list[float | None]], faults: list[Fault]
    ) -> Scored:
        raw = {n: list(v) for n, v in per_plugin.items()}
        for f in faults:
            if f.outcome == "nonfinite":
                raw[f.plugin][f.index] = f.value
        counts = Counter(f.outcome for f in faults)
        bad_samples = {f.index for f in faults}
        policy = self.settings.on_error
        for f in faults:
            per_plugin[f.plugin][f.index] = 0.0 if policy == "zero" else None
        totals = []
        for i in range(len(inputs)):
            present = [(n, scores[i]) for n, scores in per_plugin.items() if scores[i] is not None]
            if not present and i in bad_samples:
                counts["skipped"] += 1
            totals.append(sum(self.weights.get(n, 1.0) * v for n, v in present))
        with self._lock:
            self._step_counts.update(counts)
            self._run_counts.update({"samples": len(inputs), "faulted": len(bad_samples)})
            run_samples, run_faulted = self._run_counts["samples"], self._run_counts["faulted"]
        for f in faults[:3] if faults else []:
            self._report(f, inputs[f.index])
        if faults:
            first = faults[0]
            where = (
                f"reward '{first.plugin}' {first.outcome[:-1] if first.outcome.endswith('s') else first.outcome}: "
                f"{first.message.splitlines()[-1] if first.message else ''}"
            )
            if policy == "fail":
                raise RewardFailure(
                    f"{where} (row: {_row_text(inputs[first.index], 200)}); rollout_workers.on_error is 'fail': "
                    "fix the plugin or set rollout_workers.on_error to zero or skip"
                )
            if run_samples >= MIN_SAMPLES_FOR_THRESHOLD and run_faulted / run_samples > self.settings.error_threshold:
                raise RewardFailure(
                    f"{where}; {run_faulted} of {run_samples} samples so far had a reward fault, over "
                    f"rollout_workers.error_threshold ({self.settings.error_threshold}): fix the plugin or raise "
                    "the threshold"
                )
        return Scored(totals, per_plugin, {k: int(v) for k, v in counts.items()}, raw)

    def _report(self, fault: Fault, x: RewardInput) -> None:
        record = {
            "kind": "reward_fault",
            "plugin": fault.plugin,
            "outcome": fault.outcome,
            "error": fault.message,
            "row": _row_text(x),
            "time": time.time(),
        }
        with self._lock:
            self._logged += 1
            quiet = self._logged > 20
        if not quiet:
            log.warning("reward '%s' %s on row %s:\n%s", fault.plugin, fault.outcome, record["row"], fault.message)
            if self.on_fault is not None:
                self.on_fault(record)
        if self.fault_log is not None:
            with open(self.fault_log, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")

    def _chunks(self, n: int) -> list[tuple[int, int]]:
        size = max(1, self.settings.batch_size)
        return [(i, min(i + size, n)) for i in range(0, n, size)]

    def _score_one(self, name: str, inputs: list[RewardInput]) -> tuple[list[float | None], list[Fault]]:
        n = len(inputs)
        values: list[float | None] = [None] * n
        faults: list[Fault] = []
        chunk_metrics: list[tuple[dict, int]] = []
        if n == 0:
            return values, faults

        def absorb(lo: int, hi: int, raw: Any = None, outcome: str | None = None, message: str = "") -> None:
            if outcome is not None:
                faults.extend(Fault(name, outcome, message, i) for i in range(lo, hi))
                return
            chunk_values, chunk_faults = check_scores(raw, hi - lo)
            values[lo:hi] = chunk_values
            for i, (o, m) in sorted(chunk_faults.items()):
                faults.append(Fault(name, o, m, lo + i, float(m.split()[-1]) if o == "nonfinite" else None))

        if self.settings.mode == "inline" or name in self._inline_only:
            fn = self._inline_fn(name)
            for lo, hi in self._chunks(n):
                try:
                    raw = fn(inputs[lo:hi])
                except Exception:
                    absorb(lo, hi, outcome="errors", message=_first_lines(traceback.format_exc()))
                    continue
                if getattr(fn, "last_metrics", None) is not None:
                    chunk_metrics.append((dict(fn.last_metrics), hi - lo))
                absorb(lo, hi, raw)
            self._merge_metrics(name, chunk_metrics)
            return values, faults

        pool = self._get_pool()
        if pool is None:
            return self._score_one(name, inputs)
        import pebble

        from concurrent.futures.process import BrokenProcessPool

        slots = self._slots(name)  # max_concurrency, over every call of this plugin (verl makes many at once)
        pending = list(self._chunks(n))
        running: dict[Future, tuple[int, int]] = {}
        broken = False  # pebble gave the pool up: a new one serves the chunks still to run
        while pending or running:
            if broken and not running:
                pool, broken = self._replace_pool(pool), False
            while pending and not broken and slots.acquire(blocking=not running):
                lo, hi = pending.pop(0)
                try:
                    fut = pool.schedule(
                        _score_chunk, args=(self._specs_json, name, inputs[lo:hi]), timeout=self.settings.timeout_s
                    )
                except RuntimeError:  # "Unexpected error within the Pool": it broke since the last chunk
                    slots.release()
                    pending.insert(0, (lo, hi))
                    broken = True
                    break
                running[fut] = (lo, hi)
            if not running:
                continue
            done, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for fut in done:
                slots.release()
                lo, hi = running.pop(fut)
                try:
                    raw = fut.result()
                except FutureTimeout:
                    absorb(
                        lo,
                        hi,
                        outcome="timeouts",
                        message=f"ran past rollout_workers.timeout_s ({self.settings.timeout_s} s); its worker was "
                        "killed and replaced",
                    )
                except pebble.ProcessExpired as exc:
                    absorb(lo, hi, outcome="crashes", message=f"its worker process died (exit code {exc.exitcode})")
                except BrokenProcessPool as exc:  # a worker died where pebble lost track of its task: a crash too
                    absorb(lo, hi, outcome="crashes", message=f"its worker process died and broke the pool ({exc})")
                    broken = True
                except Exception as exc:
                    remote = getattr(exc, "traceback", "") or ""
                    absorb(lo, hi, outcome="errors", message=_first_lines(remote or f"{type(exc).__name__}: {exc}"))
                else:
                    raw, metrics = raw
                    if metrics is not None:
                        chunk_metrics.append((metrics, hi - lo))
                    absorb(lo, hi, raw)
        self._merge_metrics(name, chunk_metrics)
        return values, sorted(faults, key=lambda f: f.index)

    def _merge_metrics(self, name: str, chunks: list[tuple[dict, int]]) -> None:
        """A plugin's extra metrics (`last_metrics`) of one call: each chunk's, averaged by its samples."""
        if not chunks:
            return
        merged: dict[str, float] = {}
        for key in {k for metrics, _ in chunks for k in metrics}:
            parts = [(float(m[key]), n) for m, n in chunks if isinstance(m.get(key), (int, float))]
            if parts:
                merged[key] = sum(v * n for v, n in parts) / sum(n for _, n in parts)
        self.last_metrics[name] = merged
        if hasattr(self._call, "metrics"):
            self._call.metrics[name] = merged

    def _slots(self, name: str) -> threading.Semaphore:
        with self._lock:
            if name not in self._semaphores:
                self._semaphores[name] = threading.Semaphore(self.settings.max_concurrency or self.settings.num_workers)
            return self._semaphores[name]

    def _inline_fn(self, name: str) -> Callable:
        if name not in self._inline:
            i = self.names.index(name)
            self._inline[name] = build_reward(self.specs[i], i)
        return self._inline[name]

    # -- environment steps and other calls

    def call(self, fn: Callable, *args: Any) -> Any:
        """Run a picklable callable in a worker with the pool's timeout (inline in inline mode).
        Raises TimeoutError / RuntimeError(crash) / the callable's exception."""
        pool = self._get_pool() if self.settings.mode != "inline" else None
        if pool is None:
            return fn(*args)
        import pebble

        fut = pool.schedule(_call, args=(fn, args), timeout=self.settings.timeout_s)
        try:
            return fut.result()
        except pebble.ProcessExpired as exc:
            raise RuntimeError(f"worker process died (exit code {exc.exitcode})") from exc


# --- the process-wide scorer of an engine process -------------------------------------------------

_scorer: RewardScorer | None = None
_scorer_lock = threading.Lock()


def engine_scorer() -> RewardScorer:
    """The run's scorer in this engine process, from RLBRIDGE_REWARDS and RLBRIDGE_ROLLOUT_WORKERS."""
    global _scorer
    with _scorer_lock:
        if _scorer is None:
            from rlbridge.engine.events import EVENTS_ENV, REWARDS_ENV, write_event

            fault_log = os.environ.get(FAULT_LOG_ENV)
            if not fault_log and os.environ.get(EVENTS_ENV):
                fault_log = str(Path(os.environ[EVENTS_ENV]).parent / "reward_faults.jsonl")
            specs = json.loads(os.environ.get(REWARDS_ENV) or "[]")
            if specs:  # which rewards go to the pool is decided here, with this process's plugins
                from rlbridge.contract.registry import get_plugin_manager

                specs = specs_with_factories(specs, get_plugin_manager())
            _scorer = RewardScorer(specs, None, fault_log=fault_log, on_fault=write_event)
        return _scorer


def reset_engine_scorer() -> None:
    """Close and forget this process's scorer (tests that change RLBRIDGE_REWARDS between runs), and the
    threads sized to it (scoring_executor)."""
    global _scorer, _executor
    with _executor_lock:
        if _executor is not None:
            _executor.shutdown(wait=False)
        _executor = None
    with _scorer_lock:
        if _scorer is not None:
            _scorer.close()
        _scorer = None


_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def scoring_executor() -> ThreadPoolExecutor:
    """This process's threads for reward and environment calls made from an engine's event loop: one per
    sample the worker pool can take at once (rollout_workers: max_concurrency, else num_workers, calls of
    batch_size samples). verl's reward loop and OpenRLHF's agent executor await every sample of a batch at
    once; asyncio.to_thread's default executor has min(32, cpus + 4) threads (6 on 2 cores), which would cap
    the samples in flight, and with them a latency-bound reward's concurrency, whatever the pool's size."""
    global _executor
    with _executor_lock:
        if _executor is None:
            threads = min(max(1, engine_scorer().settings.samples_in_flight), 512)  # a bound on idle threads
            _executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rlbridge-scoring")
        return _executor
