"""Reading verl recipes for `rlbridge import --from verl` (the inverse mapping itself is derived from
this adapter's translate(), in rlbridge.importer.solver).

Reads a launch script or command line of `python -m verl.trainer.main_ppo` (Hydra overrides
parsed by Hydra's own override parser: `key=value`, `+key=value`, `++key=value`), Hydra's saved
`.hydra/overrides.yaml`, or a saved full config (`.hydra/config.yaml`, compared with verl's
packaged defaults from the verl engine environment to find what the recipe set). Keys are checked
against that verl version's packaged config when its environment exists.
"""

from __future__ import annotations

import copy
import glob
from pathlib import Path
from typing import Any

import yaml

from rlbridge.contract.config import RunConfig
from rlbridge.errors import ConfigError, did_you_mean
from rlbridge.contract.backend import flatten
from rlbridge.contract.importing import (
    Recipe,
    RecipeImporter,
    RecipeReward,
    RecipeSource,
    Setting,
    listed_special,
    run_dir_special,
)
from rlbridge_adapters.verl import asynchrony, stage_import
from rlbridge_adapters.verl.package import DEFAULT_VERSION

MARKERS = ("verl.trainer.main_ppo", stage_import.MARKER, *asynchrony.ENTRY_CONFIGS)
# verl's own scorer of a recipe that names no reward: one function, keyed by each row's data_source
DEFAULT_SCORER = "verl.utils.reward_score:default_compute_score"
# What rlbridge sets itself, by key prefix, and why (these are dropped, and listed in the report).
OWNED = {
    "trainer.logger": "logging: rlbridge writes metrics.jsonl and telemetry sinks (telemetry.sinks)",
    "trainer.project_name": "logging: the experiment tracker's project",
    "trainer.log_val_generations": "logging",
    "trainer.default_hdfs_dir": "checkpoint upload; rlbridge keeps checkpoints in checkpoint.dir",
    "trainer.device": "rlbridge sets the device from resources.gpus_per_node",
    "ray_init.": "rlbridge starts a private Ray cluster per run (resources.cpus_per_node)",
    "ray_kwargs.": "rlbridge starts a private Ray cluster per run (resources.cpus_per_node)",
    "hydra.": "Hydra's own settings",
}
ACTION = {
    "reward.custom_reward_function.": "the recipe's reward function: rlbridge rewards are plugins (reward: [{name: ...}]); "
    "port compute_score to a reward plugin",
    "custom_reward_function.": "the recipe's reward function: rlbridge rewards are plugins (reward: [{name: ...}]); "
    "port compute_score to a reward plugin",
    "reward_model.reward_manager": "rlbridge calls its reward plugins through its own reward manager",
    "reward.reward_manager.": "rlbridge calls its reward plugins through its own reward manager",
    "reward_model.enable": "a neural reward model: not a canonical reward kind yet",
    "reward_model.model.": "a neural reward model: not a canonical reward kind yet",
    "actor_rollout_ref.rollout.multi_turn.tool_config_path": "verl tools: write an environment plugin with tools (environment:)",
    "actor_rollout_ref.rollout.agent.agent_loop_config_path": "a verl agent loop: write an environment plugin (environment:)",
}


# Where rlbridge's verl plan departs from verl's defaults on any machine, and why (the CPU-only ones: CPU_ONLY_REASONS)
DIFFERENCES = {
    "data.seed": "training.seed: rlbridge seeds every run (42 unless set); verl's null leaves the data order unseeded",
    "actor_rollout_ref.rollout.seed": "training.seed: rlbridge seeds every run",
    "actor_rollout_ref.actor.data_loader_seed": "training.seed: rlbridge seeds every run",
    "critic.data_loader_seed": "training.seed: rlbridge seeds every run",
    "trainer.val_before_train": "rlbridge evaluates every data.eval_interval steps, not before the first",
    "actor_rollout_ref.rollout.val_kwargs.do_sample": "evaluation samples as training does (rollout.temperature), as on TRL and OpenRLHF",
    "actor_rollout_ref.rollout.val_kwargs.temperature": "evaluation samples as training does (rollout.temperature), as on TRL and OpenRLHF",
    "actor_rollout_ref.rollout.val_kwargs.top_p": "evaluation samples as training does (rollout.top_p)",
    "actor_rollout_ref.rollout.val_kwargs.top_k": "evaluation samples as training does (rollout.top_k)",
    "algorithm.norm_adv_by_std_in_grpo": "algorithm.advantage_normalization; verl reads it only in its GRPO-family estimators",
    "trainer.resume_mode": "checkpoint.resume: rlbridge resumes only when asked (verl's auto resumes from any checkpoint it finds)",
    "trainer.save_freq": "checkpoint.interval",
    "trainer.test_freq": "data.eval_interval (-1 without data.eval)",
    "trainer.experiment_name": "run_name (rlbridge's run directory is named by it)",
}


