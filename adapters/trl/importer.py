"""Reading TRL recipes for `rlbridge import --from trl` (the inverse mapping itself is derived from this
adapter's translate(), in rlbridge.importer.solver).

Reads a GRPOConfig / RLOOConfig as YAML or JSON (what `trl grpo --config` reads: the config's fields
plus the script's model_name_or_path, dataset_name, reward_funcs), or the keyword arguments of a
`GRPOConfig(...)` / `RLOOConfig(...)` call in a Python file, parsed with `ast` and never executed
(literals, module-level constants and arithmetic on them; anything else is an error naming the line).
Keys are checked against the installed TRL's own config classes, and TRL's own config class
computes the values the recipe leaves to TRL (generation_batch_size, ...), so that the import
reproduces those too.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.metadata
import operator
from pathlib import Path
from typing import Any

from rlbridge.contract.config import RunConfig
from rlbridge.errors import ConfigError, did_you_mean
from rlbridge.contract.importing import Recipe, RecipeImporter, RecipeSource, Setting
from rlbridge_adapters.trl import layout

CONFIG_CLASSES = ("GRPOConfig", "RLOOConfig", "SFTConfig", "DPOConfig", "RewardConfig")
# the offline stages' config classes -> algorithm.name (adapters/trl/stages.py): an SFT/DPO/RM recipe
STAGE_CLASSES = {"SFTConfig": "sft", "DPOConfig": "dpo", "RewardConfig": "reward_model"}
COMPLETIONS = ("log_completions", "num_completions_to_print")  # -> telemetry.samples_per_step (telemetry())
OWNED = {
    "report_to": "logging: rlbridge writes metrics.jsonl and telemetry sinks (telemetry.sinks)",
    "logging_steps": "logging: rlbridge logs once per canonical step",
    "logging_strategy": "logging",
    "logging_first_step": "logging",
    "logging_dir": "logging",
    "run_name": "logging",
    "log_completions": "logging",
    "num_completions_to_print": "logging",
    "log_level": "logging",
    "disable_tqdm": "rlbridge shows its own progress bar",
    "push_to_hub": "rlbridge does not upload models",
    "hub_model_id": "rlbridge does not upload models",
    "remove_unused_columns": "rlbridge passes every data column to its reward plugins",
    "save_strategy": "rlbridge sets it from checkpoint.interval",
}
SCRIPT_KEYS = {  # keys of `trl grpo --config` that are not config fields
    "model_name_or_path": None,
    # the hub dataset: data.train {type: hf, name, config, split}, read back from the plan's data source in view()
    "dataset_name": None,
    "dataset_config": None,
    "dataset_train_split": None,
    "dataset_test_split": "the evaluation split of dataset_name: TRL's script evaluates on it only with an "
    "eval_strategy; set data.eval: {type: hf, name: ..., split: ...}",
    "reward_funcs": "the recipe's reward functions: rlbridge rewards are plugins (reward: [{name: ...}]); port them to reward plugins",
    "reward_model_name_or_path": "a neural reward model: reward: [{model: PATH}]",
    "dtype": None,
    "torch_dtype": None,
    # LoRA (peft; TRL scripts' ModelConfig): model.lora, read back from the plan's peft settings in view()
    "use_peft": None,
    "lora_r": None,
    "lora_alpha": None,
    "lora_dropout": None,
    "lora_target_modules": None,
    "lora_task_type": None,
    "attn_implementation": "the model's attention implementation: set by the engine",
    "trust_remote_code": "rlbridge loads local models",
}
TORCH_DTYPES = {"bfloat16", "float16", "float32", "float64", "half", "float", "double"}
# peft's LoraConfig(...) arguments -> the LoRA keys of `trl grpo --config` (ModelConfig), which view() reads back
LORA_ARGS = {
    "r": "lora_r",
    "lora_alpha": "lora_alpha",
    "lora_dropout": "lora_dropout",
    "target_modules": "lora_target_modules",
    "task_type": "lora_task_type",
}
_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
    ast.Mod: operator.mod,
}


def config_fields(class_name: str) -> dict[str, Any] | None:
    """Field names and defaults of the installed TRL config class (None when TRL is not installed here)."""
    try:
        importlib.metadata.version("trl")
    except importlib.metadata.PackageNotFoundError:
        return None
    import trl

    cls = getattr(trl, class_name)
    return {f.name: f for f in dataclasses.fields(cls)}


class _Unreadable(Exception):
    def __init__(self, node: ast.AST, why: str):
        super().__init__(why)
        self.node = node


def _literal(node: ast.AST, constants: dict[str, Any]) -> Any:
    """A value from source without running it: literals, module constants, arithmetic on them."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_literal(e, constants) for e in node.elts]
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise _Unreadable(node, "a ** expansion")
        return {_literal(k, constants): _literal(v, constants) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _literal(node.operand, constants)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_literal(node.left, constants), _literal(node.right, constants))
    if isinstance(node, ast.Name):
        if node.id in constants:
            return constants[node.id]
        raise _Unreadable(node, f"the name {node.id!r}, which is not a module-level constant")
    if isinstance(node, ast.JoinedStr) and all(isinstance(v, ast.Constant) for v in node.values):
        return "".join(str(v.value) for v in node.values)
    if (  # torch.bfloat16: TRL and transformers take the dtype's name as well (model_init_kwargs={"dtype": ...})
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "torch"
        and node.attr in TORCH_DTYPES
    ):
        return node.attr
    raise _Unreadable(node, f"`{ast.unparse(node)}`")


