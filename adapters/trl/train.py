"""Running a TRL plan in this process. Imported only when a run starts (it imports torch and trl)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import time
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer, PreTrainedTokenizerFast, TrainerCallback
from transformers.trainer_callback import PrinterCallback

from rlbridge.contract.data import load_rows
from rlbridge.errors import ConfigError
from rlbridge.engine.patches import apply_patches, check_drift
from rlbridge.contract.rewards import BoundReward, RewardInput, build_rewards, score
from rlbridge.contract.models import materialize_model, materialize_path
from rlbridge.engine.events import EVENTS_ENV
from rlbridge_adapters.trl.metrics import to_canonical
from rlbridge_adapters.trl.patch import profiling_timers, vllm_seed
from rlbridge_adapters.trl.patches import PATCHES


def load_tokenizer(path: str, chat_template: str | None):
    """A tokenizer.json next to the model is loaded as the fast tokenizer it is: with transformers
    5.x, AutoTokenizer may swap in a model-specific class that re-tokenizes differently."""
    if (Path(path) / "tokenizer.json").exists():
        tok = PreTrainedTokenizerFast.from_pretrained(path)
    else:
        tok = AutoTokenizer.from_pretrained(path)
    if chat_template:
        template = Path(chat_template)
        tok.chat_template = template.read_text() if template.is_file() else chat_template
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def prompt_tokens(tok, text: str, data: dict[str, Any]) -> int:
    """A prompt's length as the policy sees it: after the chat template (with its arguments) when one is used."""
    if not data["use_chat_template"]:
        return len(tok(text, add_special_tokens=False)["input_ids"])
    ids = tok.apply_chat_template(
        [{"role": "user", "content": text}],
        add_generation_prompt=True,
        tokenize=True,
        **(data.get("chat_template_kwargs") or {}),
    )
    return len(ids["input_ids"] if hasattr(ids, "keys") else ids)


def build_dataset(rows: list[dict[str, Any]], native: dict[str, Any], tok, field_name: str):
    from datasets import Dataset

    data = native["data"]
    prompt_key, cap = data["prompt_key"], data["max_prompt_tokens"]
    records = []
    for i, row in enumerate(rows):
        text = row[prompt_key]
        if not isinstance(text, str):
            raise ConfigError(f"data.prompt_key: row {i} of {field_name} has a non-text prompt ({type(text).__name__})")
        if cap is not None:
            n = prompt_tokens(tok, text, data)
            if n > cap and data.get("drop_overlong_prompts"):
                continue
            if n > cap:
                raise ConfigError(
                    f"rollout.max_prompt_tokens: row {i} of {field_name} has a {n}-token prompt (cap {cap}); "
                    "raise the cap or filter the data"
                )
        record = {k: v for k, v in row.items() if k != prompt_key}
        record["prompt"] = [{"role": "user", "content": text}] if data["use_chat_template"] else text
        records.append(record)
    if not records:
        raise ConfigError(
            f"rollout.max_prompt_tokens: every prompt of {field_name} is longer than {cap} tokens; raise the cap"
        )
    return Dataset.from_list(records)


class SampleCollector:
    """The step's samples as the reward functions score them: TRL calls the run's reward functions
    in config order on the same batch, so the first one opens a row per sample and each adds its
    plugin's score. `take()` returns the rows (prompt, completion, total, per-plugin scores) and every
    sample's total reward, and starts the next step."""

    def __init__(self, rewards: list[BoundReward]) -> None:
        self.weights = {r.name: r.weight for r in rewards}
        self.first = rewards[0].name if rewards else None
        self.rows: list[dict[str, Any]] = []
        self._start = 0

    def record(self, name: str, inputs: list[RewardInput], scores: list[float | None]) -> None:
        if name == self.first:
            self._start = len(self.rows)
            self.rows += [{"prompt": x.prompt, "completion": x.completion, "rewards": {}} for x in inputs]
        for i, value in enumerate(scores):
            if self._start + i < len(self.rows):
                self.rows[self._start + i]["rewards"][name] = value

    def take(self) -> tuple[list[dict[str, Any]], list[float]]:
        rows, self.rows, self._start = self.rows, [], 0
        for row in rows:
            row["reward"] = sum(self.weights[n] * v for n, v in row["rewards"].items() if v is not None)
        return rows, [row["reward"] for row in rows]


