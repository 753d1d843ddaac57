"""Running a TRL plan with rollout.max_staleness >= 1: `trl.experimental.async_grpo.AsyncGRPOTrainer` against a
vLLM server that rlbridge starts on the rollout's devices (vllm_server.py) and stops with the run.
Imported only when such a run starts (it imports torch and trl).

What differs from the synchronous path (train.py), and why:
- TRL's rollout worker is a spawned process that calls the reward functions itself, so each reward is a
  picklable `SpawnedReward` that builds its plugin in that process; it scores the decoded completion ids
  (as GRPOTrainer passes them) and applies the reward's weight (AsyncGRPOTrainer sums its rewards with weight 1).
- The worker renders every prompt as a conversation; with model.use_chat_template false the tokenizer gets a
  template that renders the prompt text as it is (the same token ids as the plain prompt), and a minimal
  response template (TRL parses each completion as an assistant message).
- Staleness, trainer idle time and weight-sync time are TRL's own metrics (sample/staleness_*, computed from
  the policy version TRL tags each sample with, perf/rollout_wait_s, perf/weight_sync_s).
"""

from __future__ import annotations

import json
import os
import re
import resource
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rlbridge.contract.data import load_rows
from rlbridge.contract.models import materialize_model
from rlbridge.engine.patches import apply_patches, check_drift
from rlbridge.engine.workers import RewardScorer
from rlbridge_adapters.trl.metrics import to_canonical
from rlbridge_adapters.trl.patches import PATCHES

# renders the prompt text as it is: plain-text prompts keep their token ids
PASSTHROUGH_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"

# TRL's async metrics -> canonical (docs/metrics.md)
ASYNC_METRICS = {
    "sample/staleness_mean": "async/staleness_mean",
    "sample/staleness_max": "async/staleness_max",
    "perf/rollout_wait_s": "async/trainer_idle_s",
    "rollout/backpressure_s": "async/rollout_idle_s",
    "perf/weight_sync_s": "timing/weight_sync_s",
}
_PER_REWARD = re.compile(r"^rewards/(?P<name>[^/]+)$")


def canonical_async(logs: dict[str, Any]) -> dict[str, float]:
    """AsyncGRPOTrainer's log of one step in canonical names."""
    logs = {k: v for k, v in logs.items() if v is not None}  # TRL logs None for a window of NaNs only
    out = to_canonical(logs)
    for key, value in logs.items():
        if key in ASYNC_METRICS:
            out[ASYNC_METRICS[key]] = float(value)
        match = _PER_REWARD.match(key)
        if match:
            out[f"reward/{match['name']}/mean"] = float(value)
    return out


class ThreadPluginScorer(RewardScorer):
    """The run's reward fault handling (rollout_workers.on_error, error_threshold, the fault log, the reward/<fault>
    counters) for one plugin scored in the calling thread, by the instance that thread built for itself. Inline, as
    rollout_workers.mode inline is: TRL's rollout process is a daemon, which cannot start the worker processes
    that would let timeout_s interrupt a hung call."""

    def __init__(self, spec: dict[str, Any], settings: dict[str, Any], plugin_of_thread, fault_log: str | None) -> None:
        from rlbridge.engine.events import write_event

        super().__init__(
            [{**spec, "inline": True}], {**settings, "mode": "inline"}, fault_log=fault_log, on_fault=write_event
        )
        self._plugin_of_thread = plugin_of_thread

    def _inline_fn(self, name: str):
        return self._plugin_of_thread()