def _assigned(tree: ast.Module, node: ast.AST) -> ast.AST:
    """A variable's value where the file assigns it once (`peft_config = LoraConfig(...)`), else the node itself."""
    if not isinstance(node, ast.Name):
        return node
    values = [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == node.id for t in n.targets)
    ]
    return values[0] if len(values) == 1 else node


def _loaded_datasets(tree: ast.Module, constants: dict[str, Any]) -> dict[str, list[Setting]]:
    """Variables that hold a hub dataset exactly as `load_dataset(NAME, CONFIG, split=SPLIT)` returns
    it (literal arguments, nothing else), as the settings of `trl grpo --config` (dataset_name, dataset_config,
    dataset_train_split), each with its line. A variable assigned anything else as well (`ds = ds.map(fn)`: rows
    made by code) is left out: the trainer's dataset stays an action."""
    assigned: dict[str, list[tuple[ast.Assign, int | None]]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                names = target.elts if isinstance(target, ast.Tuple) else [target]
                for k, name in enumerate(names):
                    if isinstance(name, ast.Name):
                        assigned.setdefault(name.id, []).append((node, k if isinstance(target, ast.Tuple) else None))
    out: dict[str, list[Setting]] = {}
    for var, assignments in assigned.items():
        if len(assignments) != 1:
            continue
        node, index = assignments[0]
        call = node.value
        if not (isinstance(call, ast.Call) and _call_name(call) == "load_dataset") or not 1 <= len(call.args) <= 2:
            continue
        try:
            args = [_literal(a, constants) for a in call.args]
            kwargs = {kw.arg: _literal(kw.value, constants) for kw in call.keywords}
        except _Unreadable:
            continue
        if None in kwargs or set(kwargs) - {"name", "split"} or not isinstance(args[0], str):
            continue  # data_files, revision, streaming, **kwargs...: not what `trl grpo --config` names
        split = kwargs.get("split")
        if index is not None:  # train, test = load_dataset(NAME, split=[A, B])
            if not isinstance(split, list) or index >= len(split):
                continue
            split = split[index]
        elif isinstance(split, list):
            continue
        text = f"{var} = {ast.unparse(call)}"
        found = [Setting("dataset_name", args[0], call.lineno, text, "train_dataset")]
        config = args[1] if len(args) > 1 else kwargs.get("name")
        for key, value in (("dataset_config", config), ("dataset_train_split", split)):
            if value is not None:
                found.append(Setting(key, value, call.lineno, text, f"train_dataset.{key.rsplit('_', 1)[-1]}"))
        out[var] = found
    return out


def _lora_settings(node: ast.AST, constants: dict[str, Any]) -> list[Setting] | None:
    """`peft_config=LoraConfig(r=16, ...)` as the LoRA settings of `trl grpo --config` (use_peft and lora_*), each
    with its line; None for anything else (another config class, a variable, a value that is not a literal)."""
    if not (isinstance(node, ast.Call) and _call_name(node) == "LoraConfig" and not node.args):
        return None
    out = [Setting("use_peft", True, node.lineno, f"peft_config={ast.unparse(node)}", "peft_config")]
    for kw in node.keywords:
        if kw.arg not in LORA_ARGS:
            return None  # a LoraConfig argument no canonical LoRA knob has: the report keeps the whole object
        try:
            value = _literal(kw.value, constants)
        except _Unreadable:
            return None
        out.append(Setting(LORA_ARGS[kw.arg], value, kw.value.lineno, f"{kw.arg}={ast.unparse(kw.value)}", kw.arg))
    return out


def _constants(tree: ast.Module) -> dict[str, Any]:
    """Module-level NAME = <literal> assignments (later ones win, as when the file runs top to bottom)."""
    constants: dict[str, Any] = {}
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else ([node.target] if isinstance(node, ast.AnnAssign) and node.value else [])
        )
        for target in targets:
            if isinstance(target, ast.Name):
                try:
                    constants[target.id] = _literal(node.value, constants)
                except _Unreadable:
                    constants.pop(target.id, None)
    return constants