def _version_dir(version: str) -> Path | None:
    from rlbridge.engine.environments import env_path

    path = env_path("verl", version)
    found = glob.glob(str(path / "lib" / "python*" / "site-packages" / "verl" / "trainer" / "config"))
    return Path(found[0]) if found else None


def packaged_defaults(version: str, model_engine: str = "dp") -> dict[str, Any] | None:
    """verl's packaged main_ppo config (flat) for a version whose engine environment exists; model_engine=megatron
    composes its Megatron configs (layout.py)."""
    name = "ppo_megatron_trainer" if model_engine == "megatron" else "ppo_trainer"
    config_dir = _version_dir(version)
    path = config_dir / f"_generated_{name}.yaml" if config_dir is not None else None
    if path is None or not path.exists():
        path = Path(__file__).parent / "recipe_defaults" / f"{name}-{version}.yaml"  # a copy of the same file
    if not path.exists():
        return None
    return flatten(yaml.safe_load(path.read_text()))


class VerlRecipeImporter(RecipeImporter):
    engine = "verl"
    default_version = DEFAULT_VERSION
    default_reward = RecipeReward(
        {"native": "verl", "function": DEFAULT_SCORER},
        [],
        note="reward: the recipe names no reward, so verl scores with its built-in default_compute_score (by each "
        "row's data_source: gsm8k, math, ...); the config runs that function unchanged, which needs verl "
        "importable where the rewards run (verl's environment; other engines' environments do not have it)",
    )

    def read(self, source: RecipeSource, version: str | None) -> Recipe:
        version = version or DEFAULT_VERSION
        if source.is_file and source.path.suffix in (".yaml", ".yml", ".json"):
            recipe = self._read_config(source, version)
        else:
            recipe = self._read_script(source, version)
        self._check_known(recipe)
        if recipe.extras.get("async_entry"):
            # main_ppo's settings are searched with the trainer's own devices (the rollout's are added by asynchrony())
            recipe.extras["base"] = {"resources": {"gpus_per_node": _async_devices(recipe)[2]}}
            if recipe.extras["async_entry"] == asynchrony.FULLY_ASYNC:  # its data.train_batch_size is 0 (asserted)
                # and a mini-batch of ppo_mini_batch_size prompts (rows: x rollout.n), so both keys are reproduced
                by_key = {s.key: s.value for s in recipe.settings}
                defaults = _defaults_of(recipe) or {}
                mini, n = (
                    by_key.get(k, defaults.get(k))
                    for k in ("actor_rollout_ref.actor.ppo_mini_batch_size", "actor_rollout_ref.rollout.n")
                )
                recipe.extras["base"]["training"] = {"batch_size": _async_batch(recipe)}
                if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (mini, n)):
                    recipe.extras["base"]["training"]["mini_batch_size"] = mini * n
                    recipe.extras["base"]["algorithm"] = {"group_size": n}
        return recipe

    def _read_script(self, source: RecipeSource, version: str) -> Recipe:
        name = source.name
        cmd = source.command(MARKERS, "`python -m verl.trainer.main_ppo`")
        recipe = Recipe("verl", name, version, [], list(cmd.notes))
        entry = next(
            (
                m
                for m in asynchrony.ENTRY_CONFIGS
                for w in cmd.words
                if w.text.replace("/", ".").removesuffix(".py").endswith(m)
            ),
            None,
        )
        if entry:  # verl's async trainers (adapters/verl/asynchrony.py): their own packaged config, async knobs
            recipe.extras["async_entry"] = entry
            recipe.extras["async_line"] = cmd.line
        if stage_import.is_stage([w.text for w in cmd.words]):
            recipe.extras["stage"] = stage_import.STAGE  # an algorithm.name sft job (adapters/verl/stage_import.py)
        overrides = []
        for tok in cmd.args:
            if tok.text.startswith("-"):
                if tok.text.startswith(("--config-name", "--config-path", "-cn", "-cp", "--config-dir")):
                    recipe.notes.append(
                        (tok.line, f"{tok.text}: the recipe composes its own config; only its overrides are imported")
                    )
                else:
                    recipe.notes.append((tok.line, f"{tok.text}: a Hydra command-line flag, ignored"))
                continue
            overrides.append(tok)
        for tok in overrides:
            key, eq, value = tok.text.partition("=")
            if eq and tok.unknown:  # known only when the script runs (a `$(...)` the reader does not run): reported
                recipe.settings.append(
                    Setting(key.lstrip("+"), value, tok.line, tok.text, key if key.startswith("+") else "", tok.unknown)
                )
                continue
            recipe.settings.append(self._override(tok.text, tok.line, name))
        engine = next((s for s in recipe.settings if s.key == "model_engine"), None)
        if engine is not None and engine.value not in ("dp", "fsdp", "megatron"):
            raise ConfigError(
                f"{recipe.where(engine.line)}: model_engine={engine.value} composes verl's {engine.value} trainer config; "
                "rlbridge runs verl's FSDP engine (model_engine=dp, the default) or Megatron (training.strategy: "
                f"megatron), so this recipe's {engine.value} keys have no meaning there: import its FSDP or Megatron variant"
            )
        if engine is not None:  # its defaults are the Megatron configs' (training.strategy: megatron)
            recipe.extras["model_engine"] = engine.value
        return recipe

    @staticmethod
    def _override(text: str, line: int | None, source: str) -> Setting:
        try:
            from hydra.core.override_parser.overrides_parser import OverridesParser
        except ImportError:
            raise ConfigError(
                "--from verl parses Hydra overrides with Hydra's parser: pip install 'rlbridge[import]'"
            ) from None
        try:
            (override,) = OverridesParser.create().parse_overrides([text])
        except Exception as exc:  # Hydra's OverrideParseException and friends
            raise ConfigError(f"{source}:{line}: not a Hydra override: {text!r} ({str(exc).splitlines()[0]})") from exc
        if override.is_delete():
            raise ConfigError(
                f"{source}:{line}: {text!r} deletes a key of verl's config; rlbridge import cannot express a deletion, remove it"
            )
        key = override.key_or_group
        prefix = "++" if override.is_force_add() else ("+" if override.is_add() else "")
        return Setting(key, _plain(override.value()), line, text, prefix + key if prefix else "")

    def _read_config(self, source: RecipeSource, version: str) -> Recipe:
        path = source.path
        data, lines = source.mapping()
        recipe = Recipe("verl", str(path), version, [])
        if isinstance(data, list):  # .hydra/overrides.yaml
            text = path.read_text().splitlines()
            for item in data:
                line = next((i + 1 for i, t in enumerate(text) if str(item) in t), None)
                recipe.settings.append(self._override(str(item), line, str(path)))
            return recipe
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected verl's saved config (a mapping) or Hydra's overrides.yaml (a list)")
        defaults = packaged_defaults(version)
        if defaults is None:
            raise ConfigError(
                f"{path}: a full verl config needs verl {version}'s packaged defaults to tell what the recipe set; "
                f"create the environment (`rlbridge env create verl=={version}`) or import the run's .hydra/overrides.yaml"
            )
        for key, value in flatten(data).items():
            if key in defaults and _same_default(defaults[key], value):
                continue
            recipe.settings.append(
                Setting(key, value, lines.get(key), f"{key}: {value}", "" if key in defaults else f"+{key}")
            )
        recipe.notes.append((None, f"values equal to verl {version}'s packaged defaults were skipped"))
        return recipe

    def _check_known(self, recipe: Recipe) -> None:
        defaults = _defaults_of(recipe)
        if defaults is None:
            recipe.notes.append(
                (
                    None,
                    f"keys not checked: no verl {recipe.version} environment or defaults here (`rlbridge env create verl=={recipe.version}`)",
                )
            )
            return
        prefixes = {k.rsplit(".", i)[0] for k in defaults for i in range(1, k.count(".") + 1)}
        for s in recipe.settings:
            if s.spelling.startswith("+") or s.key == "model_engine":
                continue  # `+key` adds a key: Hydra accepts new keys there; model_engine is a defaults group
            if s.key in defaults:
                _check_type(recipe, s, defaults[s.key])
                continue
            if s.key in prefixes:
                continue
            parent = s.key.rsplit(".", 1)[0]
            siblings = [k for k in defaults if k.startswith(parent + ".")]
            hint = did_you_mean(s.key, siblings) or did_you_mean(s.key, defaults)
            raise ConfigError(
                f"{recipe.where(s.line)}: unknown verl {recipe.version} key '{s.key}'{hint}; verl's Hydra would reject it "
                "(prefix it with + to add a new key)"
            )

    def view(self, native: dict[str, Any], config: RunConfig) -> dict[str, Any]:
        out = stage_import.overrides_view(native, config)
        if not native.get("stage"):
            out["data.prompt_key"] = native["data"]["prompt_key"]
        return out

    def special(self, setting: Setting) -> tuple[str, str] | None:
        found = listed_special(setting.key, OWNED, ACTION) or run_dir_special(setting)
        if found:
            return found
        files = setting.value if isinstance(setting.value, list) else [setting.value]
        if setting.key in ("data.train_files", "data.val_files") and any(str(f).startswith("hf://") for f in files):
            return "action", (
                "a file in a hub dataset repository (hf://...), which verl reads with load_dataset('parquet', "
                "data_files=...): rlbridge's hf source loads a dataset by name and split (data.train: {type: hf, name, "
                "split}), or download the file and point data.train at it"
            )
        return None

    def option(self, setting: Setting) -> tuple[str, Any]:
        return (setting.spelling or setting.key), setting.value

    def rewards(self, recipe: Recipe) -> list:
        """verl's reward model (reward_model.enable + reward_model.model.path, or 0.9's
        reward.reward_model.enable + model_path) -> {model: PATH}; custom_reward_function.path (+ name,
        default compute_score) -> {native: verl, function: FILE.py:NAME}, the function run unchanged."""
        if recipe.extras.get("stage"):
            return []  # an offline stage has no reward
        by_key = {s.key: s for s in recipe.settings}
        out = []
        for enable, path in (
            ("reward_model.enable", "reward_model.model.path"),
            ("reward.reward_model.enable", "reward.reward_model.model_path"),
        ):
            if (
                enable in by_key
                and by_key[enable].value is True
                and isinstance(getattr(by_key.get(path), "value", None), str)
                and not by_key[path].unknown
            ):
                out.append(RecipeReward({"model": by_key[path].value}, [by_key[enable], by_key[path]]))
        for prefix in ("custom_reward_function.", "reward.custom_reward_function."):
            function = by_key.get(prefix + "path")
            if (
                function is not None
                and not function.unknown
                and isinstance(function.value, str)
                and function.value.endswith(".py")
            ):
                name = by_key.get(prefix + "name")
                used = [function] + ([name] if name is not None else [])
                out.append(
                    RecipeReward(
                        {"native": "verl", "function": f"{function.value}:{name.value if name else 'compute_score'}"},
                        used,
                    )
                )
        if not out:
            # no reward of its own: verl scores with its built-in default_compute_score, chosen by each row's
            # data_source (gsm8k, math, ...); the import keeps that function, run unchanged (where verl is installed)
            out.append(copy.deepcopy(self.default_reward))  # the config's copy, never the declaration itself
        return out

    def telemetry(self, recipe: Recipe):
        """trainer.logger's trackers as telemetry.sinks (wandb, tensorboard, mlflow), with trainer.project_name as
        their project (verl's packaged default when the recipe leaves it); 'console' is rlbridge's progress bar and
        'file' its metrics.jsonl. trainer.experiment_name is run_name, which the plan gives back (mapped)."""
        from rlbridge.contract.importing import RecipeTelemetry, tracker_sink
        from rlbridge.contract.importing import show_value

        by_key = {s.key: s for s in recipe.settings if not s.unknown}
        logger, project = by_key.get("trainer.logger"), by_key.get("trainer.project_name")
        if logger is None and project is None:
            return None
        defaults = _defaults_of(recipe) or {}
        name = project.value if project else defaults.get("trainer.project_name")
        experiment = by_key["trainer.experiment_name"].value if "trainer.experiment_name" in by_key else None
        experiment = experiment or defaults.get("trainer.experiment_name")
        # a recipe that names a project but no logger logs with verl's default one (console and wandb)
        chosen = logger.value if logger is not None else defaults.get("trainer.logger", [])
        trackers = chosen if isinstance(chosen, list) else [chosen]
        sinks, missing = [], []
        for tracker in map(str, trackers):
            if tracker in ("console", "file"):
                continue  # rlbridge's own: the progress bar, metrics.jsonl
            # verl's tensorboard writes to $TENSORBOARD_DIR, else tensorboard_log/PROJECT/EXPERIMENT where it runs
            board = f"tensorboard_log/{name}/{experiment}" if tracker == "tensorboard" and name and experiment else None
            sink = tracker_sink(
                "wandb" if tracker == "tracking" else tracker, project=str(name) if name else None, log_dir=board
            )
            if sink:
                sinks.append(sink)
            else:
                missing.append(tracker)
        settings = []
        if logger is not None:
            detail = f"telemetry.sinks={show_value(sinks)}" + (
                "; console: rlbridge's progress bar" if "console" in trackers else ""
            )
            if missing:
                detail += f"; {', '.join(missing)}: rlbridge has no such sink (`rlbridge plugins` lists the sinks)"
            settings.append((logger, "action" if missing else "sink", detail))
        if project is not None:
            uses = [s["name"] for s in sinks]
            settings.append(
                (project, "sink", f"the project of the {' and '.join(uses)} sink{'s' if len(uses) > 1 else ''}")
                if uses
                else (project, "owned", "a tracker's project; trainer.logger names no tracker that has one")
            )
        return RecipeTelemetry(sinks, settings)

    def asynchrony(self, recipe: Recipe):
        """A launch of verl's async trainers (fully_async_main, one_step_off_policy.main_ppo) as canonical async knobs
        (rlbridge.contract.importing.RecipeAsync): their settings leave the search, the rest imports as main_ppo's would.
        The knobs come from the recipe's values, else the entry point's packaged defaults (fully_async: staleness_threshold
        0.1, trigger_parameter_sync_step 4, partial_rollout True), and the round trip is asynchrony.translate()."""
        from rlbridge.contract.importing import RecipeAsync

        entry = recipe.extras.get("async_entry")
        if not entry:
            return None
        defaults = _defaults_of(recipe) or {}
        by_key = {s.key: s for s in recipe.settings}

        def value(key: str, fallback: Any = None) -> Any:
            return by_key[key].value if key in by_key else defaults.get(key, fallback)

        def count(key: str, fallback: int) -> int:
            found = value(key, fallback)
            return found if isinstance(found, int) and not isinstance(found, bool) and found > 0 else fallback

        nodes, rollout_per_node, trainer_per_node = _async_devices(recipe)
        if entry == asynchrony.ONE_STEP_OFF:
            knobs = {"rollout.max_staleness": 1, "rollout.partial_rollouts": False, "rollout.weight_sync_interval": 1}
            how = {
                "rollout.max_staleness": "rollout.max_staleness=1: one_step_off_policy generates batch n+1 while batch n "
                "trains, from the weights synced after step n-1 (ray_trainer.py)"
            }
        else:
            threshold = value("async_training.staleness_threshold", 0.1)
            threshold = threshold if isinstance(threshold, (int, float)) and not isinstance(threshold, bool) else 0.1
            knobs = {
                "rollout.max_staleness": asynchrony.staleness_bound(threshold),
                "rollout.partial_rollouts": value("async_training.partial_rollout", True) is True,
                "rollout.weight_sync_interval": count("async_training.trigger_parameter_sync_step", 1),
            }
            how = {
                "async_training.staleness_threshold": f"rollout.max_staleness={knobs['rollout.max_staleness']} (approximated: {asynchrony.STALENESS_APPROXIMATION})",
                "async_training.trigger_parameter_sync_step": f"rollout.weight_sync_interval={knobs['rollout.weight_sync_interval']}",
                "async_training.partial_rollout": f"rollout.partial_rollouts={knobs['rollout.partial_rollouts']}",
            }
            if knobs["rollout.max_staleness"] == 0:  # the async trainer kept on-policy: no canonical value
                how["async_training.staleness_threshold"] = (
                    "staleness_threshold 0 runs fully_async_main on-policy on devices of its own, which has no canonical value: "
                    "rollout.max_staleness 0 is main_ppo's synchronous loop, which the config keeps"
                )
        if entry == asynchrony.FULLY_ASYNC and knobs["rollout.weight_sync_interval"] > 1:
            # fully_async_main's test_freq counts parameter versions (a sync every weight_sync_interval steps)
            test_freq = value("trainer.test_freq", -1)
            if isinstance(test_freq, int) and not isinstance(test_freq, bool) and test_freq > 0:
                knobs["data.eval_interval"] = test_freq * knobs["rollout.weight_sync_interval"]
                how["trainer.test_freq"] = (
                    f"data.eval_interval={knobs['data.eval_interval']} (test_freq {test_freq} parameter versions x "
                    f"trigger_parameter_sync_step {knobs['rollout.weight_sync_interval']} steps each)"
                )
        if entry == asynchrony.FULLY_ASYNC:
            batch = f"training.batch_size={_async_batch(recipe)} (ppo_mini_batch_size x require_batches: the prompts of one trainer step)"
            how.update(
                {
                    "data.train_batch_size": f"{batch}; fully_async_main asserts 0 (fully_async_rollouter.py)",
                    "data.gen_batch_size": "fully_async_main asserts 1: the rollouter takes one prompt at a time",
                    "async_training.require_batches": batch,
                }
            )
        knobs.update(
            {
                "placement.policy": "split",
                "placement.args": {"rollout_gpus": nodes * rollout_per_node},
                "resources.gpus_per_node": trainer_per_node + rollout_per_node,
            }
        )
        placement = f"placement.policy=split, placement.args.rollout_gpus={nodes * rollout_per_node}"
        how.update(
            {
                "actor_rollout_ref.hybrid_engine": placement + " (the rollout on devices of its own)",
                "rollout.nnodes": placement + " (resources.nodes nodes of rollout_gpus / nodes each)",
                "rollout.n_gpus_per_node": placement,
                "trainer.n_gpus_per_node": f"resources.gpus_per_node={trainer_per_node + rollout_per_node} minus the "
                f"rollout's {rollout_per_node} per node",
            }
        )
        consumed = [s for s in recipe.settings if s.key in how or asynchrony.is_async_key(s.key)]
        options = {(s.spelling or s.key).lstrip("+"): s.value for s in consumed if asynchrony.is_async_key(s.key)}
        if entry == asynchrony.FULLY_ASYNC and "async_training.staleness_threshold" not in options:
            options["async_training.staleness_threshold"] = value("async_training.staleness_threshold", 0.1)
        for key in options:
            how.setdefault(key, "no canonical knob: passed to verl's fully_async_main unchanged")
        if knobs["rollout.max_staleness"] and "async_training.staleness_threshold" in how:
            how["async_training.staleness_threshold"] += (
                "; the fraction itself is kept as backend_options.verl.async_training.staleness_threshold"
            )
        line = recipe.extras.get("async_line")
        entry_setting = Setting(asynchrony.ENTRY, entry, line, f"python -m {entry}")
        how[asynchrony.ENTRY] = ", ".join(f"{k}={v}" for k, v in knobs.items() if k.startswith("rollout."))
        return RecipeAsync(
            knobs,
            options,
            [entry_setting, *consumed],
            how,
            asynchrony.translate,
            note=None
            if entry == asynchrony.ONE_STEP_OFF or knobs["rollout.partial_rollouts"]
            else f"the recipe runs verl's {entry} with async_training.partial_rollout False, which rlbridge's verl "
            f"plan refuses: {asynchrony.NO_WAITING_SYNC}",
        )

    def difference_reason(self, key: str, config: RunConfig) -> str | None:
        """Why rlbridge's plan sets `key` to other than verl's default (None: the knob that sets it says why)."""
        from rlbridge_adapters.verl.backend import CPU_ONLY_REASONS
        from rlbridge_adapters.verl.layout import DIFFERENCES as LAYOUT_DIFFERENCES

        if config.is_offline:
            return stage_import.DIFFERENCES.get(key)
        return CPU_ONLY_REASONS.get(key) or LAYOUT_DIFFERENCES.get(key) or DIFFERENCES.get(key)

    def engine_defaults(self, recipe: Recipe) -> dict[str, Any]:
        """verl's packaged defaults, every key (what the report compares the plan with)."""
        return {k: v for k, v in (_defaults_of(recipe) or {}).items() if not (isinstance(v, str) and "${" in v)}

    def defaults(self, recipe: Recipe) -> dict[str, Any]:
        defaults = _defaults_of(recipe) or {}
        # run bookkeeping, not training settings: verl's default run name, and its default resume_mode
        # (auto), which would become checkpoint.resume: true and refuse a fresh run directory
        skip = {"trainer.experiment_name", "trainer.resume_mode"}
        if recipe.extras.get("async_entry") == asynchrony.FULLY_ASYNC:
            skip |= set(
                asynchrony.BATCH_KEYS
            )  # translate() computes them (main_ppo's data.train_batch_size 1024 it asserts 0)
        return {k: v for k, v in defaults.items() if not (isinstance(v, str) and "${" in v) and k not in skip}


