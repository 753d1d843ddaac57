"""What to change after a failure: one function per failure kind (`_HINTS`), each naming the knob and, where
the run's own config allows, a value for it. `hint()` is what rlbridge.diagnosis.causes.classify puts in
`failure.hint`, and what the hang watchdog prints. Imports no engine; reads the config and the disk only."""

from __future__ import annotations

import os
import re
from pathlib import Path

_RESTARTS = "training.max_restarts=2 restarts it from the last complete checkpoint"


class _Knobs:
    """The config sections a hint reads (any may be None: a hint without a config still names the knob)."""

    def __init__(self, config) -> None:
        self.config = config
        self.tr = getattr(config, "training", None)
        self.ro = getattr(config, "rollout", None)
        self.ck = getattr(config, "checkpoint", None)
        self.rw = getattr(config, "rollout_workers", None)


def _hint_cuda_oom(k: _Knobs, evidence: str, run_dir: Path | None) -> str:
    parts = []
    in_rollout = any(w in evidence for w in ("cumem_allocator", "cache blocks", "KV cache", "vllm", "EngineCore"))
    if k.ro is not None and in_rollout:
        parts.append(
            f"rollout.gpu_memory_utilization={max(0.05, round(k.ro.gpu_memory_utilization - 0.1, 2))} "
            f"(now {k.ro.gpu_memory_utilization}; it ran out in the rollout engine)"
        )
    if k.tr is not None:
        micro = k.tr.micro_batch_size
        parts.append(
            f"training.micro_batch_size={max(1, micro // 2)} (now {micro})"
            if micro and micro > 1
            else "training.micro_batch_size=1 or training.max_tokens_per_device (a token budget per device)"
        )
        if not k.tr.gradient_checkpointing:
            parts.append("training.gradient_checkpointing=true")
    return (
        "GPU memory ran out: set "
        + (", ".join(parts) or "a smaller training.micro_batch_size")
        + "; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True helps when reserved memory is much above allocated"
    )


def _hint_host_oom(k: _Knobs, evidence: str, run_dir: Path | None) -> str:
    parts = []
    if k.rw is not None and k.rw.num_workers > 1:
        parts.append(f"rollout_workers.num_workers={k.rw.num_workers // 2} (now {k.rw.num_workers})")
    if k.tr is not None and k.tr.micro_batch_size and k.tr.micro_batch_size > 1:
        parts.append(f"training.micro_batch_size={k.tr.micro_batch_size // 2} (now {k.tr.micro_batch_size})")
    limit = re.search(r"limit (\d+) MiB", evidence)
    more = f"give the job more memory than its {limit.group(1)} MiB limit" if limit else "give the job more host memory"
    return (
        f"the kernel's (or Ray's) OOM killer ended a process of the run: {more}, or lower its peak: "
        + (", ".join(parts) or "smaller batches (training.micro_batch_size) or fewer reward workers")
        + f"; {_RESTARTS}"
    )


def _hint_ray_actor_died(k: _Knobs, evidence: str, run_dir: Path | None) -> str:
    return (
        "a Ray worker died (Ray's exit detail above; its own log is failure.log): if it says SIGKILL, "
        f"look for an OOM kill on the node (dmesg); {_RESTARTS}"
    )


def _hint_vllm_engine_died(k: _Knobs, evidence: str, run_dir: Path | None) -> str:
    gmu = (
        f"rollout.gpu_memory_utilization={max(0.05, round(k.ro.gpu_memory_utilization - 0.1, 2))} (now "
        f"{k.ro.gpu_memory_utilization})"
        if k.ro
        else "a lower rollout.gpu_memory_utilization"
    )
    return (
        "the vLLM engine died: its traceback is in failure.log / engine.log; if it ran out of memory set "
        f"{gmu}; {_RESTARTS}"
    )


def _hint_collective_timeout(k: _Knobs, evidence: str, run_dir: Path | None) -> str:
    return (
        "a rank did not reach a collective (stopped, died or much slower than its peers): `rlbridge stacks "
        "RUN_DIR` "
        "while it hangs shows each rank's frame; NCCL_DEBUG=INFO names the peer; if the step is legitimately "
        "that long, "
        f"raise the engine's collective timeout through backend_options; {_RESTARTS}"
    )


def _hint_reward_faults(k: _Knobs, evidence: str, run_dir: Path | None) -> str:
    frac = re.search(r"(\d+) of (\d+) samples", evidence)
    now = k.rw.error_threshold if k.rw is not None else 0.5
    if frac:
        seen = int(frac.group(1)) / max(1, int(frac.group(2)))
        if seen >= 1.0:
            return (
                f"every sample so far ({frac.group(2)}) had a fault: the reward plugin named above is broken "
                "for this "
                "data; fix it (its error and row are the evidence, reward_faults.jsonl has them all)"
            )
        return (
            f"fix the reward plugin named above ({frac.group(1)} of {frac.group(2)} samples faulted = {seen:.2f}); "
            f"only if those rows may score 0, raise rollout_workers.error_threshold above {seen:.2f} (now {now})"
        )
    return "fix the reward plugin named above, or set rollout_workers.on_error=zero (or skip) to score its faults as 0"


def _hint_nonfinite(k: _Knobs, evidence: str, run_dir: Path | None) -> str:
    fields = re.search(r"had non-finite ([\w/., ]+?) \(", evidence)
    names = fields.group(1) if fields else "a metric"
    if names.startswith("reward/") and all(n.strip().startswith("reward/") for n in names.split(",")):
        return (
            f"a reward plugin returned NaN/inf ({names}): fix it, or rollout_workers.on_error=zero scores such "
            "samples 0"
        )
    lr = f"training.lr={k.tr.lr / 10:g} (now {k.tr.lr:g})" if k.tr is not None else "a lower training.lr"
    clip = "" if k.tr is None or k.tr.grad_clip else ", training.grad_clip=1.0"
    return (
        f"{names} became NaN/inf: lower the learning rate, {lr}{clip}; training.on_nonfinite=warn records it "
        "and goes on"
    )