def _call_name(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else (func.attr if isinstance(func, ast.Attribute) else "")


class TRLRecipeImporter(RecipeImporter):
    engine = "trl"

    @property
    def default_version(self) -> str:
        try:
            return importlib.metadata.version("trl")
        except importlib.metadata.PackageNotFoundError:
            return "1.16.0"

    def read(self, source: RecipeSource, version: str | None) -> Recipe:
        path = source.path
        if not source.is_file:
            raise ConfigError(
                f"{source.argument}: no such file; --from trl reads a GRPOConfig/RLOOConfig as YAML, JSON or a "
                "Python file"
            )
        version = version or self.default_version
        if path.suffix == ".py":
            recipe = self._read_python(path, version)
        elif path.suffix in (".yaml", ".yml", ".json"):
            recipe = self._read_mapping(source, version)
        else:
            raise ConfigError(f"{path}: --from trl reads .yaml, .yml, .json (trl grpo --config) or .py files")
        _as_trl_reads_it(recipe)
        self._check_known(recipe)
        return recipe

    def _read_mapping(self, source: RecipeSource, version: str) -> Recipe:
        path = source.path
        data, lines = source.mapping()
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping of GRPOConfig fields")
        class_name = "RLOOConfig" if str(data.get("trainer", "")).lower() == "rloo" else "GRPOConfig"
        data = {k: v for k, v in data.items() if k != "trainer"}
        recipe = Recipe("trl", str(path), version, [], extras={"config_class": class_name})
        recipe.settings.append(Setting("config_class", class_name, None, class_name))
        fields = config_fields(class_name) or {}
        launch: dict[str, Setting] = {}  # what TRL's CLI hands to `accelerate launch` (its flags over its config file)
        for key, value in data.items():
            known = key in fields or key in SCRIPT_KEYS
            accelerate = None if known else layout.recipe_settings(key, value, path.parent)
            if accelerate is None:
                recipe.settings.append(
                    Setting(_key(key), value, lines.get(key), f"{key}: {value}", key if _key(key) != key else "")
                )
                continue
            from_file = key in ("accelerate_config", "config_file")
            for name, item in accelerate:
                if not (from_file and name in launch):
                    text = f"{key}: {value}" + (f" ({name.split('.', 1)[1]}: {item})" if from_file else "")
                    launch[name] = Setting(name, item, lines.get(key), text, "" if from_file else key)
        recipe.settings += launch.values()
        return recipe

    def _read_python(self, path: Path, version: str) -> Recipe:
        try:
            tree = ast.parse(path.read_text(), str(path))
        except SyntaxError as exc:
            raise ConfigError(f"{path}:{exc.lineno}: Python syntax error: {exc.msg}") from exc
        constants = _constants(tree)
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _call_name(n) in CONFIG_CLASSES]
        if not calls:
            raise ConfigError(
                f"{path}: no GRPOConfig(...) or RLOOConfig(...) call found; rlbridge import reads the config's keyword arguments"
            )
        call = min(calls, key=lambda n: n.lineno)
        class_name = _call_name(call)
        recipe = Recipe("trl", str(path), version, [], extras={"config_class": class_name})
        if class_name in STAGE_CLASSES:
            recipe.extras["stage"] = STAGE_CLASSES[class_name]
        if len(calls) > 1:
            recipe.notes.append(
                (call.lineno, f"{len(calls)} config calls; the first ({class_name}, line {call.lineno}) is imported")
            )
        recipe.settings.append(Setting("config_class", class_name, call.lineno, class_name))
        if call.args:
            raise ConfigError(
                f"{path}:{call.lineno}: {class_name}(...) has positional arguments; rlbridge import reads keyword arguments only"
            )
        for kw in call.keywords:
            if kw.arg is None:
                raise ConfigError(
                    f"{path}:{kw.value.lineno}: {class_name}(**{ast.unparse(kw.value)}) cannot be read without running the file; "
                    "write the arguments out as keyword=literal"
                )
            try:
                value = _literal(kw.value, constants)
            except _Unreadable as exc:
                raise ConfigError(
                    f"{path}:{exc.node.lineno}: {class_name} argument {kw.arg}={ast.unparse(kw.value)} cannot be read without "
                    f"running the file ({exc}); write the value as a literal"
                ) from None
            recipe.settings.append(
                Setting(
                    _key(kw.arg),
                    value,
                    kw.value.lineno,
                    f"{kw.arg}={ast.unparse(kw.value)}",
                    kw.arg if _key(kw.arg) != kw.arg else "",
                )
            )
        # the trainer call: its model (a literal) and what it passes that rlbridge does not import
        datasets = _loaded_datasets(tree, constants)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _call_name(node) in (
                "GRPOTrainer",
                "RLOOTrainer",
                "SFTTrainer",
                "DPOTrainer",
                "RewardTrainer",
            ):
                for kw in node.keywords:
                    if kw.arg == "model":
                        try:
                            recipe.settings.append(
                                Setting(
                                    "model_name_or_path",
                                    _literal(kw.value, constants),
                                    kw.value.lineno,
                                    f"model={ast.unparse(kw.value)}",
                                )
                            )
                        except _Unreadable:
                            recipe.notes.append(
                                (kw.value.lineno, f"model={ast.unparse(kw.value)} is not a literal; set model.path")
                            )
                    elif kw.arg == "peft_config" and _lora_settings(_assigned(tree, kw.value), constants) is not None:
                        recipe.settings += _lora_settings(_assigned(tree, kw.value), constants)
                    elif kw.arg == "train_dataset" and isinstance(kw.value, ast.Name) and kw.value.id in datasets:
                        recipe.settings += datasets[kw.value.id]
                    elif kw.arg in (
                        "reward_funcs",
                        "train_dataset",
                        "eval_dataset",
                        "peft_config",
                        "environment_factory",
                    ):
                        recipe.settings.append(
                            Setting(
                                f"{_call_name(node)}.{kw.arg}",
                                ast.unparse(kw.value),
                                kw.value.lineno,
                                f"{kw.arg}={ast.unparse(kw.value)}",
                            )
                        )
        return recipe

    def _check_known(self, recipe: Recipe) -> None:
        fields = config_fields(recipe.extras["config_class"])
        if fields is None:
            recipe.notes.append((None, "keys not checked: TRL is not installed here"))
            return
        installed = importlib.metadata.version("trl")
        if installed != recipe.version:
            recipe.notes.append((None, f"keys checked against the installed TRL {installed}, not {recipe.version}"))
        for s in recipe.settings:
            if s.key in fields or s.key in SCRIPT_KEYS or s.key == "config_class" or "." in s.key:
                continue
            raise ConfigError(
                f"{recipe.where(s.line)}: unknown TRL {installed} {recipe.extras['config_class']} field "
                f"'{s.spelling or s.key}'{did_you_mean(s.key, fields)}"
            )
        self._check_types(recipe, installed)

    @staticmethod
    def _check_types(recipe: Recipe, installed: str) -> None:
        """Each value against the type TRL's own config class declares for its field (`learning_rate: fast`,
        `num_generations: [8]` are refused here, with their line, as HfArgumentParser would refuse them)."""
        import typing

        import trl
        from pydantic import TypeAdapter, ValidationError

        cls = getattr(trl, recipe.extras["config_class"])
        try:
            hints = typing.get_type_hints(cls)
        except Exception:  # noqa: BLE001 - a hint this Python cannot resolve: the fields are not type-checked
            recipe.notes.append((None, f"values not type-checked: {cls.__name__}'s annotations do not resolve here"))
            return
        for s in recipe.settings:
            hint = hints.get(s.key)
            if hint is None or s.value is None:
                continue
            try:
                adapter = TypeAdapter(hint)
            except Exception:  # noqa: BLE001 - a type pydantic cannot check (an arbitrary class): TRL checks it
                continue
            try:
                adapter.validate_python(s.value)
            except ValidationError:
                shown = getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
                raise ConfigError(
                    f"{recipe.where(s.line)}: {s.spelling or s.key}: {s.value!r} is not a valid value for TRL {installed} "
                    f"{cls.__name__}.{s.key} (declared {shown})"
                ) from None

    def view(self, native: dict[str, Any], config: RunConfig) -> dict[str, Any]:
        out = dict(native["args"])
        out.update(layout.recipe_view(native))  # accelerate's config-file keys (TRL's CLI launches through it)
        out["config_class"] = native["config_class"]
        train = config.data.train
        if train.type == "hf":  # the hub dataset as `trl grpo --config` names it (rlbridge loads it, not TRL's script)
            out.update(dataset_name=train.name, dataset_train_split=train.split or "train")
            if train.config:
                out["dataset_config"] = train.config
        processes = (native.get("accelerate") or {}).get("num_processes", 1)
        per_step = out.get("per_device_train_batch_size", 0) * processes
        if "steps_per_generation" not in out and out.get("generation_batch_size") and per_step:
            # what TRL's __post_init__ computes from generation_batch_size (grpo_config.py), as a recipe writes it
            steps, rest = divmod(out["generation_batch_size"], per_step)
            if not rest:
                out["steps_per_generation"] = steps
        out["model_name_or_path"] = native["model"]["path"]
        out["dtype"] = native["model"]["dtype"]
        lora = native.get("lora")
        out["use_peft"] = lora is not None
        if lora is not None:
            out.update(
                lora_r=lora["r"],
                lora_alpha=lora["lora_alpha"],
                lora_dropout=lora["lora_dropout"],
                lora_target_modules=lora["target_modules"],
                lora_task_type=lora["task_type"],
            )
        return out

    def special(self, setting: Setting) -> tuple[str, str] | None:
        key = setting.key
        if key == "report_to" and setting.value == "none":
            return None  # what rlbridge's plan sets itself: the round trip gives it back
        if key in OWNED:
            return "owned", OWNED[key]
        if key in SCRIPT_KEYS and SCRIPT_KEYS[key]:
            return "action", SCRIPT_KEYS[key]
        if key.startswith("accelerate."):  # what TRL's CLI hands to accelerate launch (layout.recipe_settings)
            owned = layout.ACCELERATE_OWNED.get(key.split(".", 1)[1])
            return ("owned", owned) if owned else None
        if "." in key:  # GRPOTrainer(reward_funcs=..., train_dataset=...)
            what = key.split(".", 1)[1]
            return "action", {
                "reward_funcs": "the recipe's reward functions: rlbridge rewards are plugins (reward: [{name: ...}]); port them",
                "train_dataset": "the trainer's dataset (code): set data.train to a local jsonl/parquet/save_to_disk copy",
                "eval_dataset": "the trainer's eval dataset (code): set data.eval",
                "peft_config": "a peft config object (code): set model.lora",
                "environment_factory": "a TRL environment: write an rlbridge environment plugin",
            }.get(what, "trainer argument")
        if (
            key == "model_init_kwargs"
            and isinstance(setting.value, dict)
            and set(setting.value) <= {"dtype", "torch_dtype"}
        ):
            return None
        return None

    def option(self, setting: Setting) -> tuple[str, Any]:
        return setting.key, setting.value

    def rewards(self, recipe: Recipe) -> list:
        """The recipe's reward_funcs as canonical reward entries, weighted by reward_weights: a function
        defined in the Python file -> {native: trl, function: FILE.py:NAME}; a name from trl.rewards
        (what `trl grpo --reward_funcs` looks up) -> {native: trl, function: trl.rewards:NAME}; a dotted
        path -> {native: trl, function: module:NAME}; a model id or path -> {model: PATH}; and
        reward_model_name_or_path -> {model: PATH}. Any other expression is left to the report's action."""
        from rlbridge.contract.importing import RecipeReward

        if recipe.extras.get("stage"):
            return []  # an offline stage has no reward
        funcs = next(
            (
                s
                for s in recipe.settings
                if s.key in ("reward_funcs", "GRPOTrainer.reward_funcs", "RLOOTrainer.reward_funcs")
            ),
            None,
        )
        weights = next((s for s in recipe.settings if s.key == "reward_weights"), None)
        model = next((s for s in recipe.settings if s.key == "reward_model_name_or_path"), None)
        found: list[tuple[dict[str, Any], Setting]] = []
        if model is not None and isinstance(model.value, str):  # TRL's script puts the reward model first
            found.append(({"model": model.value}, model))
        if funcs is not None:
            items = _reward_items(funcs, recipe)
            if items is None:
                return []
            found += [(item, funcs) for item in items]
        if weights is not None and isinstance(weights.value, list) and len(weights.value) == len(found):
            return [
                RecipeReward({**spec, "weight": float(w)}, [used, weights])
                for (spec, used), w in zip(found, weights.value)
            ]
        return [RecipeReward(spec, [used]) for spec, used in found]

    def data_source(self, key: str, value: Any, recipe: Recipe) -> dict[str, Any] | None:
        """dataset_name (a YAML recipe's, or a Python recipe's `load_dataset(NAME, ...)` passed as train_dataset) ->
        {type: hf, name, config, split} with the recipe's dataset_config / dataset_train_split."""
        if key != "dataset_name" or not isinstance(value, str):
            return None
        by_key = {s.key: s.value for s in recipe.settings}
        source = {"type": "hf", "name": value, "split": str(by_key.get("dataset_train_split") or "train")}
        if by_key.get("dataset_config") is not None:
            source["config"] = str(by_key["dataset_config"])
        return source

    def telemetry(self, recipe: Recipe):
        """report_to's trackers as telemetry.sinks (wandb, tensorboard, mlflow; W&B's project is the one transformers
        picks, WANDB_PROJECT or 'huggingface'), run_name as the config's run_name. report_to 'none' is what the plan
        sets itself (same)."""
        from rlbridge.contract.importing import RecipeTelemetry, tracker_sink
        from rlbridge.contract.importing import show_value

        by_key = {s.key: s for s in recipe.settings if s.key in ("report_to", "run_name", *COMPLETIONS)}
        report, name = by_key.get("report_to"), by_key.get("run_name")
        trackers = [] if report is None else report.value if isinstance(report.value, list) else [report.value]
        trackers = [str(t) for t in trackers if t not in ("none", None)]
        log, shown = by_key.get("log_completions"), by_key.get("num_completions_to_print")
        if not trackers and name is None and log is None and shown is None:
            return None
        sinks, missing = [], []
        for tracker in trackers:
            sink = tracker_sink(tracker, project="huggingface" if tracker == "wandb" else None)
            if sink:
                sinks.append(sink)
            else:
                missing.append(tracker)
        settings = []
        if trackers:
            detail = f"telemetry.sinks={show_value(sinks)}"
            if missing:
                detail += f"; {', '.join(missing)}: rlbridge has no such sink (`rlbridge plugins` lists the sinks)"
            settings.append((report, "action" if missing else "sink", detail))
        if name is not None and isinstance(name.value, str):
            settings.append((name, "sink", f"run_name={name.value}"))
        # the completions TRL logs each step: rlbridge's sampled rows (samples.jsonl and the sinks' tables)
        samples = None
        if log is not None:
            samples = (shown.value if shown is not None and isinstance(shown.value, int) else None) if log.value else 0
            kept = "telemetry.samples_per_step (4)" if samples is None else f"telemetry.samples_per_step={samples}"
            settings.append((log, "sink", f"{kept}: rlbridge's sampled completions, samples.jsonl"))
        if shown is not None:
            settings.append(
                (shown, "sink", f"telemetry.samples_per_step={shown.value}")
                if log is not None and log.value and isinstance(shown.value, int)
                else (shown, "owned", "unused: TRL prints completions only with log_completions")
            )
        return RecipeTelemetry(
            sinks, settings, name.value if name is not None and isinstance(name.value, str) else None, samples
        )

    def defaults(self, recipe: Recipe) -> dict[str, Any]:
        """What TRL's own config class makes of the recipe: the values it leaves unset, as TRL computes them."""
        class_name = recipe.extras["config_class"]
        fields = config_fields(class_name)
        if fields is None:
            return {}
        import trl

        kwargs = {s.key: s.value for s in recipe.settings if s.key in fields}
        kwargs.setdefault("output_dir", "/tmp/rlbridge-import")
        cls = getattr(trl, class_name)
        # TRL turns bf16 on by default (bf16=None -> not fp16), which transformers refuses on a machine
        # without a GPU: retry as use_cpu (only the device changes), then without the recipe's device flags
        for drop, extra in (((), {}), ((), {"use_cpu": True}), (("bf16", "fp16", "tf32"), {"use_cpu": True})):
            try:
                cfg = cls(
                    **{k: v for k, v in kwargs.items() if k not in drop},
                    **{k: v for k, v in extra.items() if k not in kwargs},
                )
                break
            except Exception:  # noqa: BLE001 - TRL's own validation of the recipe; retried for this machine
                cfg = None
        if cfg is None:  # TRL's own config class refuses the recipe: its reason, not a silent loss of every default
            try:
                cls(**{k: v for k, v in kwargs.items() if k not in ("bf16", "fp16", "tf32")}, use_cpu=True)
            except Exception as exc:  # noqa: BLE001 - TRL's message is the error
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                if "divisible" in first:
                    # a batch check on this one process (generation_batch_size = per-device batch x processes x
                    # steps_per_generation): the recipe is for several processes, so TRL's declared defaults stand
                    recipe.notes.append(
                        (
                            None,
                            f"TRL {class_name} checks batch sizes on one process here ({first}); the "
                            "recipe is for several, so the defaults are the class's declared ones",
                        )
                    )
                    # None is left out: for these fields (output_dir, generation_batch_size...) TRL computes the value
                    out = {
                        name: f.default
                        for name, f in fields.items()
                        if name not in ("use_cpu", "bf16", "fp16", "tf32")
                        and isinstance(f.default, (int, float, str, bool))
                    }
                    out["config_class"] = class_name
                    out.update(layout.RECIPE_DEFAULTS)
                    return out
                line = next(
                    (s.line for s in recipe.settings if isinstance(s.value, str) and s.value and s.value in first), None
                )
                raise ConfigError(f"{recipe.where(line)}: TRL {class_name} refuses the recipe: {first}") from None
            return {}
        injected = {
            k for k in ("use_cpu", "bf16", "fp16", "tf32") if k not in kwargs
        }  # device flags: the machine's, not the recipe's
        if "output_dir" not in {s.key for s in recipe.settings}:
            injected.add("output_dir")  # the placeholder above, not a TRL default
        out = {}
        for name in fields:
            if name in injected:
                continue
            value = getattr(cfg, name, None)
            if isinstance(value, (int, float, str, bool, list, dict)) or value is None:
                out[name] = value.value if hasattr(value, "value") else value
        out["config_class"] = class_name
        out.update(_lora_defaults(recipe))
        out.update(layout.RECIPE_DEFAULTS)
        return out


