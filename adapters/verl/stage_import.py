"""Reading verl SFT recipes (`torchrun -m verl.trainer.sft_trainer key=value ...`) for `rlbridge import
--from verl`: the overrides are read as for main_ppo (adapters/verl/importer.py), the recipe becomes an
algorithm.name sft job, and what it leaves unset is verl's packaged sft_trainer_engine config (composed
by Hydra in the verl environment, or the copy in recipe_defaults/sft_trainer-VERSION.yaml)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rlbridge.contract.backend import flatten
from rlbridge.contract.config import RunConfig

MARKER = "verl.trainer.sft_trainer"
STAGE = "sft"
# where rlbridge's sft_trainer plan departs from verl's defaults, and why (adapters/verl/stages.py)
DIFFERENCES = {
    "data.truncation": "offline.max_length truncates at the end (verl's default 'error' stops the run on a long row)",
    "data.ignore_input_ids_mismatch": "rows are tokenized message by message; a BPE tokenizer may merge across the "
    "boundary",
    "data.train_batch_size": "training.mini_batch_size: verl's SFT step is one optimizer update",
    "data.use_dynamic_bsz": "offline.packing (token-budget batches with padding-free packing)",
    "model.use_remove_padding": "offline.packing (padding-free varlen attention)",
    "model.enable_gradient_checkpointing": "training.gradient_checkpointing (rlbridge's default: off)",
    "checkpoint.save_contents": "the last step's Hugging Face model is the stage's output (RUN_DIR/model)",
    "trainer.resume_mode": "checkpoint.resume: rlbridge resumes only when asked (verl's auto resumes from any "
    "checkpoint it finds)",
    "trainer.test_freq": "data.eval_interval (-1 without data.eval)",
    "trainer.save_freq": "checkpoint.interval",
    "trainer.experiment_name": "run_name (rlbridge's run directory is named by it)",
    "trainer.seed": "training.seed",
    "engine.seed": "training.seed",
    "optim.clip_grad": "training.grad_clip",
    "optim.weight_decay": "training.weight_decay",
}


def is_stage(words: list[str]) -> bool:
    return any(w == MARKER or w.endswith("/" + MARKER) for w in words)


def sft_defaults(version: str) -> dict[str, Any] | None:
    """verl's composed sft_trainer_engine config (flat): from the verl environment when it exists, else the copy."""
    from rlbridge.engine.environments import env_path, is_complete, last_line_printed

    from rlbridge.machine import cache_dir

    path = env_path("verl", version)
    cached = cache_dir() / "import" / f"verl-{version}-sft-defaults.yaml"
    if is_complete(path) and cached.exists():
        return flatten(yaml.safe_load(cached.read_text()))
    if is_complete(path):
        code = (
            "import os, json; from hydra import compose, initialize_config_dir; from omegaconf import OmegaConf; "
            "import verl.trainer.config as c\n"
            "with initialize_config_dir(config_dir=os.path.dirname(c.__file__), version_base=None):\n"
            "    print(json.dumps(OmegaConf.to_container(compose(config_name='sft_trainer_engine'), resolve=False)))"
        )
        line = last_line_printed(path, code, {"PYTHONWARNINGS": "ignore"})
        if line is not None:
            found = yaml.safe_load(line)
            try:
                cached.parent.mkdir(parents=True, exist_ok=True)
                cached.write_text(yaml.safe_dump(found))
            except OSError:
                pass  # no cache to write: the copy below
            else:
                return flatten(found)
    copy = Path(__file__).parent / "recipe_defaults" / f"sft_trainer-{version}.yaml"
    return flatten(yaml.safe_load(copy.read_text())) if copy.exists() else None


def overrides_view(native: dict[str, Any], config: RunConfig) -> dict[str, Any]:
    """A plan (main_ppo's or sft_trainer's) as the overrides a recipe writes: <model_dir> filled in, no
    Hydra '+', and the data files the config's own (rlbridge rewrites the rows into the run directory).
    VerlRecipeImporter.view() for both trainers."""
    out: dict[str, Any] = {}
    model = native["model"]["path"]
    for key, value in flatten(native["overrides"]).items():
        if isinstance(value, str):
            value = value.replace("<model_dir>", model)
        out[key.lstrip("+")] = value
    train, val = config.data.train, config.data.eval
    out["data.train_files"] = train.path if train.path else out.get("data.train_files")
    if val is not None and val.path:
        out["data.val_files"] = val.path
    else:
        out.pop("data.val_files", None)
    return out