def trl_reward(bound: BoundReward, answer_key: str, tokenizer, collector: SampleCollector | None = None, scorer=None):
    """Wrap an rlbridge reward as a TRL reward function (named after the plugin, so TRL logs
    rewards/<plugin>/mean). TRL passes completions decoded without special tokens and the
    completion token ids; both reach the plugin. With a `scorer` (rlbridge.engine.workers), the
    plugin runs in the run's worker pool: TRL gets the scores after the on_error policy, the
    collector (telemetry) the plugin's own numbers, NaN included."""

    def reward(prompts, completions, completion_ids, **columns):
        inputs = []
        for i, completion in enumerate(completions):
            prompt = prompts[i]
            if isinstance(prompt, list):  # conversational
                prompt = prompt[-1]["content"]
            if isinstance(completion, list):
                completion = "".join(m.get("content") or "" for m in completion if m.get("role") == "assistant")
            metadata = {
                k: v[i]
                for k, v in columns.items()
                if k not in ("trainer_state", "log_extra", "log_metric", "environments") and isinstance(v, list)
            }
            inputs.append(
                RewardInput(
                    prompt=prompt,
                    completion=completion,
                    completion_ids=list(completion_ids[i]),
                    answer=metadata.get(answer_key),
                    metadata=metadata,
                )
            )
        if scorer is not None:
            scored = scorer.score_plugin_result(bound.name, inputs)
            scores, seen, extra = (
                scored.per_plugin[bound.name],
                scored.raw[bound.name],
                scorer.last_metrics.get(bound.name),
            )
        else:
            scores = seen = score(bound, inputs)
            extra = getattr(bound.fn, "last_metrics", None)
        log_metric = columns.get("log_metric")
        for key, value in (extra or {}).items():  # a native reward's extra metrics
            if callable(log_metric):
                log_metric(f"rewards/{bound.name}/{key}", value)
        if collector is not None:
            collector.record(bound.name, inputs, seen)
        return scores

    reward.__name__ = bound.name
    return reward


