"""Reading OpenRLHF recipes for `rlbridge import --from openrlhf` (the inverse mapping itself is derived
from this adapter's translate(), in rlbridge.importer.solver).

Reads a launch script or command line of `openrlhf.cli.train_ppo_ray` (also behind `ray job submit
... --`), in the flag spelling of the OpenRLHF version: dotted from 0.10.2 (`--actor.adam.lr`), flat
before (`--actor_learning_rate`); the adapter's own FLAT table relates the two. Flags are checked
against that version's own argument parser when its engine environment exists, and the spelling
against the version always.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from packaging.version import Version

from rlbridge.contract.config import RunConfig
from rlbridge.contract.models import looks_local
from rlbridge.errors import ConfigError, did_you_mean
from rlbridge.contract.importing import (
    Recipe,
    RecipeImporter,
    RecipeSource,
    Setting,
    Token,
    listed_special,
    run_dir_special,
    scalar,
)
from rlbridge_adapters.openrlhf import knobs, stage_import
from rlbridge_adapters.openrlhf.backend import DOTTED_SINCE, FLAT
from rlbridge_adapters.openrlhf.package import DEFAULT_VERSION

MARKERS = ("openrlhf.cli.train_ppo_ray", *stage_import.STAGES)  # and the offline stages' scripts (stage_import.py)
# the async flags before 0.10.2 (read in OpenRLHF v0.10.1's cli/train_ppo_ray.py), read as their dotted names so that
# the import names the canonical knob and why the plan refuses it for that version (asynchrony.py)
ASYNC_FLAT = {
    "async_train": "train.async_enable",
    "async_queue_size": "train.async_queue_size",
    "partial_rollout": "train.partial_rollout_enable",
    "prompt_split": "data.prompt_split",  # and the datasets' splits, which the plan leaves at OpenRLHF's default
    "eval_split": "eval.split",
}
# every flag the adapter writes in both spellings (backend.FLAT and knobs.FLAT: the roles' placement, the reward model)
DOTTED = {**ASYNC_FLAT, **{flat: dotted for dotted, flat in {**knobs.FLAT, **FLAT}.items()}}
FLAT_VERSION = "0.9.10"  # what a recipe in the flat spelling is read as, without --engine-version
OWNED = {
    "logger.": "logging: rlbridge writes metrics.jsonl and telemetry sinks (telemetry.sinks)",
    "use_wandb": "logging: add a telemetry sink for your tracker (telemetry.sinks)",
    "wandb_org": "logging",
    "wandb_group": "logging",
    "wandb_project": "logging",
    "wandb_run_name": "logging",
    "use_tensorboard": "logging",
    "ckpt.output_dir": "the final model is saved in rlbridge's run directory (model_final)",
}
DATASETS = {"data.prompt_dataset": "data.prompt_split", "eval.dataset": "eval.split"}  # and the split OpenRLHF takes
LOGGING_STEPS = ("logger.logging_steps", "logging_steps")  # every step (the default, 1) is what rlbridge records
REFERENCE_PLACEMENT = ("ref.num_nodes", "ref.num_gpus_per_node")  # the plan places the reference with the actor
# what only a reference model uses: with --algo.kl.init_coef 0 OpenRLHF creates none, and the plan leaves these out
REFERENCE_ONLY = (*REFERENCE_PLACEMENT, "algo.kl.use_loss", "algo.kl.estimator")
ACTION = {
    "reward.remote_url": "the recipe's reward function or server: rlbridge rewards are plugins (reward: [{name: ...}]); "
    "port reward_func to a reward plugin",
    "reward.model_name_or_path": "a neural reward model: not a canonical reward kind yet",
    "train.agent_func_path": "the recipe's agent: write an environment plugin (environment:), which rlbridge runs as an OpenRLHF agent",
}


# OpenRLHF's tracker flags (dotted; LOGGER_FLAT: their flat spelling before 0.10.2) -> the W&B sink's argument
LOGGER_ARGS = {
    "logger.wandb.key": "API key",
    "logger.wandb.project": "project",
    "logger.wandb.org": "entity",
    "logger.wandb.group": "group",
    "logger.wandb.run_name": "run name",
    "logger.tensorboard_dir": "log_dir",
}
LOGGER_FLAGS = set(LOGGER_ARGS)
LOGGER_FLAT = {
    "use_wandb": "logger.wandb.key",
    "wandb_project": "logger.wandb.project",
    "wandb_org": "logger.wandb.org",
    "wandb_group": "logger.wandb.group",
    "wandb_run_name": "logger.wandb.run_name",
    "use_tensorboard": "logger.tensorboard_dir",
}

# Where rlbridge's OpenRLHF plan departs from train_ppo_ray's defaults, and why
DIFFERENCES = {
    "train.colocate_all": "placement.policy: colocate (rlbridge's default, on GPUs) shares the GPUs between actor, reference "
    "and vLLM; placement.policy: separate keeps OpenRLHF's default",
    "actor.eps_clip_low_high": "algorithm.clip_low / clip_high, always written; null in OpenRLHF means eps_clip for both",
    "actor.lr_scheduler": "training.lr_schedule (constant, linear or cosine); OpenRLHF's cosine_with_min_lr has no canonical value",
    "critic.lr_scheduler": "training.lr_schedule (constant, linear or cosine); OpenRLHF's cosine_with_min_lr has no canonical value",
    "actor.lr_warmup_ratio": "training.warmup_steps (OpenRLHF's default warms up 3 % of the run)",
    "ckpt.max_num": "checkpoint.keep_last (null keeps every checkpoint)",
    "data.prompt_dataset": "rlbridge writes the config's data.train into the run directory",
    "data.label_key": "data.answer_key",
}


def read_flags(args: list[Token], version: Version) -> list[tuple[str, Any, int | None, str, str, str]]:
    """`--name v ...` tokens -> (normalised key, value, line, text, spelling, why the value is unknown without
    running the script, or ''). No value: True; several: a list."""
    out = []
    i = 0
    while i < len(args):
        tok = args[i]
        if not tok.text.startswith("--"):
            raise ConfigError(f"line {tok.line}: {tok.text!r} is not a flag (train_ppo_ray takes --name value)")
        name, _, inline = tok.text[2:].partition("=")
        values = [inline] if inline else []
        j = i + 1
        while j < len(args) and not (args[j].text.startswith("--") and len(args[j].text) > 2):
            values.append(args[j].text)
            j += 1
        value: Any = True if not values else (scalar(values[0]) if len(values) == 1 else [scalar(v) for v in values])
        key = DOTTED.get(name, name) if version < DOTTED_SINCE else name
        text = " ".join(t.text for t in args[i:j])
        unknown = next((t.unknown for t in args[i:j] if t.unknown), "")
        out.append((key, value, tok.line, text, "" if key == name else name, unknown))
        i = j
    return out


def _version_of(args: list[Token], version: str | None) -> str:
    if version:
        return version
    names = [t.text[2:].split("=")[0] for t in args if t.text.startswith("--")]
    return DEFAULT_VERSION if any("." in n for n in names) or not names else FLAT_VERSION


PRINT_PARSER_FLAGS = "from rlbridge_adapters.openrlhf.importer import _print_parser_flags; _print_parser_flags()"


def parser_flags(version: str) -> set[str] | None:
    """The option names of train_ppo_ray's own parser: from the OpenRLHF engine environment, else the copy made
    from it for exactly that version (recipe_defaults/parser-types-VERSION.json), else None (the spelling only)."""
    from rlbridge.engine.environments import env_path, is_complete, last_line_printed

    path = env_path("openrlhf", version)
    if not is_complete(path):
        vendored = Path(__file__).parent / "recipe_defaults" / f"parser-types-{version}.json"
        return set(json.loads(vendored.read_text())) if vendored.exists() else None
    from rlbridge.machine import cache_dir

    cached = cache_dir() / "import" / f"openrlhf-{version}-flags.json"
    if cached.exists():
        return set(json.loads(cached.read_text()))
    line = last_line_printed(path, PRINT_PARSER_FLAGS)
    if line is None:
        return None
    flags = json.loads(line)
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(sorted(flags)))
    return set(flags)


def parser_defaults(version: str) -> dict[str, Any] | None:
    """{flag: default} of train_ppo_ray's parser: from the OpenRLHF engine environment when it exists (cached),
    else the copy made from it for that version (recipe_defaults/parser-VERSION.json), else None."""
    from rlbridge.engine.environments import env_path, is_complete, last_line_printed
    from rlbridge.machine import cache_dir

    vendored = Path(__file__).parent / "recipe_defaults" / f"parser-{version}.json"
    path = env_path("openrlhf", version)
    if is_complete(path):
        cached = cache_dir() / "import" / f"openrlhf-{version}-defaults.json"
        if cached.exists():
            return json.loads(cached.read_text())
        line = last_line_printed(path, PRINT_PARSER_FLAGS, {"RLBRIDGE_PARSER_DEFAULTS": "1"})
        if line is not None:
            found = json.loads(line)
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_text(json.dumps(found, sort_keys=True))
            return found
    if vendored.exists():
        return json.loads(vendored.read_text())
    # the copy of the same minor version, nearest below or above (0.11.0 reads 0.11.2's): flags rarely change in a patch
    minor = Version(version).release[:2]
    copies = [p for p in vendored.parent.glob("parser-[0-9]*.json")]  # not parser-types-*.json
    near = sorted(
        (Version(p.stem.removeprefix("parser-")), p)
        for p in copies
        if Version(p.stem.removeprefix("parser-")).release[:2] == minor
    )
    return json.loads(near[-1][1].read_text()) if near else None


def parser_types(version: str) -> dict[str, str]:
    """{flag: int | float | flag | str}, as train_ppo_ray's parser declares each option (the copy made from the
    engine environment for that version, or the same minor version's); empty when there is none."""
    folder = Path(__file__).parent / "recipe_defaults"
    minor = Version(version).release[:2]
    found = sorted(
        (Version(p.stem.removeprefix("parser-types-")), p)
        for p in folder.glob("parser-types-*.json")
        if Version(p.stem.removeprefix("parser-types-")).release[:2] == minor
    )
    exact = [p for v, p in found if str(v) == version]
    chosen = exact[0] if exact else (found[-1][1] if found else None)
    return json.loads(chosen.read_text()) if chosen else {}