class SpawnedReward:
    """One rlbridge reward as a TRL reward function that survives pickling into TRL's spawned rollout worker:
    it holds the reward's JSON spec and builds the plugin in the process that calls it.

    TRL's rollout worker (patched: patches/async_grpo_scoring.py) calls it for several groups at once, each from
    its own thread. A call's samples are split into chunks of `batch_size` (rollout_workers.batch_size), and the
    chunks of every call go to one pool of `concurrency` threads (rollout_workers.max_concurrency, else
    num_workers): at most that many calls of the plugin run at once, which a reward that waits (a remote tool, a
    sandbox) turns into that many waits at once. Each pool thread builds its own plugin instance (as each of the
    synchronous path's worker processes does), so that no state a plugin keeps between calls is shared by two
    calls in flight; samples of different calls never share a chunk, and every chunk's scores go back to its own
    samples by position, whatever order the chunks finish in. A chunk whose plugin raises or returns garbage
    faults only its own samples (ThreadPluginScorer: rollout_workers.on_error, as on the synchronous path)."""

    def __init__(
        self,
        spec: dict[str, Any],
        index: int,
        answer_key: str,
        tokenizer_dir: str,
        concurrency: int = 1,
        batch_size: int = 32,
        workers: dict[str, Any] | None = None,
        fault_log: str | None = None,
    ) -> None:
        self.spec = spec
        self.index = index
        self.answer_key = answer_key
        self.tokenizer_dir = tokenizer_dir
        self.concurrency = max(int(concurrency), 1)
        self.batch_size = max(int(batch_size), 1)
        self.workers = dict(workers or {})  # rollout_workers: on_error, error_threshold
        self.fault_log = fault_log
        self.__name__ = spec["name"]  # TRL logs rewards/<name>
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()  # the tokenizer and the pool are built once; a fast tokenizer decodes alone
        self._tok = None
        self._pool: ThreadPoolExecutor | None = None
        self._scorer: ThreadPluginScorer | None = None
        self._local = threading.local()  # each pool thread's plugin

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_tok", "_pool", "_scorer", "_local")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def _plugin(self):
        fn = getattr(self._local, "fn", None)
        if fn is None:
            from rlbridge.contract.native_rewards import reward_fn
            from rlbridge.contract.registry import get_plugin_manager

            fn = self._local.fn = reward_fn(self.spec, get_plugin_manager(), f"reward[{self.index}]")
        return fn

    def _score_chunk(self, inputs: list) -> list[float | None]:
        from rlbridge.engine.events import reward_faults, write_event

        scored = self._scorer.score_plugin_result(self.spec["name"], inputs)  # raises for on_error fail
        if scored.counts:
            write_event(reward_faults(scored.counts))
        return scored.per_plugin[self.spec["name"]]

    def __call__(self, prompts, completions, completion_ids, **columns) -> list[float | None]:
        from rlbridge.contract.rewards import RewardInput

        with self._lock:
            if self._tok is None:
                from transformers import PreTrainedTokenizerFast

                self._tok = PreTrainedTokenizerFast.from_pretrained(self.tokenizer_dir)
                self._pool = ThreadPoolExecutor(
                    max_workers=self.concurrency, thread_name_prefix=f"rlbridge-{self.__name__}"
                )
                self._scorer = ThreadPluginScorer(
                    self.spec, {**self.workers, "batch_size": self.batch_size}, self._plugin, self.fault_log
                )
            texts = [self._tok.decode(list(ids), skip_special_tokens=True) for ids in completion_ids]
        inputs = []
        for i, ids in enumerate(completion_ids):
            prompt = prompts[i][-1]["content"] if isinstance(prompts[i], list) else prompts[i]
            metadata = {k: v[i] for k, v in columns.items() if isinstance(v, list) and len(v) == len(completion_ids)}
            inputs.append(
                RewardInput(
                    prompt=prompt,
                    completion=texts[i],
                    completion_ids=list(ids),
                    answer=metadata.get(self.answer_key),
                    metadata=metadata,
                )
            )
        chunks = [inputs[lo : lo + self.batch_size] for lo in range(0, len(inputs), self.batch_size)]
        futures = [self._pool.submit(self._score_chunk, chunk) for chunk in chunks]
        scores = [s for future in futures for s in future.result()]  # in the samples' order
        weight = float(self.spec.get("weight", 1.0))
        return [None if s is None else weight * s for s in scores]