def _async_devices(recipe: Recipe) -> tuple[int, int, int]:
    """An async launch's (rollout.nnodes, rollout.n_gpus_per_node, trainer.n_gpus_per_node): the recipe's, else verl's."""
    defaults = _defaults_of(recipe) or {}
    by_key = {s.key: s.value for s in recipe.settings}

    def count(key: str) -> int:
        found = by_key.get(key, defaults.get(key))
        return found if isinstance(found, int) and not isinstance(found, bool) and found > 0 else 1

    return count("rollout.nnodes"), count("rollout.n_gpus_per_node"), count("trainer.n_gpus_per_node")


def _async_batch(recipe: Recipe) -> int:
    """A fully_async launch's prompts per trainer step: ppo_mini_batch_size x require_batches (required_samples in
    fully_async_trainer.py), the recipe's values, else verl's."""
    defaults = _defaults_of(recipe) or {}
    by_key = {s.key: s.value for s in recipe.settings}
    values = [
        by_key.get(k, defaults.get(k))
        for k in ("actor_rollout_ref.actor.ppo_mini_batch_size", "async_training.require_batches")
    ]
    ok = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values)
    return values[0] * values[1] if ok else 1


def _defaults_of(recipe: Recipe) -> dict[str, Any] | None:
    """verl's packaged defaults of the recipe's entry point: main_ppo's, sft_trainer's, or an async trainer's
    (its own yaml composed over main_ppo's)."""
    if recipe.extras.get("stage"):
        return stage_import.sft_defaults(recipe.version)
    defaults = packaged_defaults(recipe.version, recipe.extras.get("model_engine", "dp"))
    entry = recipe.extras.get("async_entry")
    if entry and defaults is not None:
        overlay = entry_defaults(entry, recipe.version)
        if overlay is None:
            return None
        defaults = {**defaults, **overlay}
    return defaults