def _check_type(recipe: Recipe, line: int | None, flag: str, value: Any, kind: str | None) -> None:
    """A value train_ppo_ray's argparse would refuse (`--train.batch_size fast`, `--train.colocate_all 1`), with its line."""
    if kind is None or (isinstance(value, str) and ("$(" in value or "`" in value)):
        return
    if kind == "flag":
        if value is not True:
            raise ConfigError(
                f"{recipe.where(line)}: --{flag} takes no value (got {value!r}); OpenRLHF's parser "
                "would stop at 'unrecognized arguments'"
            )
        return
    if value is True:
        raise ConfigError(f"{recipe.where(line)}: --{flag} needs a value ({kind})")
    values = value if isinstance(value, list) else [value]
    for item in values:
        ok = isinstance(item, int) if kind == "int" else isinstance(item, (int, float)) if kind == "float" else True
        if not ok or isinstance(item, bool):
            raise ConfigError(
                f"{recipe.where(line)}: --{flag}: {item!r} is not {'an' if kind == 'int' else 'a'} {kind}; OpenRLHF's parser declares "
                f"type={kind} for it"
            )


def _print_parser_flags() -> None:
    """Run inside an OpenRLHF environment: print the parser's option names as JSON (nothing is launched)."""
    import argparse
    import ast
    from datetime import datetime

    from rlbridge_adapters.openrlhf.validate import _load_by_path, _main_block, cli_file

    path = cli_file()
    main = _main_block(ast.parse(path.read_text()))
    split = next(
        i
        for i, node in enumerate(main.body)
        if isinstance(node, ast.Assign) and "parse_args" in ast.unparse(node.value)
    )
    ns: dict[str, Any] = {"argparse": argparse, "os": os, "datetime": datetime, "__name__": "rlbridge_openrlhf_cli"}
    config_py = path.parent.parent / "utils" / "config.py"
    if config_py.exists():
        ns["hierarchize"] = _load_by_path("rlbridge_openrlhf_config", config_py).hierarchize
    exec(compile(ast.Module(main.body[:split], []), str(path), "exec"), ns)
    names = sorted(
        {opt[2:] for action in ns["parser"]._actions for opt in action.option_strings if opt.startswith("--")}
    )
    if (
        os.environ.get("RLBRIDGE_PARSER_DEFAULTS") == "types"
    ):  # {flag: int | float | flag | str} as the parser declares it
        kinds = {}
        for action in ns["parser"]._actions:
            for opt in action.option_strings:
                if opt.startswith("--") and opt != "--help":
                    flag = action.nargs == 0
                    kinds[opt[2:]] = "flag" if flag else {int: "int", float: "float"}.get(action.type, "str")
        print(json.dumps(kinds, sort_keys=True))
        return
    if os.environ.get(
        "RLBRIDGE_PARSER_DEFAULTS"
    ):  # {flag: default} of every option, as train_ppo_ray's parser declares it
        defaults = {}
        for action in ns["parser"]._actions:
            for opt in action.option_strings:
                if opt.startswith("--") and opt != "--help" and action.default is not argparse.SUPPRESS:
                    value = action.default
                    defaults[opt[2:]] = (
                        value if isinstance(value, (int, float, str, bool, list, type(None))) else str(value)
                    )
        print(json.dumps(defaults, sort_keys=True))
        return
    print(json.dumps(names))