def _lora_defaults(recipe: Recipe) -> dict[str, Any]:
    """peft's LoraConfig defaults of the arguments a recipe's `peft_config=LoraConfig(...)` leaves unset (the
    rank and alpha a bare LoraConfig() trains with), as the LoRA keys view() reads back; empty without peft."""
    given = {s.key for s in recipe.settings}
    if "use_peft" not in given or not any(s.spelling == "peft_config" for s in recipe.settings):
        return {}
    try:
        import peft
    except ImportError:
        return {}
    declared = {f.name: f.default for f in dataclasses.fields(peft.LoraConfig)}
    return {
        key: declared[arg]
        for arg, key in LORA_ARGS.items()
        if key not in given and isinstance(declared.get(arg), (int, float, str))
    }


def _as_trl_reads_it(recipe: Recipe) -> None:
    """Values TRL's config class normalises itself: DPOConfig(loss_type="sigmoid") is a list of one loss
    (trl/trainer/dpo_config.py __post_init__: a str becomes [str])."""
    if recipe.extras.get("config_class") != "DPOConfig":
        return
    for i, s in enumerate(recipe.settings):
        if s.key == "loss_type" and isinstance(s.value, str):
            recipe.settings[i] = Setting(s.key, [s.value], s.line, s.text, s.spelling)


