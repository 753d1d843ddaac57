"""Why a run failed, in one record: `summary.json`'s `failure: {kind, process, role, evidence, hint,
retryable}` (docs/faults.md has the table).

The classifier reads what a failed run leaves: the exception (and its traceback), the `failure`
launchers attach (the Ray actor or engine process that died, its error lines and log), the end of
engine.log and of that process's log, and the kernel's OOM-kill counters taken before and after the
run (/proc/vmstat and the run's memory cgroup). Each kind has a hint that names the knob to change,
with a value where one can be computed from the run's own config. `retryable` says whether
`training.max_restarts` restarts the run after it: a failure of the machine or of one process
(killed, OOM-killed, a stuck collective, a hang) is; one that the same config would meet again
(a config the engine refuses, a missing engine, a broken reward, NaN, a full disk) is not.
Imports no engine; reads files only.
"""

from __future__ import annotations

import functools
import os
import re
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlbridge.contract.backend import roles_of_actor_class
from rlbridge.diagnosis.hints import free_mib, hint, newest_checkpoint_mib

# kind -> whether training.max_restarts restarts the run after it (docs/faults.md says why for each)
RETRYABLE: dict[str, bool] = {
    "host_oom": True,  # memory is shared with the rest of the host; a fresh process starts unfragmented
    "cuda_oom": False,  # the same config at the same step allocates the same: change the config
    "ray_actor_died": True,
    "vllm_engine_died": True,
    "collective_timeout": True,  # a rank stopped or lost its peer: transient at scale
    "reward_faults": False,  # the plugin is broken for this data: retrying scores the same rows again
    "nonfinite": False,  # a resumed run recomputes the same steps from the same state
    "checkpoint_write_failed": False,  # the disk stays full / the directory stays read-only
    "engine_import": False,
    "config_refused": False,
    "engine_process_died": True,  # killed from outside (a signal) without an OOM record
    "hang": True,
    "error": False,  # an exception nothing above explains: most likely a bug that would repeat
}


@dataclass
class OomCounters:
    """The kernel's OOM-kill counts when the run started: host-wide (/proc/vmstat `oom_kill`) and in
    the memory cgroup of the run's process (v2 memory.events, v1 memory.oom_control), with its limit."""

    host: int | None = None
    cgroup: str | None = None
    cgroup_count: int | None = None
    limit_bytes: int | None = None

    @classmethod
    def now(cls, pid: int | None = None) -> "OomCounters":
        path = memory_cgroup(pid or os.getpid())
        count, limit = _cgroup_oom(path) if path else (None, None)
        return cls(_vmstat_oom(), path, count, limit)

    def kills_since(self) -> list[str]:
        """Evidence of OOM kills since `now()`: one line per counter that grew."""
        out = []
        host = _vmstat_oom()
        if self.host is not None and host is not None and host > self.host:
            out.append(f"/proc/vmstat oom_kill {self.host} -> {host} (the kernel's OOM killer ran during the run)")
        if self.cgroup:  # the engine processes inherit this process's cgroup
            after, limit = _cgroup_oom(self.cgroup)
            before, path = self.cgroup_count, self.cgroup
            if before is not None and after is not None and after > before:
                where = f"memory cgroup {path}" + (f" (limit {limit / 2**20:.0f} MiB)" if limit else "")
                out.append(f"{where}: oom_kill {before} -> {after}")
        return out


