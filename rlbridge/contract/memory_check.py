"""A run's memory prediction and the pre-flight check built on the memory model (rlbridge.contract.memory):
the inputs read from the machine (its memory, the GPU's) and from the run (the model's directory, the longest
training prompt), the check `rlbridge train` runs before anything starts with the cheapest fix it proposes, and
the per-device table `rlbridge plan --memory` prints."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlbridge.contract.config import RunConfig
from rlbridge.contract.memory import (
    MiB,
    PHASE_LABELS,
    Component,
    DeviceMemory,
    MemoryBehaviour,
    ModelShape,
    Prediction,
    Sizes,
    format_bytes,
    predict,
    read_shape,
    run_sizes,
)
from rlbridge.errors import ConfigError


# ---------------------------------------------------------------------------------- inputs from the machine and data
def machine_memory(root: Path = Path("/")) -> tuple[int | None, str]:
    """The memory this process's runs may use, and where the figure comes from: MemAvailable, or where a cgroup sets
    a limit and leaves less, that limit less what the cgroup uses (its reclaimable page cache not counted). None
    where neither can be read."""
    available: tuple[int | None, str] = (None, "unknown")
    try:
        for line in (root / "proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = (int(line.split()[1]) * 1024, "MemAvailable")
    except (OSError, ValueError, IndexError):
        pass
    for limit_file, usage_file, cache_key in (
        ("sys/fs/cgroup/memory.max", "memory.current", "inactive_file"),
        ("sys/fs/cgroup/memory/memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"),
    ):
        limit_path = root / limit_file
        try:
            raw = limit_path.read_text().strip()
        except OSError:
            continue
        if not raw.isdigit() or int(raw) >= 1 << 60:  # "max", or v1's huge number: no limit
            continue
        limit = int(raw)
        used = _read_int(limit_path.with_name(usage_file)) - _stat(limit_path.with_name("memory.stat"), cache_key)
        left = limit - max(used, 0)
        if available[0] is None or left < available[0]:
            available = (left, f"cgroup limit {format_bytes(limit)} less {format_bytes(max(used, 0))} in use")
        break
    return available


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return 0


def _stat(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def gpu_memory() -> int | None:
    """The first visible GPU's total memory, from nvidia-smi (no torch); None without one."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout
        return int(out.split()[0]) * MiB
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def longest_prompt(config: RunConfig, model_dir: str, plugins: Any = None, rows_checked: int = 2000) -> tuple[int, str]:
    """The prompt length to predict with: rollout.max_prompt_tokens, else the longest of the first `rows_checked`
    training prompts in the model's tokenizer (tokenizer.json through the `tokenizers` library; no torch)."""
    if config.rollout.max_prompt_tokens:
        return config.rollout.max_prompt_tokens, "rollout.max_prompt_tokens"
    from rlbridge.contract.data import load_rows

    path = Path(model_dir) / "tokenizer.json"
    try:
        from tokenizers import Tokenizer
    except ImportError:  # pragma: no cover - tokenizers comes with every engine extra
        Tokenizer = None  # noqa: N806
    rows = load_rows(config.data.train, config, "data.train", plugins)[:rows_checked]
    texts = [str(r.get(config.data.prompt_key, "")) for r in rows]
    if Tokenizer is None or not path.is_file():
        longest = max((len(t) for t in texts), default=1)
        return longest, "characters of the longest prompt (no tokenizer.json)"
    tok = Tokenizer.from_file(str(path))
    longest = max((len(e.ids) for e in tok.encode_batch(texts)), default=1)
    template = " (+ the chat template's tokens, not counted)" if config.model.use_chat_template else ""
    return longest, f"the longest of {len(texts)} training prompts{template}"


