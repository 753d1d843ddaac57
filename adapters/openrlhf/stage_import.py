"""Reading OpenRLHF's offline-stage command lines (`openrlhf.cli.train_sft`, `train_dpo`, `train_rm`,
launched with `deepspeed --module` or `torchrun -m`) for `rlbridge import --from openrlhf`: the flags are
read as for train_ppo_ray (adapters/openrlhf/importer.py, the dotted spelling of 0.10.2+), the recipe
becomes an algorithm.name sft / dpo / reward_model job (adapters/openrlhf/stages.py plans it back)."""

from __future__ import annotations

from typing import Any

from rlbridge.contract.config import RunConfig
from rlbridge.contract.importing import Token
from rlbridge_adapters.openrlhf.stages import MODULES

STAGES = {module: stage for stage, module in MODULES.items()}  # openrlhf.cli.train_sft -> sft, ...
OWNED = {
    "data.max_samples": "the rows rlbridge writes: training.steps x training.batch_size (repeated to fill them), or "
    "all of data.train",
    "ds.attn_implementation": "rlbridge picks the attention kernel for the device (eager on CPU, OpenRLHF's default "
    "on GPUs)",
}
# the row columns rlbridge writes (adapters/openrlhf/stages.py) and the canonical columns of each stage's rows
COLUMNS = {"data.output_key": "completion", "data.chosen_key": "chosen", "data.rejected_key": "rejected"}


def special(key: str, value: Any) -> tuple[str, str] | None:
    if key in OWNED:
        return "owned", OWNED[key]
    if key in COLUMNS and value != COLUMNS[key]:
        return "action", (
            f"the rows' {COLUMNS[key]} column is named {value!r}: rlbridge reads the stage's canonical "
            f"columns (docs/stages.md); rename it to {COLUMNS[key]!r} in the data"
        )
    if key == "data.dataset" and isinstance(value, str):
        from rlbridge.contract.models import looks_local

        if not looks_local(value):
            return (
                "action",
                "a hub dataset: rlbridge reads local data (jsonl, parquet, save_to_disk); download it and set "
                "data.train",
            )
    return None


def stage_of(words: list[str]) -> str | None:
    """The stage of a launch command's words (the module after --module / -m), None for train_ppo_ray."""
    for w in words:
        name = w.replace("/", ".").removesuffix(".py")
        for module, stage in STAGES.items():
            if name == module or name.endswith("." + module):
                return stage
    return None


def flags_view(native: dict[str, Any], read_flags) -> dict[str, Any]:
    """A plan's flags (train_ppo_ray's or a stage trainer's) as a recipe writes them, <model_dir> filled in:
    the part of OpenRLHFRecipeImporter.view() both kinds of plan share (each then points the data flags
    at the config's own files)."""
    from packaging.version import Version

    model = native["model"]["path"]
    return {
        key: value.replace("<model_dir>", model) if isinstance(value, str) else value
        for key, value, *_ in read_flags([Token(a, 0) for a in native["args"]], Version(native["openrlhf_version"]))
    }


def view(native: dict[str, Any], config: RunConfig, read_flags) -> dict[str, Any]:
    """A stage plan's flags as a recipe writes them (the data rlbridge writes is the config's own)."""
    out = flags_view(native, read_flags)
    # the prompt column is the config's (rlbridge renames it to its own when it writes the rows)
    out["data.input_key" if native["stage"] == "sft" else "data.prompt_key"] = config.data.prompt_key
    train, val = config.data.train, config.data.eval
    if train.path:
        out["data.dataset"] = train.path
    if val is not None and val.path:
        out["eval.dataset"] = val.path
    return out