def memory_cgroup(pid: int) -> str | None:
    """The directory of `pid`'s memory cgroup (v2 unified or v1 memory controller), if mounted here."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        if "memory" in controllers.split(","):
            path = Path("/sys/fs/cgroup/memory") / rel.lstrip("/")
            if path.is_dir():
                return str(path)
    for line in lines:
        if line.startswith("0::"):
            rel = line.split(":", 2)[2].lstrip("/")
            for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
                if (root / rel / "memory.events").exists():
                    return str(root / rel)
    return None


def _cgroup_oom(path: str) -> tuple[int | None, int | None]:
    base = Path(path)
    count = limit = None
    for name in ("memory.events", "memory.oom_control"):
        try:
            for line in (base / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    count = int(value)
        except (OSError, ValueError):
            continue
    for name in ("memory.max", "memory.limit_in_bytes"):
        try:
            text = (base / name).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:
            limit = int(text)
    return count, limit


def _vmstat_oom() -> int | None:
    try:
        for line in Path("/proc/vmstat").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


# --- patterns ---------------------------------------------------------------------------------------

# (kind, pattern); the first kind with a match in the error text wins, then the same in the logs
PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("nonfinite", re.compile(r"NonFiniteError|training\.on_nonfinite: step \d+ had non-finite")),
    (
        "reward_faults",
        re.compile(r"RewardFailure|over rollout_workers\.error_threshold|rollout_workers\.on_error is 'fail'"),
    ),
    (
        "cuda_oom",
        re.compile(
            r"CUDA out of memory|torch\.(?:cuda\.)?OutOfMemoryError|CUDA error: out of memory|cuda error: out of "
            r"memory|"
            r"HIP out of memory|CUBLAS_STATUS_ALLOC_FAILED|No available memory for the cache blocks"
        ),
    ),
    (
        "host_oom",
        re.compile(
            r"ray\.exceptions\.OutOfMemoryError|Task was killed due to the node running low on memory|"
            r"killed due to memory pressure \(OOM\)|Out of memory: Killed process"
        ),
    ),
    (
        "collective_timeout",
        re.compile(
            r"Watchdog caught collective operation timeout|WorkNCCL\(.*Timeout\(ms\)|NCCL "
            r"(?:communicator|operation).*tim(?:ed|e) ?out|"
            r"DistBackendError|[Gg]loo.*[Tt]imed out|Timed out waiting \d+ms for (?:recv|send) operation|"
            r"gloo.*Connection closed by peer|ProcessGroupGloo.*timeout"
        ),
    ),
    (
        "checkpoint_write_failed",
        re.compile(r"No space left on device|ENOSPC|Disk quota exceeded|PytorchStreamWriter failed writing file"),
    ),
    (
        "vllm_engine_died",
        re.compile(
            r"EngineDeadError|AsyncEngineDeadError|EngineCore encountered (?:a fatal error|an issue)|"
            r"Engine core proc \S+ died unexpectedly|EngineCore_DP\d+ died|Engine process failed to start"
        ),
    ),
    (
        "ray_actor_died",
        re.compile(
            r"ActorDiedError|RayActorError|The actor died unexpectedly|WorkerCrashedError|"
            r"The actor is dead because its worker process has died|Worker exit type|"
            # Ray's own processes (raylet, GCS) died: the workers on that node went with them
            r"RaySystemError|NodeDiedError|LocalRayletDiedError|OwnerDiedError|has been marked dead"
        ),
    ),
    (
        "engine_import",
        re.compile(
            r"ModuleNotFoundError|ImportError: |cannot import name|No module named|undefined symbol|"
            r"EngineNotAvailableError|is outside the supported range|is not installed in this environment|"
            r"(?:requires|needs) \S+ ?[<>=!~]=? ?[\d.]+,? but (?:you have|found|\S+ is installed)"
        ),
    ),
]

# a line of Ray's account of a death: "Worker exit type: SYSTEM_ERROR Worker exit detail: ..."
_RAY_EXIT = re.compile(r"Worker exit type: \S+(?: Worker exit detail: [^.]*\.?)?")
# the libraries engines build their configs and models with; the engines' own packages come from the backends
_ENGINE_LIBRARIES = ("transformers", "deepspeed", "vllm", "omegaconf", "hydra", "peft", "accelerate")
_CONFIG_ERRORS = re.compile(
    r"^(?:ValueError|AssertionError|TypeError|KeyError|omegaconf\.errors\.\w+|hydra\.errors\.\w+|"
    r"ConfigAttributeError|ConfigKeyError|ValidationError|NotImplementedError)\b"
)
# frames of the engines' checkpoint writers: an error raised under one is a failed checkpoint write. A
# full disk does not always say so: torch.save reports "basic_ios::clear: iostream error" and
# "[enforce fail at inline_container.cc] unexpected pos" (measured on a 600 KiB tmpfs under TRL)
_SAVE_FRAMES = re.compile(
    r"in (?:_save_checkpoint|save_checkpoint|_save_optimizer_and_scheduler|save_pretrained|save_model|"
    r"_save_rng_state|save_file)\n|torch/serialization\.py\", line \d+, in save\n"
)
_ARGPARSE = re.compile(r"error: (?:unrecognized arguments|argument \S+|the following arguments are required)")

# a traceback through vLLM's engine core (its step) or its model worker: where vLLM runs in the trainer's
# own process (TRL colocate: external_launcher turns vLLM's engine-core process off, vllm/config/parallel.py)
# its failure reaches the trainer as the raw exception; in a process of its own it would be EngineDeadError
_VLLM_CORE = re.compile(
    r'File "[^"]*/vllm/v1/(?:engine/core\.py", line \d+, in (?:step|step_with_batch_queue|execute_model)|'
    r'worker/\w+\.py", line \d+, in (?:execute_model|sample_tokens|_model_forward))\b'
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # Ray colours its log prefixes
VLLM_CLASSES = ("LLMRayActor", "RolloutRayActor", "vLLMHttpServer", "AsyncvLLMServer", "EngineCore")


def classify(
    exc: BaseException | None,
    run_dir: Path | str,
    config=None,
    *,
    steps_done: int = 0,
    oom: OomCounters | None = None,
    actor_roles: dict[str, tuple[str, ...]] | None = None,
    in_process: bool = False,
) -> dict[str, Any]:
    """The failure record of a failed run: what launchers attached (process, how, error, log, via)
    plus kind, role, evidence, hint and retryable."""
    run_dir = Path(run_dir)
    attached = dict(getattr(exc, "failure", None) or {}) if exc is not None else {}
    if attached.get("kind") == "hang":  # the watchdog already said which process and frame
        attached.setdefault("retryable", RETRYABLE["hang"])
        return attached
    primary = _ANSI.sub(
        "", _exception_text(exc) + "\n" + "\n".join(attached.get("error") or []) + "\n" + str(attached.get("how") or "")
    )
    logs = _ANSI.sub("", _log_text(run_dir, attached.get("log")))
    kind, evidence = _match(primary)
    if kind is None:
        kind, evidence = _match(logs, strong_only=True)
    oom_lines = oom.kills_since() if oom is not None else []
    killed = "SIGKILL" in str(attached.get("how", "")) or "SIGKILL" in primary or "Worker exit type" in primary
    if oom_lines and (kind in (None, "ray_actor_died", "engine_process_died", "vllm_engine_died") or killed):
        kind, evidence = "host_oom", "; ".join(oom_lines)
    if kind is None and exc is not None:  # rlbridge's own refusals name the field and the fix already
        from rlbridge.errors import CapabilityError, ConfigError, EngineNotAvailableError, PluginNotFoundError

        if isinstance(exc, EngineNotAvailableError):
            kind, evidence = "engine_import", f"{type(exc).__name__}: {exc}"
        elif isinstance(exc, (ConfigError, CapabilityError, PluginNotFoundError)):
            kind, evidence = "config_refused", f"{type(exc).__name__}: {exc}"
    if kind is None and exc is not None and _SAVE_FRAMES.search(primary):
        kind, evidence = "checkpoint_write_failed", _last_exception_line(primary)
        where = str(getattr(getattr(config, "checkpoint", None), "dir", None) or run_dir / "checkpoints")
        free = free_mib(where)
        if free is not None:
            size = newest_checkpoint_mib(where)
            full = free < 1 or (size is not None and free < size)
            evidence += f" (raised while writing a checkpoint; {free:.1f} MiB free where checkpoint.dir is" + (
                ": the disk is full)" if full else ")"
            )
    if kind is None and _config_refused(exc, primary, steps_done):
        kind, evidence = "config_refused", _last_exception_line(primary)
    own = getattr(exc, "engine_traceback", None) or primary  # the engine's own exception line, not the launcher's
    if kind is None and exc is not None:
        core = _VLLM_CORE.search(primary)
        if core:  # a vLLM engine in the trainer's own process died with an exception, not an EngineDeadError
            kind, evidence = (
                "vllm_engine_died",
                f"{_last_exception_line(own)} (raised in vLLM's engine core: {core.group(0).strip()})",
            )
            host = attached.get("process") or ("the rlbridge train process" if in_process else "the engine process")
            attached["process"] = f"the vLLM engine inside {host}"
    # an engine process that ended with an exception of its own (its traceback came back) did not die:
    # that exception is the cause ('error' below when nothing above explains it)
    ended = str(attached.get("how", ""))
    if kind is None and (
        re.search(r"was killed by SIG\w+", ended)
        or (re.search(r"exited with code -?\d+", ended) and not getattr(exc, "engine_traceback", None))
    ):
        kind, evidence = "engine_process_died", str(attached["how"])
    if kind is None:
        kind, evidence = "error", _last_exception_line(own)
    if kind == "ray_actor_died":  # Ray's own account of the death is the evidence
        detail = _RAY_EXIT.search(primary) or _RAY_EXIT.search(logs)
        if detail:
            evidence = f"{evidence}; {detail.group(0)}" if detail.group(0) not in evidence else evidence
    process = attached.get("process") or (
        "the rlbridge train process (engine in process)" if in_process else "engine process"
    )
    if kind in ("ray_actor_died", "host_oom") and any(c in process for c in VLLM_CLASSES):
        kind = "vllm_engine_died" if kind == "ray_actor_died" else kind
    role = role_of(process, actor_roles or {}, kind)
    out = {
        **attached,
        "kind": kind,
        "process": process,
        "role": role,
        "evidence": evidence[:600],
        "hint": hint(kind, config, evidence=evidence, run_dir=run_dir),
        "retryable": RETRYABLE[kind],
    }
    return out


def _exception_text(exc: BaseException | None) -> str:
    """The exception with its traceback, and the engine process's own traceback where the launcher
    passed it on (rlbridge.run.launch: the engine ran in a process of its own)."""
    if exc is None:
        return ""
    try:
        text = "".join(traceback.format_exception(exc))
    except Exception:
        text = f"{type(exc).__name__}: {exc}"
    engine = getattr(exc, "engine_traceback", None)
    return f"{engine}\n{text}" if isinstance(engine, str) and engine else text


def _log_text(run_dir: Path, log: str | None, tail_bytes: int = 200_000) -> str:
    texts = []
    for path in {run_dir / "engine.log", *([Path(log)] if log and Path(log).is_file() else [])}:
        try:
            with open(path, "rb") as fh:
                fh.seek(max(0, path.stat().st_size - tail_bytes))
                texts.append(fh.read().decode(errors="replace"))
        except OSError:
            continue
    return "\n".join(texts)


# kinds whose words in a log (not the error itself) are still conclusive: a warning that merely
# mentions a module ('No module named flash_attn') or a permission is not
_STRONG_IN_LOGS = {"cuda_oom", "host_oom", "collective_timeout", "vllm_engine_died"}


def _match(text: str, strong_only: bool = False) -> tuple[str | None, str]:
    for kind, pattern in PATTERNS:
        if strong_only and kind not in _STRONG_IN_LOGS:
            continue
        lines = []
        for found in pattern.finditer(text):
            start = text.rfind("\n", 0, found.start()) + 1
            end = text.find("\n", found.end())
            lines.append(text[start : end if end != -1 else None])
            if not lines[-1].startswith(" "):  # a message line, not a traceback's source line
                return kind, lines[-1].strip()
        if lines:
            return kind, lines[0].strip()
    return None, ""


def _config_refused(exc: BaseException | None, text: str, steps_done: int) -> bool:
    """An exception before the first step, raised in the engine's own config code, of the kinds
    config validation raises (or argparse's refusal): the engine refused the plan at start."""
    if steps_done > 0:
        return False
    if _ARGPARSE.search(text):
        return True
    last = _last_exception_line(text)
    return bool(
        _CONFIG_ERRORS.search(last.split("(")[0].split(": ")[-1] if last.startswith("ray.") else last)
        and _engine_frames().search(text)
    )


@functools.cache
def _engine_frames() -> re.Pattern[str]:
    """A traceback frame in an engine's package (every registered backend's) or a library engines configure with."""
    from rlbridge.contract.registry import get_plugin_manager

    packages = (*get_plugin_manager().engine_packages(), *_ENGINE_LIBRARIES)
    return re.compile(rf'File "[^"]*/(?:{"|".join(map(re.escape, packages))})/')


def _last_exception_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for line in reversed(lines):
        if re.match(r"^[\w.]+(Error|Exception|Exit|Interrupt|Failure)\b", line):
            return line.strip()
    return lines[-1].strip() if lines else ""


def role_of(process: str, actor_roles: dict[str, tuple[str, ...]], kind: str = "") -> str:
    """The process's part in the run: trainer, Ray actor (with its canonical roles), vLLM engine,
    reward worker, rlbridge (the user's process)."""
    actor = re.search(r"Ray actor (\S+)", process)
    if actor:
        name = actor.group(1)
        if any(c in name for c in VLLM_CLASSES):
            return f"vLLM engine (Ray actor {name})"
        roles = roles_of_actor_class(name.split(".")[0], actor_roles)  # ray::Class.method while it runs one
        return f"Ray actor {name}" + (f" ({'/'.join(roles)})" if roles else "")
    if "Ray driver" in process:
        return "trainer (Ray driver)"
    if "EngineCore" in process or "vLLM" in process:
        return "vLLM engine"
    if "reward" in process.lower():
        return "reward worker"
    return "trainer"