# ------------------------------------------------------------------------------------------- a run's prediction
def model_dir(path: str, field_name: str, plugins: Any = None) -> Path:
    """A local directory holding the config.json of the model `path` names: a directory, a builtin model (built on
    first use, as a run would), or a hub id found in the Hugging Face cache (never downloaded)."""
    from rlbridge.contract.models import materialize_path

    local = Path(materialize_path(path, field_name, plugins))
    if (local / "config.json").is_file():
        return local
    hub = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME", "~/.cache/huggingface")) / "hub")
    snapshots = sorted((hub.expanduser() / f"models--{path.replace('/', '--')}" / "snapshots").glob("*/config.json"))
    if snapshots:
        return snapshots[-1].parent
    raise ConfigError(
        f"{field_name}: '{path}' is not a local model directory and not in the Hugging Face cache, so its shape is "
        "unknown; download it once or point at its directory (`rlbridge train` runs it unchecked)"
    )


@dataclass
class RunInputs:
    """What a run's predictions share, read once: the model's shape, the prompt length, the device's memory."""

    shape: ModelShape
    critic_shape: ModelShape | None
    prompt: int
    prompt_from: str
    device_bytes: int | None
    device_from: str
    gpus: int

    def predict(self, config: RunConfig, behaviour: MemoryBehaviour, layout: dict[str, Any]) -> Prediction:
        prompt = self.prompt if behaviour.prompt_tokens is None else behaviour.prompt_tokens
        prediction = predict(
            config,
            self.shape,
            behaviour,
            layout,
            prompt,
            self.device_bytes,
            self.device_from,
            self.critic_shape,
            self.gpus,
        )
        source = "the engine pads to data's cap" if behaviour.prompt_tokens else self.prompt_from
        prediction.notes.insert(0, f"prompt: {prompt} tokens ({source}); response: {config.rollout.max_new_tokens}")
        return prediction


def run_inputs(config: RunConfig, plugins: Any = None, gpu_bytes: int | None = None) -> RunInputs:
    """Read the model's shape (building a builtin model), the longest prompt and the device's memory for `config`.
    `gpu_bytes`: one GPU's memory (default: the visible GPU's, else unknown)."""
    directory = model_dir(config.model.path, "model.path", plugins)
    shape = read_shape(directory)
    critic_shape = read_shape(model_dir(config.critic.path, "critic.path", plugins)) if config.critic.path else None
    if config.is_offline:
        prompt, prompt_from = config.offline.max_length, "offline.max_length"
    else:
        prompt, prompt_from = longest_prompt(config, str(directory), plugins)
    gpus = 0 if config.resources.gpus_per_node == "auto" else int(config.resources.gpus_per_node)
    if gpus:
        device, source = gpu_bytes or gpu_memory(), ("--gpu-memory" if gpu_bytes else "nvidia-smi")
        if device is None:
            source = "unknown (no GPU visible here; give --gpu-memory)"
    else:
        device, source = machine_memory()
    return RunInputs(shape, critic_shape, prompt, prompt_from, device, source, gpus)


def predict_run(
    config: RunConfig,
    backend: Any,
    plan: Any,
    layout: dict[str, Any],
    plugins: Any = None,
    gpu_bytes: int | None = None,
) -> Prediction | None:
    """The prediction for a prepared run (rlbridge.run.runner.prepare's config, backend and plan), or None when the
    backend declares no memory behaviour."""
    behaviour = backend.memory_behaviour(config, plan)
    if behaviour is None:
        return None
    return run_inputs(config, plugins, gpu_bytes).predict(config, behaviour, layout)