class CanonicalMetrics(TrainerCallback):
    """Turns TRL's logs (one per rlbridge step, see logging_steps) into canonical metrics."""

    def __init__(
        self, ctx, updates_per_step: int, timers: dict[str, float], samples: SampleCollector | None = None
    ) -> None:
        self.ctx = ctx
        self.samples = samples
        self.per_step = updates_per_step
        self.timers = timers
        self.step_started: float | None = None
        self.last_tokens = 0.0
        self.on_gpu = torch.cuda.is_available()
        self.trainer = None  # set once the trainer exists (which passes decide old/ref log-probs)
        self.scorer = None  # the reward worker pool (rlbridge.engine.workers): its fault counts per step
        self.to_canonical = to_canonical  # native -> canonical names (an offline stage's own: adapters/trl/stages.py)

    def on_train_begin(self, args, state, control, **kwargs):
        from rlbridge_adapters.trl import launch

        if launch.in_rank() and state.is_world_process_zero and self.trainer is not None:
            launch.record_state(self.trainer, self.ctx.run_dir)  # how accelerate really laid the model out

    def on_step_begin(self, args, state, control, **kwargs):
        if self.step_started is None:
            self.step_started = time.perf_counter()
            self.timers.clear()

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = dict(logs or {})
        if any(k.startswith("eval_") for k in logs):  # an evaluation on data.eval (eval_strategy steps)
            native = {k[len("eval_") :]: v for k, v in logs.items() if k.startswith("eval_")}
            self.ctx.emit_eval(
                state.global_step // self.per_step, {f"eval/{k}": v for k, v in self.to_canonical(native).items()}
            )
            return
        if "train_runtime" in logs or self.step_started is None:  # the final summary log
            return
        step_s = time.perf_counter() - self.step_started
        canonical = self.to_canonical(logs)
        canonical.update(phase_timings(self.timers, self.trainer))
        prepare = sum(v for k, v in self.timers.items() if k.endswith("._prepare_inputs"))
        tokens = float(logs.get("num_tokens", self.last_tokens))
        canonical.update(
            {
                "timing/step_s": step_s,
                "timing/update_s": max(step_s - prepare, 0.0),
                "throughput/tokens_per_s": (tokens - self.last_tokens) / step_s if step_s > 0 else 0.0,
                "memory/peak_mb": (
                    torch.cuda.max_memory_allocated() / 2**20
                    if self.on_gpu
                    else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                ),
            }
        )
        self.last_tokens = tokens
        self.step_started = None
        rows, totals = self.samples.take() if self.samples is not None else ([], [])
        canonical.update(nonfinite_rewards(rows))
        if self.scorer is not None:
            canonical.update(self.scorer.take_counts())
        self.ctx.emit_step(state.global_step // self.per_step, canonical, native=logs, samples=rows, rewards=totals)

    def on_save(self, args, state, control, **kwargs):
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if args.world_size > 1:  # every rank has written its part (its RNG state, its shards) before it is complete
            torch.distributed.barrier()
        if not state.is_world_process_zero:
            return
        if path.is_dir():
            mark_complete(path, state.global_step // self.per_step)
        self.ctx.checkpoint_saved(state.global_step // self.per_step, str(path))


def nonfinite_rewards(rows: list[dict[str, Any]]) -> dict[str, float]:
    """TRL reads a reward function's NaN as "not applicable" (like None) and averages it away
    (nanmean): a plugin that returned NaN or inf leaves no trace in TRL's logs. The step's reward
    means are then not finite, and are reported as such."""
    out: dict[str, float] = {}
    for row in rows:
        for name, value in row["rewards"].items():
            if value is not None and not math.isfinite(value):
                out[f"reward/{name}/mean"] = out["reward/mean"] = float("nan")
    return out


def phase_timings(timers: dict, trainer) -> dict[str, float]:
    """Canonical phase times of one step from TRL's own profiling timers (a phase TRL did not run is
    absent). Generation: the `*generate*` timers; reward: `_calculate_rewards`; weight sync:
    `sync_weights`; the no-grad log-prob passes inside `_prepare_inputs` are the old-policy pass
    (when TRL needs it: misaligned generation or vLLM importance sampling) and the reference pass
    (beta != 0), in that order, as TRL's _generate_and_score_completions runs them."""
    out: dict[str, float] = {}
    generate = [v for k, v in timers.items() if "generate" in k and isinstance(v, float)]
    if generate:
        out["timing/generate_s"] = sum(generate)
    for suffix, name in (("._calculate_rewards", "timing/reward_s"), (".sync_weights", "timing/weight_sync_s")):
        found = [v for k, v in timers.items() if k.endswith(suffix)]
        if found:
            out[name] = sum(found)
    for key, name in (("weight_sync.bytes", "weight_sync/bytes"), ("weight_sync.tensors", "weight_sync/tensors")):
        if key in timers:
            out[name] = timers[key]
    passes = timers.get("logps_in_prepare") or []
    if passes and trainer is not None:
        args = trainer.args
        generate_every = args.steps_per_generation * trainer.num_iterations
        old = args.gradient_accumulation_steps % generate_every != 0 or (
            getattr(trainer, "use_vllm", False) and getattr(trainer, "vllm_importance_sampling_correction", False)
        )
        ref = trainer.beta != 0.0
        if old and ref:
            out["timing/old_logprob_s"] = sum(passes[0::2])
            out["timing/ref_s"] = sum(passes[1::2])
        elif old or ref:
            out["timing/old_logprob_s" if old else "timing/ref_s"] = sum(passes)
    return out


def run_trl(plan, ctx) -> None:
    native = plan.native
    if native["trainer"] == "AsyncGRPOTrainer":  # rollout.max_staleness >= 1
        from rlbridge_adapters.trl.async_run import run_async

        run_async(plan, ctx)
        return
    from rlbridge_adapters.trl import launch

    if launch.in_rank():
        _train(plan, ctx)
        return
    server = start_server(native, ctx) if native.get("server") else None  # split placement: trl vllm-serve
    try:
        if native.get("accelerate"):  # more than one training process: accelerate launch (launch.py)
            materialize_model(ctx.config, ctx.plugins)  # once, before the ranks load it
            launch.run_launched(plan, ctx)
        else:
            _train(plan, ctx)
    finally:
        if server is not None:
            server.stop()


def start_server(native: dict[str, Any], ctx):
    """GRPOTrainer's vllm_mode server: `trl vllm-serve` on the rollout's devices, the trainer's devices the rest
    (CUDA_VISIBLE_DEVICES of this process, which accelerate's ranks inherit); the plan's args get its address."""
    from rlbridge.helpers import free_port
    from rlbridge_adapters.trl.async_run import _devices
    from rlbridge_adapters.trl.vllm_server import VLLMServer

    trainer_devices, rollout_devices = _devices(native)
    opts = native["server"]
    server = VLLMServer(
        materialize_model(ctx.config, ctx.plugins),
        rollout_devices,
        ctx.run_dir / "vllm_server.log",
        dtype=native["model"]["dtype"],
        max_model_len=opts["max_model_len"],
        seed=int(native["args"]["seed"]),
        max_num_seqs=256,
        gpu_memory_utilization=opts["gpu_memory_utilization"],
        on_cpu=bool(native["args"].get("use_cpu")),
        trl_serve={
            "tensor_parallel_size": opts["tensor_parallel_size"],
            "data_parallel_size": opts["data_parallel_size"],
        },
    )
    try:
        up = server.wait_ready(opts["start_timeout_s"])
    except BaseException:
        server.stop()
        raise
    print(f"rlbridge: trl vllm-serve up at {server.url} in {up:.0f} s (devices {rollout_devices})", flush=True)
    native["args"].update(vllm_server_base_url=server.url, vllm_group_port=free_port())
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, trainer_devices))  # before torch initialises CUDA
    return server


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _train(plan, ctx) -> None:
    """Build the trainer and train, in this process (one of several under accelerate launch, or the only one)."""
    native = plan.native
    config = ctx.config
    main_process = _rank() == 0
    os.environ.update(native["env"])
    drift = ctx.run_dir / ("patches_drift.json" if main_process else f"patches_drift.rank{_rank()}.json")
    check_drift(PATCHES, native, str(drift))  # before anything runs
    patch_report = apply_patches(PATCHES, native)  # also this process's report in RLBRIDGE_PATCH_DIR
    if main_process:
        (ctx.run_dir / "patches.json").write_text(json.dumps(patch_report, indent=2))
    if native["torch_threads"]:
        torch.set_num_threads(native["torch_threads"])
    if native["args"].get("full_determinism"):
        # deterministic mode otherwise fills every torch.empty with NaN (a guard against kernels that read
        # memory they never wrote): on the quickstart 3.5x the update time and +146 MiB, with the same metrics
        torch.utils.deterministic.fill_uninitialized_memory = False

    import trl

    model_path = materialize_model(config, ctx.plugins)
    tok = load_tokenizer(model_path, native["data"]["chat_template"])
    train_rows = load_rows(config.data.train, config, "data.train", ctx.plugins)
    train_ds = build_dataset(train_rows, native, tok, "data.train")
    eval_ds = None
    if config.data.eval is not None:
        eval_ds = build_dataset(load_rows(config.data.eval, config, "data.eval", ctx.plugins), native, tok, "data.eval")
    bound = build_rewards(config, ctx.plugins)
    collector = SampleCollector(bound)
    from rlbridge.engine.workers import RewardScorer, specs_with_factories

    scorer = RewardScorer(
        specs_with_factories([s.model_dump(mode="json") for s in config.reward], ctx.plugins),
        config.rollout_workers,
        rewards=bound,
        fault_log=ctx.run_dir / ("reward_faults.jsonl" if main_process else f"reward_faults.rank{_rank()}.jsonl"),
    )
    scorer.start_in_background()  # the reward workers start while TRL loads the model and builds the trainer
    rewards = [trl_reward(b, native["data"]["answer_key"], tok, collector, scorer) for b in bound]
    for i, spec in enumerate(config.reward):  # reward models go through TRL's own model-reward path
        if spec.model:
            rewards[i] = materialize_path(spec.model, f"reward[{i}].model", ctx.plugins)

    trainer_class = getattr(trl, native["trainer"])
    extra: dict[str, Any] = {}
    if native.get("environment"):
        from rlbridge_adapters.trl.environment import (
            EnvironmentRollout,
            environment_reward,
            trainer_class as recording_rows,
        )

        spec = native["environment"]
        # episode rewards, as the other engines' drivers report them
        events = ctx.run_dir / ("trl_events.jsonl" if main_process else f"trl_events.rank{_rank()}.jsonl")
        events.unlink(missing_ok=True)
        os.environ[EVENTS_ENV] = str(events.resolve())
        trainer_class = recording_rows(trainer_class)
        rewards = [environment_reward(spec["name"]), *rewards]
        extra["rollout_func"] = EnvironmentRollout(
            spec, native["data"]["prompt_key"], native["data"]["use_chat_template"]
        )
    if native.get("lora"):
        from peft import LoraConfig

        extra["peft_config"] = LoraConfig(**native["lora"])  # TRL wraps the model; checkpoints hold the adapter
    args = make_args(native)
    timers: dict[str, float] = {}
    callback = CanonicalMetrics(ctx, native["updates_per_step"], timers, collector)
    callback.scorer = scorer
    # the scorer closes after a failure too: its pool's workers (one stuck in a hung call) go with the run
    with contextlib.closing(scorer), profiling_timers(timers), vllm_seed(int(native["args"]["seed"])):
        trainer = trainer_class(
            model=model_path,
            reward_funcs=rewards,
            args=args,
            train_dataset=train_ds,
            eval_dataset=eval_ds,
            processing_class=tok,
            callbacks=[callback],
            **extra,
        )
        callback.trainer = trainer
        # disable_tqdm makes transformers print every raw log dict; rlbridge shows its own progress.
        trainer.remove_callback(PrinterCallback)
        resume = native["resume"]
        if resume is True:
            resume = _latest_checkpoint(native["args"]["output_dir"])
        trainer.train(resume_from_checkpoint=resume or None)


def make_args(native: dict[str, Any]):
    """Build the GRPOConfig/RLOOConfig of a plan: TRL's own __post_init__ validates it."""
    import dataclasses
    import importlib

    import trl

    config_class = getattr(importlib.import_module(native.get("config_module", "trl")), native["config_class"])
    kwargs = native["args"]
    fields = {f.name for f in dataclasses.fields(config_class)}
    for key in kwargs:
        if key not in fields:
            from rlbridge.errors import did_you_mean

            raise ConfigError(
                f"backend_options.trl.{key}: {config_class.__name__} of the installed TRL {trl.__version__} has no field "
                f"'{key}'{did_you_mean(key, fields)} (set there, or by the canonical knob that maps to it: "
                "`rlbridge plan --explain` names it; older TRL versions lack some fields)"
            )
    try:
        return config_class(**kwargs)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"TRL rejected the translated {config_class.__name__}: {exc}") from exc