def _devices(native: dict[str, Any]) -> tuple[list[int], list[int]]:
    """The trainer's and the server's logical devices: the first `actor` of the visible ones (CUDA_VISIBLE_DEVICES,
    else 0..n-1) for training, the next `rollout` for the server (split), or the training ones (colocate)."""
    layout = native["placement"]
    wanted = layout["actor"] + (0 if layout["shared"] else layout["rollout"])
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [int(d) for d in visible.split(",") if d.strip().isdigit()] if visible else list(range(wanted))
    actor = ids[: layout["actor"]]
    rollout = actor if layout["shared"] else ids[layout["actor"] : wanted]
    if len(actor) != layout["actor"] or len(rollout) != layout["rollout"]:
        raise RuntimeError(
            f"placement: {layout['actor']} training and {layout['rollout']} rollout device(s) asked, "
            f"{len(ids)} visible ({ids})"
        )
    return actor, rollout


def write_placement(run_dir: Path, trainer_devices: list[int], server) -> None:
    """placement.json as the Ray engines' read-back writes it (rlbridge.run.placement_readback): each process and the
    logical devices it was given, read back from the process itself."""
    node = {"node_id": "local", "alive": True}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    trainer_gpus = [int(d) for d in visible.split(",") if d.strip().isdigit()] or trainer_devices
    placed = {
        "nodes": [node],
        "actors": [
            {
                "class_name": "AsyncGRPOTrainer",
                "node_id": "local",
                "state": "ALIVE",
                "pid": os.getpid(),
                "gpus": trainer_gpus,
            },
            {"class_name": "vllm serve", "node_id": "local", "state": "ALIVE", **server.placement()},
        ],
    }
    (run_dir / "placement.json").write_text(json.dumps(placed, indent=1))