# ---------------------------------------------------------------------------------------------- the pre-flight check
def fit_check(
    config: RunConfig, backend: Any, plan: Any, layout: dict[str, Any], plugins: Any = None
) -> Prediction | None:
    """Refuse a run whose predicted peak exceeds the memory it has (one GPU's, or on CPU the machine's: the cgroup
    limit or MemAvailable), before anything starts: a ConfigError naming the role, the phase, the predicted and
    available bytes and the cheapest knob that fits (each suggestion predicted again, with the backend's own
    capability checks and plan). None when the backend declares no memory behaviour."""
    behaviour = backend.memory_behaviour(config, plan)
    if behaviour is None:
        return None
    try:
        inputs = run_inputs(config, plugins)
    except ConfigError as exc:  # a model whose shape cannot be read here is trained unchecked, said once
        print(f"warning: memory not checked before the run: {exc}", file=sys.stderr)
        return None
    prediction = inputs.predict(config, behaviour, layout)
    if prediction.device_bytes is None or prediction.fits():
        return prediction
    device, phase, peak = prediction.worst()
    top = (device or _largest(prediction)).top_component(phase)
    where = "the machine" if device is None else f"each {device.label.rstrip('s')}"
    fix = cheapest_fix(config, backend, layout, inputs)
    if fix is not None:
        overrides, fixed = fix
        change = " ".join(f"--set {k}={_show(v)}" for k, v in overrides.items())
        advice = f"the cheapest change that fits: {change} (predicted {format_bytes(fixed)})"
    else:
        advice = (
            "no single knob fits (micro batch, gradient checkpointing, gpu_memory_utilization, sharding, offload); "
            "use more devices or a smaller model"
        )
    available = prediction.device_bytes
    raise ConfigError(
        f"memory: the {top.role}'s {top.what} ({format_bytes(top.bytes)}) in the {PHASE_LABELS[phase]} phase brings "
        f"{where} to a predicted {format_bytes(peak)} ({peak:,} bytes), more than the {format_bytes(available)} "
        f"({available:,} bytes) available ({prediction.device_bytes_from}); {advice}; `rlbridge plan CONFIG "
        "--memory` shows every role and phase, --no-fit-check trains anyway"
    )


def _largest(prediction: Prediction) -> DeviceMemory:
    return max(prediction.devices, key=lambda d: d.peak(prediction.phases)[1])