COMPLETE_MARKER = "rlbridge_complete.json"


def mark_complete(path: Path, step: int) -> None:
    """Written (atomically) once TRL has saved the whole checkpoint: TRL writes its files one by
    one, so a run killed while saving leaves a directory that looks like a checkpoint but is not."""
    tmp = path / f".{COMPLETE_MARKER}.tmp"
    tmp.write_text(json.dumps({"step": step}))
    os.replace(tmp, path / COMPLETE_MARKER)


def is_complete(path: Path) -> bool:
    if (path / COMPLETE_MARKER).exists():
        return True
    try:  # a checkpoint from before the marker: TRL writes trainer_state.json last
        json.loads((path / "trainer_state.json").read_text())
        return (path / "rng_state.pth").exists() or any(path.glob("rng_state*.pth"))
    except (OSError, ValueError):
        return False


def _latest_checkpoint(directory: str) -> str | None:
    """The newest complete checkpoint-N in `directory`; incomplete ones (a killed save) are skipped."""
    candidates = sorted(
        (p for p in Path(directory).glob("checkpoint-*") if p.name.split("-")[-1].isdigit()),
        key=lambda p: int(p.name.split("-")[-1]),
    )
    complete = [p for p in candidates if is_complete(p)]
    if not complete:
        found = f" (only incomplete ones: {', '.join(p.name for p in candidates)})" if candidates else ""
        raise ConfigError(f"checkpoint.resume: no complete checkpoint-* directory in {directory} to resume from{found}")
    return str(complete[-1])