class OpenRLHFRecipeImporter(RecipeImporter):
    engine = "openrlhf"
    default_version = DEFAULT_VERSION
    stage: str | None = None
    """The offline stage of the recipe read last (None: train_ppo_ray), for special()."""
    asynchronous: bool = False
    """Whether the recipe read last runs OpenRLHF's async loop (--train.async_enable), for special()."""
    reference: bool = True
    """Whether the recipe read last has a reference model (--algo.kl.init_coef above 0), for special()."""

    def read(self, source: RecipeSource, version: str | None) -> Recipe:
        name = source.name
        cmd = source.command(MARKERS, "`python -m openrlhf.cli.train_ppo_ray`")
        version = _version_of(cmd.args, version)
        recipe = Recipe("openrlhf", name, version, [], list(cmd.notes))
        stage = stage_import.stage_of([w.text for w in cmd.words])
        self.stage = stage  # special() judges the offline stages' own flags (stage_import.special) for this recipe
        v = Version(version)
        if stage:  # an algorithm.name sft / dpo / reward_model job; train_ppo_ray's parser does not know its flags
            recipe.extras["stage"] = stage
            # the scripts train --train.max_epochs passes (default 1) over --data.max_samples rows, never a step count
            recipe.extras["base"] = {"training": {"steps": None, "epochs": 1}}
            if v < DOTTED_SINCE:
                raise ConfigError(
                    f"{name}: rlbridge drives OpenRLHF's {stage} script from {DOTTED_SINCE} (its dotted flags); "
                    "pass --engine-version 0.11.2 for a recipe in that spelling"
                )
        known = None if stage else parser_flags(version)
        if known is None and not stage:
            recipe.notes.append(
                (
                    None,
                    f"flags checked for their spelling only: no OpenRLHF {version} environment here "
                    f"(`rlbridge env create openrlhf=={version}` checks them with its own parser)",
                )
            )
        kinds = {} if stage else parser_types(version)
        for key, value, line, text, spelling, unknown in read_flags(cmd.args, v):
            written = spelling or key
            if v >= DOTTED_SINCE and "." not in written:
                hint = (
                    f"; OpenRLHF {version} calls it --{DOTTED[written]}"
                    if written in DOTTED
                    else " (flags are dotted since 0.10.2)"
                )
                raise ConfigError(
                    f"{recipe.where(line)}: unknown OpenRLHF {version} flag --{written}{hint}; "
                    "or pass --engine-version for the OpenRLHF version the recipe was written for"
                )
            if v < DOTTED_SINCE and "." in written:
                hint = f"; OpenRLHF {version} calls it --{FLAT[written]}" if written in FLAT else ""
                raise ConfigError(
                    f"{recipe.where(line)}: unknown OpenRLHF {version} flag --{written} (dotted flags start with 0.10.2){hint}; "
                    "pass --engine-version for the OpenRLHF version the recipe was written for"
                )
            if known is not None and written not in known:
                raise ConfigError(
                    f"{recipe.where(line)}: unknown OpenRLHF {version} flag --{written}{did_you_mean(written, known)}"
                )
            if not unknown:
                _check_type(recipe, line, written, value, kinds.get(written))
            recipe.settings.append(Setting(key, value, line, text, spelling, unknown))
        self.asynchronous = not stage and any(
            s.key == "train.async_enable" and s.value is True for s in recipe.settings
        )
        coef = next((s.value for s in recipe.settings if s.key in ("algo.kl.init_coef", "init_kl_coef")), None)
        if coef is None:
            defaults = parser_defaults(version) or {}
            coef = defaults.get("algo.kl.init_coef", defaults.get("init_kl_coef"))
        self.reference = not isinstance(coef, (int, float)) or coef > 0
        if self.asynchronous and v >= Version("0.10.2"):
            recipe.extras["base"] = async_start(recipe)
        elif not stage and engines_beside_actor(recipe):
            recipe.extras["base"] = async_start(recipe, asynchronous=False)
        return recipe

    def view(self, native: dict[str, Any], config: RunConfig) -> dict[str, Any]:
        if native.get("stage"):
            return stage_import.view(native, config, read_flags)
        out = stage_import.flags_view(native, read_flags)
        train, val = config.data.train, config.data.eval
        for source, dataset, split in (
            (train, "data.prompt_dataset", "data.prompt_split"),
            (val, "eval.dataset", "eval.split"),
        ):
            if source is not None and source.type == "hf":  # OpenRLHF loads a hub id itself: load_dataset(id)[split]
                out[dataset], out[split] = source.name, source.split or "train"
            elif source is not None and source.path:
                out[dataset] = source.path
        out["data.input_key"] = native["data"]["prompt_key"]
        out["data.label_key"] = native["data"]["answer_key"]
        return out

    def special(self, setting: Setting) -> tuple[str, str] | None:
        key = setting.key
        found = stage_import.special(key, setting.value) if self.stage else None
        if found:
            return found
        if key in LOGGING_STEPS:  # every step (OpenRLHF's default) is what rlbridge's plan leaves it at: compared
            return None if setting.value == 1 else ("owned", "logging: rlbridge records every step")
        if key in REFERENCE_ONLY and not self.reference:
            return "owned", "unused: with --algo.kl.init_coef 0 OpenRLHF creates no reference model (nor a KL term)"
        found = listed_special(key, OWNED, ACTION)
        if found:
            return found
        if self.asynchronous and key == "train.colocate_all" and setting.value is True:
            return "owned", (
                "with --train.async_enable OpenRLHF colocates only its DeepSpeed models (train_ppo_ray: 'Using "
                "--colocate_all_models in async RLHF only colocates DeepSpeed models'), and rlbridge places the "
                "reference with the actor itself; the vLLM engines get devices of their own (placement.policy: split)"
            )
        found = run_dir_special(setting)
        if found:
            return found
        if key in DATASETS and isinstance(setting.value, str) and "," in setting.value:
            return "action", "several datasets: point data.train at one file"
        if key in DATASETS and isinstance(setting.value, str) and "@" in setting.value:
            return (
                "action",
                "a hub dataset's data_dir (NAME@DIR): rlbridge's hf source loads a dataset by name and split",
            )
        return None

    def data_source(self, key: str, value: Any, recipe: Recipe) -> dict[str, Any] | None:
        """--data.prompt_dataset / --eval.dataset naming a hub dataset -> {type: hf, name, split} with the recipe's
        --data.prompt_split / --eval.split (OpenRLHF's blending_datasets: load_dataset(name)[split]); a file: None."""
        if key not in DATASETS or not isinstance(value, str) or looks_local(value) or "," in value or "@" in value:
            return None
        split = next((s.value for s in recipe.settings if s.key == DATASETS[key]), None)
        return {"type": "hf", "name": value, "split": str(split) if split is not None else "train"}

    def option(self, setting: Setting) -> tuple[str, Any]:
        return setting.key, setting.value

    def rewards(self, recipe: Recipe) -> list:
        """--reward.model_name_or_path (flat --reward_pretrain; comma-separated for several) -> {model: PATH}
        each; --reward.remote_url naming a .py file (OpenRLHF's reward_func file) -> {native: openrlhf,
        function: FILE.py:reward_func}, run unchanged. A remote URL stays an action (a server)."""
        from rlbridge.contract.importing import RecipeReward

        if recipe.extras.get("stage"):
            return []  # an offline stage has no reward
        out = []
        for s in recipe.settings:
            if s.key == "reward.model_name_or_path" and isinstance(s.value, str) and not s.unknown:
                out += [RecipeReward({"model": path.strip()}, [s]) for path in s.value.split(",") if path.strip()]
            elif s.unknown:
                continue  # known only when the script runs: the report names it
            elif s.key == "reward.remote_url" and isinstance(s.value, str) and s.value.endswith(".py"):
                out.append(RecipeReward({"native": "openrlhf", "function": f"{s.value}:reward_func"}, [s]))
        return out

    def telemetry(self, recipe: Recipe):
        """OpenRLHF's trackers as telemetry.sinks: W&B when --logger.wandb.key is given (flat --use_wandb KEY), with
        its project (OpenRLHF's default when unset), org and group, and its run name as run_name; TensorBoard when
        --logger.tensorboard_dir is (flat --use_tensorboard), in DIR/RUN_NAME as OpenRLHF writes it. The key itself
        is never imported (WANDB_API_KEY)."""
        from rlbridge.contract.importing import SECRET, SECRET_DETAIL, RecipeTelemetry, tracker_sink

        by_key: dict[str, Setting] = {}
        for s in recipe.settings:
            dotted = LOGGER_FLAT.get(s.key, s.key)
            if dotted in LOGGER_FLAGS and not s.unknown:
                by_key[dotted] = s
        if not by_key:
            return None
        defaults = {LOGGER_FLAT.get(k, k): v for k, v in (parser_defaults(recipe.version) or {}).items()}

        def value(flag: str) -> Any:
            found = by_key.get(flag)
            return found.value if found is not None else None

        wandb, board, run_name = (
            "logger.wandb.key" in by_key,
            value("logger.tensorboard_dir"),
            value("logger.wandb.run_name"),
        )
        sinks: list[dict[str, Any]] = []
        if wandb:
            project = value("logger.wandb.project") or defaults.get("logger.wandb.project")
            sinks.append(
                tracker_sink(
                    "wandb",
                    project=project,
                    entity=value("logger.wandb.org"),
                    group=value("logger.wandb.group"),
                )
            )
        if isinstance(board, str):
            sinks.append(tracker_sink("tensorboard", log_dir=f"{board.rstrip('/')}/{run_name}" if run_name else board))
        settings = []
        for flag, s in by_key.items():
            if flag == "logger.wandb.key":
                shown = Setting(s.key, SECRET, s.line, s.text, s.spelling)
                settings.append((shown, "sink", f"the wandb sink; {SECRET_DETAIL}"))
            elif flag == "logger.tensorboard_dir":
                settings.append((s, "sink", f"the tensorboard sink, log_dir {sinks[-1]['args']['log_dir']}"))
            elif flag == "logger.wandb.run_name" and (wandb or isinstance(board, str)):
                settings.append((s, "sink", f"run_name={s.value} (the trackers' run name)"))
            elif wandb:
                settings.append((s, "sink", f"the wandb sink's {LOGGER_ARGS[flag]}"))
            else:
                settings.append(
                    (s, "owned", "a W&B setting, unused: OpenRLHF logs to W&B only with --logger.wandb.key")
                )
        return RecipeTelemetry(sinks, settings, run_name if isinstance(run_name, str) and sinks else None)

    def difference_reason(self, key: str, config: RunConfig) -> str | None:
        """Why rlbridge's plan sets `key` to other than OpenRLHF's default (None: the knob that sets it says why)."""
        return DIFFERENCES.get(key)

    def defaults(self, recipe: Recipe) -> dict[str, Any]:
        """train_ppo_ray's own argparse defaults for this version (flags spelled as the recipe's keys): what
        a recipe that leaves a flag unset runs with (e.g. --rollout.n_samples_per_prompt 1, KL k1 in the reward)."""
        if recipe.extras.get("stage"):
            note = (
                None,
                f"flags the recipe leaves unset: the {recipe.extras['stage']} script's own defaults are not read here; "
                "they take rlbridge's",
            )
            if note not in recipe.notes:
                recipe.notes.append(note)
            return {}
        found = parser_defaults(recipe.version)
        if found is None:
            note = (
                None,
                f"OpenRLHF {recipe.version}'s defaults are unknown here (no environment, no vendored copy): "
                "flags the recipe leaves unset take rlbridge's defaults",
            )
            if note not in recipe.notes:
                recipe.notes.append(note)
            return {}
        v = Version(recipe.version)
        return {(DOTTED.get(k, k) if v < DOTTED_SINCE else k): value for k, value in found.items()}