def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def candidate_fixes(config: RunConfig, sizes: Sizes, on_gpu: bool, vllm_colocated: bool):
    """The knobs that lower a peak, cheapest first (each a dict of dotted overrides): a smaller micro batch (the
    same update, more passes), gradient checkpointing (~30 % more compute), a lower gpu_memory_utilization for a
    colocated vLLM (fewer tokens in flight), more sharding (more communication), then offload (host transfers)."""
    tr = config.training
    share = max(config.mini_batch_samples // sizes.data_parallel, 1)
    for m in sorted((d for d in range(1, sizes.micro_batch) if share % d == 0), reverse=True):
        yield {"training.micro_batch_size": m}
    if not tr.gradient_checkpointing:
        yield {"training.gradient_checkpointing": True}
    if on_gpu and vllm_colocated:
        for k in range(int(round(config.rollout.gpu_memory_utilization * 20)) - 1, 0, -1):
            yield {"rollout.gpu_memory_utilization": round(k / 20, 2)}
    order = ["none", "optimizer", "gradients", "parameters"]
    current = order.index(tr.sharding) if tr.sharding in order else 0
    for level in order[current + 1 :]:
        yield {"training.sharding": level}
        if tr.strategy == "auto":
            for strategy in ("fsdp", "deepspeed"):
                yield {"training.strategy": strategy, "training.sharding": level}
    if not tr.offload.optimizer:
        yield {"training.offload.optimizer": True}
    if not tr.offload.parameters:
        yield {"training.offload.optimizer": True, "training.offload.parameters": True}


def cheapest_fix(
    config: RunConfig, backend: Any, layout: dict[str, Any], inputs: RunInputs
) -> tuple[dict[str, Any], int] | None:
    """The first candidate fix (candidate_fixes) that the backend honours and whose prediction fits, with its peak."""
    from rlbridge.contract.config import check_devices
    from rlbridge.errors import RLBridgeError

    base = config.model_dump(mode="json")
    sizes = run_sizes(config, layout, inputs.prompt)
    behaviour = backend.memory_behaviour(config, backend.plan(config))
    vllm_colocated = behaviour.rollout == "vllm" and sizes.shared
    for overrides in candidate_fixes(config, sizes, inputs.gpus > 0, vllm_colocated):
        data = json.loads(json.dumps(base))
        for key, value in overrides.items():
            node = data
            *parents, last = key.split(".")
            for part in parents:
                node = node[part]
            node[last] = value
        try:
            candidate = RunConfig.model_validate(data)
            backend.check_capabilities(candidate)
            check_devices(candidate, layout)
            plan = backend.plan(candidate)
            prediction = inputs.predict(candidate, backend.memory_behaviour(candidate, plan), layout)
        except (RLBridgeError, ValueError):
            continue
        if prediction.fits() and not any("vLLM will not start" in n for n in prediction.notes):
            return overrides, prediction.worst()[2]
    return None


# ---------------------------------------------------------------------------------------------- the table
def _resident(component: Component, phases: tuple[str, ...]) -> str:
    here = [p for p in phases if p in component.phases]
    if len(here) == len(phases):
        return "every phase"
    return ", ".join(PHASE_LABELS[p] for p in here) or "-"


def describe(prediction: Prediction, title: str = "") -> str:
    """`rlbridge plan --memory`'s text: one table per device of the layout (its processes' components, where each
    is resident, the formula), each phase's total and the peak, then the verdict against the available memory."""
    p = prediction
    shape = p.shape
    lines = [
        f"# memory: {title or p.engine}, {'GPU' if p.on_gpu else 'CPU'}; model {shape.layers} layers x {shape.hidden} "
        f"hidden, {shape.heads}/{shape.kv_heads} heads, {shape.vocab:,} vocabulary, {shape.parameters:,} parameters "
        f"({shape.parameters_from}); sequence {p.sequence[0]} + {p.sequence[1]} tokens"
    ]
    phases = p.phases
    for device in p.devices:
        each = " each" if device.count > 1 else ""
        lines.append("")
        lines.append(f"{device.label} (x{device.count}{each}):")
        rows = [("process", "role", "what", "bytes", "resident in", "formula")]
        for proc in device.processes:
            for c in proc.components:
                rows.append((proc.name, c.role, c.what, format_bytes(c.bytes), _resident(c, phases), c.formula))
        lines += _columns(rows, indent="  ")
        totals = [("phase", *[PHASE_LABELS[ph] for ph in phases])]
        for proc in device.processes if len(device.processes) > 1 else []:
            totals.append((proc.name, *[format_bytes(proc.in_phase(ph)) for ph in phases]))
        totals.append(("device" if p.on_gpu else "rank", *[format_bytes(device.in_phase(ph)) for ph in phases]))
        lines.append("")
        lines += _columns(totals, indent="  ")
        phase, peak = device.peak(phases)
        top = device.top_component(phase)
        lines.append(f"  peak: {format_bytes(peak)} in {PHASE_LABELS[phase]} (largest: {top.role} {top.what})")
    if p.host:
        lines.append("")
        lines.append("host memory (offloaded, per node):")
        lines += _columns([(c.role, c.what, format_bytes(c.bytes), c.formula) for c in p.host], indent="  ")
    if p.other:
        lines.append("")
        lines.append("other processes of the engine (no role):")
        lines += _columns([(c.what, format_bytes(c.bytes)) for c in p.other], indent="  ")
    lines.append("")
    device, phase, peak = p.worst()
    where = "the machine (every rank and process)" if device is None else f"each {device.label.rstrip('s')}"
    if p.device_bytes:
        verdict = "fits" if peak <= p.device_bytes else "DOES NOT FIT"
        lines.append(
            f"peak of {where}: {format_bytes(peak)} in {PHASE_LABELS[phase]}, of {format_bytes(p.device_bytes)} "
            f"available ({p.device_bytes_from}): {verdict}"
        )
    else:
        lines.append(f"peak of {where}: {format_bytes(peak)} in {PHASE_LABELS[phase]} ({p.device_bytes_from})")
    lines += [f"note: {n}" for n in p.notes]
    return "\n".join(lines)


def _columns(rows: list[tuple[str, ...]], indent: str = "") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