def _reward_items(setting: Setting, recipe: Recipe) -> list[dict[str, Any]] | None:
    """reward_funcs (a YAML list of names, or the source text of the trainer's argument) as reward entries;
    None when one item is not a name this reader can resolve without running anything."""
    value = setting.value
    defined: set[str] = set()
    imported: dict[str, str] = {}
    if "." in setting.key:  # GRPOTrainer(reward_funcs=...): the argument's source text
        try:
            node = ast.parse(value, mode="eval").body
            tree = ast.parse(Path(recipe.source).read_text())
        except (SyntaxError, OSError):
            return None
        defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        imported = _imported_names(tree)
        nodes = node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]
        names: list[Any] = []
        for n in nodes:
            if isinstance(n, ast.Name):
                names.append(("function", n.id))
            elif isinstance(n, ast.Constant) and isinstance(n.value, str):
                names.append(n.value)
            else:
                return None
    else:
        names = value if isinstance(value, list) else [value]
    out: list[dict[str, Any]] = []
    for name in names:
        if isinstance(name, tuple) and name[1] in imported:  # `from trl.rewards import accuracy_reward`
            out.append({"native": "trl", "function": imported[name[1]]})
        elif isinstance(name, tuple):
            if name[1] not in defined:
                return None
            out.append(
                {"native": "trl", "function": f"{Path(recipe.source).resolve()}:{name[1]}"}
            )  # the file itself, wherever the config goes
        elif not isinstance(name, str):
            return None
        elif name in _trl_reward_names():
            out.append({"native": "trl", "function": f"trl.rewards:{name}"})
        elif "/" in name or Path(name).exists() or name.startswith("builtin:"):
            out.append({"model": name})
        elif "." in name:
            module, _, attr = name.rpartition(".")
            out.append({"native": "trl", "function": f"{module}:{attr}"})
        else:
            return None
    return out


def _imported_names(tree: ast.Module) -> dict[str, str]:
    """Names the file imports from a module (`from trl.rewards import accuracy_reward as acc`) -> 'module:name'."""
    return {
        (alias.asname or alias.name): f"{node.module}:{alias.name}"
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module and not node.level
        for alias in node.names
        if alias.name != "*"
    }


def _trl_reward_names() -> set[str]:
    try:
        import trl.rewards
    except ImportError:
        return set()
    return {n for n in getattr(trl.rewards, "__all__", dir(trl.rewards)) if not n.startswith("_")}


def _key(key: str) -> str:
    return {"torch_dtype": "dtype"}.get(key, key)


IMPORTER = TRLRecipeImporter
"""This engine's recipe reader (Backend.recipe_importer reads it from here)."""