def engines_beside_actor(recipe: Recipe) -> bool:
    """Whether the recipe's vLLM engines get GPUs of their own: OpenRLHF puts them on the actor's GPUs only with
    --train.colocate_all (flat --colocate_all_models)."""
    by_key = {s.key: s.value for s in recipe.settings}
    engines = by_key.get("vllm.num_engines")
    return by_key.get("train.colocate_all") is not True and isinstance(engines, int) and engines > 0


def async_start(recipe: Recipe, asynchronous: bool = True) -> dict[str, Any]:
    """Where the search starts for a recipe with --train.async_enable: rollout.max_staleness = its queue size
    (asynchrony.py: the queue of k batches bounds staleness at k, exactly), partial rollouts as the recipe says,
    and split placement with the vLLM engines' devices (num_engines x tensor_parallel_size) beside the actor's:
    OpenRLHF's async loop never puts vLLM on the actor's GPUs. The solver then checks every flag against the plan.
    asynchronous False: the split placement alone, for a synchronous recipe whose engines are beside the actor."""
    by_key = {s.key: s.value for s in recipe.settings}
    defaults = parser_defaults(recipe.version) or {}

    def value(key: str, fallback: int) -> Any:
        found = by_key.get(key, defaults.get(key))
        return found if isinstance(found, int) and not isinstance(found, bool) and found > 0 else fallback

    rollout_gpus = value("vllm.num_engines", 1) * value("vllm.tensor_parallel_size", 1)
    split = {
        "placement": {"policy": "split", "args": {"rollout_gpus": rollout_gpus}},
        "resources": {"gpus_per_node": value("actor.num_gpus_per_node", 1) + rollout_gpus},
    }
    if not asynchronous:
        return split
    return {
        "rollout": {
            "max_staleness": value("train.async_queue_size", 1),
            "partial_rollouts": by_key.get("train.partial_rollout_enable") is True,
        },
        **split,
    }


IMPORTER = OpenRLHFRecipeImporter
"""This engine's recipe reader (Backend.recipe_importer reads it from here)."""