def entry_defaults(entry: str, version: str) -> dict[str, Any] | None:
    """The flat keys an async entry point's packaged yaml sets over ppo_trainer.yaml (verl/experimental/PACKAGE/
    config/NAME.yaml, from the verl environment, else the copy in recipe_defaults/), or None without either."""
    package, name = asynchrony.ENTRY_CONFIGS[entry]
    config_dir = _version_dir(version)
    path = config_dir.parent.parent / "experimental" / package / "config" / name if config_dir is not None else None
    if path is None or not path.exists():
        path = Path(__file__).parent / "recipe_defaults" / f"{Path(name).stem}-{version}.yaml"
    if not path.exists():
        return None
    data = yaml.safe_load(path.read_text())
    return flatten({k: v for k, v in data.items() if k not in ("hydra", "defaults")})


def _check_type(recipe: Recipe, s: Setting, default: Any) -> None:
    """A value of another kind than verl's packaged default for its key (a number, a bool) is refused with its
    line, as verl's config dataclasses would refuse it when the run starts (`data.train_batch_size=fast`)."""
    value = s.value
    if (
        default is None
        or value is None
        or (isinstance(value, str) and ("${" in value or "$(" in value or "`" in value))
    ):
        return  # no declared kind, or an interpolation / a command substitution the reader does not run
    want = "a boolean" if isinstance(default, bool) else "a number" if isinstance(default, (int, float)) else None
    if want is None:
        return
    ok = (
        isinstance(value, bool)
        if want == "a boolean"
        else isinstance(value, (int, float)) and not isinstance(value, bool)
    )
    if not ok:
        shown = "empty (an unset variable?)" if value == "" else repr(value)
        raise ConfigError(
            f"{recipe.where(s.line)}: {s.spelling or s.key}: {shown} is not {want}; verl {recipe.version}'s "
            f"config has {s.key}: {default!r}"
        )


def _plain(value: Any) -> Any:
    """Hydra's parsed value as plain Python (lists, dicts, numbers, strings)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _same_default(default: Any, value: Any) -> bool:
    from rlbridge.contract.importing import same

    return same(default, value)


IMPORTER = VerlRecipeImporter
"""This engine's recipe reader (Backend.recipe_importer reads it from here)."""