def run_async(plan, ctx) -> None:
    import torch
    from transformers.trainer_callback import PrinterCallback

    from rlbridge_adapters.trl.train import build_dataset, load_tokenizer, make_args
    from rlbridge_adapters.trl.vllm_server import SharedMemoryWeightTransfer, VLLMServer

    native = plan.native
    config = ctx.config
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        from rlbridge.errors import ConfigError

        raise ConfigError(
            "rollout.max_staleness: TRL's AsyncGRPOTrainer generates through a vLLM server, and this engine "
            "environment has no vLLM: set engine_version: 1.16.0-vllm (rlbridge env create trl==1.16.0-vllm)"
        )
    os.environ.update(native["env"])
    check_drift(PATCHES, native, str(ctx.run_dir / "patches_drift.json"))
    (ctx.run_dir / "patches.json").write_text(json.dumps(apply_patches(PATCHES, native), indent=2))
    if native["torch_threads"]:
        torch.set_num_threads(native["torch_threads"])
    trainer_devices, rollout_devices = _devices(native)
    on_cpu = bool(native["args"].get("use_cpu"))
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, trainer_devices))  # before torch initialises CUDA

    model_path = materialize_model(config, ctx.plugins)
    tok = load_tokenizer(model_path, native["data"]["chat_template"])
    if not native["data"]["use_chat_template"]:
        tok.chat_template = PASSTHROUGH_TEMPLATE
    if getattr(tok, "response_template", None) is None and getattr(tok, "response_schema", None) is None:
        # no tools here: a completion is its text up to the end-of-sequence token
        tok.response_template = {
            "defaults": {"role": "assistant"},
            "fields": {"content": {"close_pattern": re.escape(tok.eos_token) + r"\s*", "content": "text"}},
        }
    data = {**native["data"], "use_chat_template": True}  # TRL's rollout worker renders conversations only
    train_ds = build_dataset(
        load_rows(config.data.train, config, "data.train", ctx.plugins), {**native, "data": data}, tok, "data.train"
    )
    if native["shuffle"]:  # AsyncGRPOTrainer reads its dataset in order (data.shuffle is approximated: once)
        train_ds = train_ds.shuffle(seed=int(native["args"]["seed"]))
    tok_dir = str(ctx.run_dir / "tokenizer")
    tok.save_pretrained(tok_dir)  # what the spawned reward functions decode with
    scoring = native.get("scoring") or {}
    rewards = [
        SpawnedReward(
            spec,
            i,
            native["data"]["answer_key"],
            tok_dir,
            concurrency=scoring.get("concurrency", 1),
            batch_size=scoring.get("batch_size", 32),
            workers=scoring.get("workers"),
            fault_log=str(ctx.run_dir / "reward_faults.jsonl"),
        )
        for i, spec in enumerate(native["rewards"])
    ]

    server_opts = native["server"]
    server = VLLMServer(
        model_path,
        rollout_devices,
        ctx.run_dir / "vllm_server.log",
        dtype=native["model"]["dtype"],
        max_model_len=server_opts["max_model_len"],
        seed=int(native["args"]["seed"]),
        max_num_seqs=server_opts["max_num_seqs"],
        gpu_memory_utilization=server_opts["gpu_memory_utilization"],
        on_cpu=on_cpu,
        threads=native["torch_threads"],
    )
    transfer = None
    try:
        started = server.wait_ready(server_opts["start_timeout_s"])
        print(
            f"rlbridge: vLLM server for TRL's async trainer up at {server.url} in {started:.0f} s "
            f"(devices {rollout_devices}, log {server.log_path})",
            flush=True,
        )
        write_placement(ctx.run_dir, trainer_devices, server)
        native["args"]["vllm_server_base_url"] = server.url
        transfer = SharedMemoryWeightTransfer(server.url, pause_mode=native["pause_mode"])
        args = make_args(native)
        from trl.experimental.async_grpo import AsyncGRPOTrainer

        callback = AsyncMetrics(ctx, native["updates_per_step"], transfer)
        trainer = AsyncGRPOTrainer(
            model=model_path,
            reward_funcs=rewards,
            args=args,
            train_dataset=train_ds,
            processing_class=tok,
            callbacks=[callback],
            weight_transfer=transfer,
        )
        trainer.remove_callback(PrinterCallback)
        try:
            trainer.train()
        finally:
            if trainer.rollout_worker is not None:
                trainer.rollout_worker.stop()
    finally:
        if transfer is not None:
            transfer.destroy()
        server.stop()


class AsyncMetrics:
    """TrainerCallback (built lazily: transformers is imported by run_async): one canonical row per rlbridge step."""

    def __new__(cls, ctx, updates_per_step: int, transfer):
        from transformers import TrainerCallback

        class _AsyncMetrics(TrainerCallback):
            # A step's time is the wall time since the previous step ended (TRL's perf/step_s): the trainer waits
            # for samples before on_step_begin (its dataloader), and that wait belongs to the step
            def __init__(self) -> None:
                self.last_end: float | None = None
                self.last_syncs = 0

            def on_train_begin(self, args, state, control, **kwargs):
                self.last_end = time.perf_counter()

            def on_log(self, args, state, control, logs=None, **kwargs):
                logs = dict(logs or {})
                if "train_runtime" in logs or self.last_end is None:
                    return
                now = time.perf_counter()
                step_s, self.last_end = now - self.last_end, now
                canonical = canonical_async(logs)
                canonical["timing/step_s"] = step_s
                canonical["memory/peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                if transfer.syncs > self.last_syncs and transfer.last:
                    canonical["weight_sync/bytes"] = transfer.last["bytes"]
                    canonical["weight_sync/tensors"] = transfer.last["tensors"]
                    self.last_syncs = transfer.syncs
                canonical["async/partial_rollouts"] = float(transfer.take_partial())
                native = {k: v for k, v in logs.items() if isinstance(v, (int, float))}
                ctx.emit_step(state.global_step // updates_per_step, canonical, native=native)

        return _AsyncMetrics()