def _hint_checkpoint_write_failed(k: _Knobs, evidence: str, run_dir: Path | None) -> str:
    where = (
        str(k.ck.dir)
        if k.ck is not None and k.ck.dir
        else str(run_dir / "checkpoints" if run_dir else "checkpoint.dir")
    )
    if re.search(r"Read-only file system|Permission denied|PermissionError", evidence):
        return (
            f"checkpoint.dir ({where}) is not writable by uid {os.getuid()}: make it writable or set "
            "checkpoint.dir to a writable directory"
        )
    free = free_mib(where)
    size = newest_checkpoint_mib(where)
    if free is not None and size is not None and free > 4 * size and "No space" not in evidence:
        return (
            f"writing a checkpoint to {where} failed ({free:.0f} MiB free there, so not for space): the evidence "
            "names the error; set checkpoint.dir to a local, writable disk"
        )
    need = f"; one checkpoint is about {size:.0f} MiB" if size else ""
    keep = "checkpoint.keep_last=1" if k.ck is None or k.ck.keep_last != 1 else "a larger disk"
    return (
        f"the disk of checkpoint.dir ({where}) is full ({free:.0f} MiB free{need}): free space, set {keep}, "
        "or point checkpoint.dir at a larger disk"
        if free is not None
        else f"the disk of checkpoint.dir ({where}) is full: free space, set {keep}, or point checkpoint.dir at "
        "a larger disk"
    )


def _hint_engine_import(k: _Knobs, evidence: str, run_dir: Path | None) -> str:
    backend = getattr(k.config, "backend", "ENGINE")
    return (
        f"the engine's Python environment lacks a module or has the wrong version: `rlbridge env create {backend}` "
        "rebuilds it (engine_env: auto uses it), or install a supported version; `rlbridge backends` lists the "
        "ranges"
    )


def _hint_config_refused(k: _Knobs, evidence: str, run_dir: Path | None) -> str:
    named = [
        f"backend_options.{engine}.{key}={value}"
        for engine, options in (getattr(k.config, "backend_options", None) or {}).items()
        for key, value in (options or {}).items()
        if str(value) and re.search(rf"\b{re.escape(str(value))}\b", evidence)
    ]
    which = f"it names the value of {', '.join(named)}: change or remove it" if named else "change the setting it names"
    return (
        f"the engine refused the plan at start (its message is the evidence): {which}; "
        "`rlbridge plan CONFIG --check` runs the engine's own config check without training"
    )


def _hint_engine_process_died(k: _Knobs, evidence: str, run_dir: Path | None) -> str:
    return f"a process of the run was killed from outside (no OOM kill recorded): see who sent the signal; {_RESTARTS}"


def _hint_hang(k: _Knobs, evidence: str, run_dir: Path | None) -> str:
    bound = (
        "training.hang_factor / training.hang_min_s / training.hang_first_step_s set the bound "
        f"(now {k.tr.hang_factor:g} / {k.tr.hang_min_s:g} s / {k.tr.hang_first_step_s} s)"
        if k.tr is not None
        else "training.hang_factor, hang_min_s and hang_first_step_s set the bound"
    )
    if "reward worker" in evidence and k.rw is not None:
        return (
            f"a reward call never returned: fix the plugin or the server it waits on; rollout_workers.timeout_s="
            f"{min(k.rw.timeout_s, 60):g} (now {k.rw.timeout_s:g}) ends such a call and scores it as a fault "
            "instead of "
            f"stalling the run; {bound}; {_RESTARTS}"
        )
    return (
        f"no step within the bound: the stuck process and its frame are named above (stacks file); {bound}; {_RESTARTS}"
    )


_HINTS = {
    "cuda_oom": _hint_cuda_oom,
    "host_oom": _hint_host_oom,
    "ray_actor_died": _hint_ray_actor_died,
    "vllm_engine_died": _hint_vllm_engine_died,
    "collective_timeout": _hint_collective_timeout,
    "reward_faults": _hint_reward_faults,
    "nonfinite": _hint_nonfinite,
    "checkpoint_write_failed": _hint_checkpoint_write_failed,
    "engine_import": _hint_engine_import,
    "config_refused": _hint_config_refused,
    "engine_process_died": _hint_engine_process_died,
    "hang": _hint_hang,
}
"""Failure kind -> its hint: what to change, a knob with a value computed from the config where one can be."""


def hint(kind: str, config=None, *, evidence: str = "", run_dir: Path | None = None) -> str:
    """What to change after a failure of this kind: a knob, with a value computed from the config
    where one can be (_HINTS, one function per kind)."""
    found = _HINTS.get(kind)
    if found is None:
        return "an error nothing above explains: read error.txt and engine.log (the traceback names the code)"
    return found(_Knobs(config), evidence, run_dir)


def free_mib(path: str) -> float | None:
    """MiB free on the file system that holds `path` (or its nearest existing parent); None if unreadable."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        st = os.statvfs(p)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize / 2**20


def newest_checkpoint_mib(path: str) -> float | None:
    """The size in MiB of the newest checkpoint under `path`: what the next one will need."""
    root = Path(path)
    if not root.is_dir():
        return None
    dirs = sorted((d for d in root.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime)
    if not dirs:
        return None
    return sum(f.stat().st_size for f in dirs[-1].rglob("*") if f.is_file()) / 2**20
