"""Pipelines: one file that chains stages (e.g. SFT -> reward model -> GRPO), docs/stages.md.

Each stage is a normal run: its own config file (any backend, any algorithm), its own run directory
OUTPUT_DIR/<stage name>. A stage's `set` overrides its config; a string value may name an earlier
stage's trained model as `{STAGE.model}` (RUN_DIR/model, written by the offline stages), so the
output model of one stage is the input of the next. Running the pipeline again skips every stage
that finished with the same resolved config, resumes a stage that failed or was killed from its last
complete checkpoint (checkpoint.resume: auto), and starts the others afresh. pipeline.json in
OUTPUT_DIR records the stages, their run directories and status; `rlbridge report OUTPUT_DIR` shows them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, field_validator

from rlbridge.contract.config import RunConfig
from rlbridge.contract.strict_model import StrictModel
from rlbridge.errors import ConfigError

PIPELINE_FILE = "pipeline.json"
_REFERENCE = re.compile(r"\{([A-Za-z0-9_-]+)\.model\}")


class StageSpec(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]+$")
    """The stage's name: its run directory (OUTPUT_DIR/<name>) and how later stages refer to its model."""
    config: str
    """The stage's run config (a YAML file like configs/sft.yaml), relative to the pipeline file."""
    set: dict[str, Any] = Field(default_factory=dict)
    """Overrides of the stage's config, as dotted keys (what `--set` takes: training.steps: 10). A string
    may hold `{STAGE.model}`: the trained model directory of an earlier stage."""


class PipelineConfig(StrictModel):
    name: str | None = None
    """The pipeline's name; default: the pipeline file's stem."""
    output_dir: str = "runs/{name}"
    """Where the stages' run directories and pipeline.json go; '{name}' is replaced."""
    stages: list[StageSpec]
    """The stages, run in order."""

    @field_validator("stages")
    @classmethod
    def _unique_and_ordered(cls, stages: list[StageSpec]) -> list[StageSpec]:
        if not stages:
            raise ValueError("a pipeline needs at least one stage")
        seen: list[str] = []
        for stage in stages:
            if stage.name in seen:
                raise ValueError(f"two stages are named '{stage.name}': stage names are their run directories")
            for ref in _references(stage.set):
                if ref not in seen:
                    raise ValueError(
                        f"stage '{stage.name}' uses {{{ref}.model}}, but no earlier stage is named '{ref}'"
                    )
            seen.append(stage.name)
        return stages


def _references(value: Any) -> list[str]:
    if isinstance(value, str):
        return _REFERENCE.findall(value)
    if isinstance(value, dict):
        return [r for v in value.values() for r in _references(v)]
    if isinstance(value, list):
        return [r for v in value for r in _references(v)]
    return []


def _substitute(value: Any, models: dict[str, str]) -> Any:
    if isinstance(value, str):
        return _REFERENCE.sub(lambda m: models[m.group(1)], value)
    if isinstance(value, dict):
        return {k: _substitute(v, models) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, models) for v in value]
    return value


def is_pipeline(path: str | Path) -> bool:
    """A pipeline file has a top-level `stages` list (a run config has no such key)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and "stages" in data


def load_pipeline(path: str | Path) -> PipelineConfig:
    from rlbridge.run.loading import format_validation_error, parse_yaml

    path = Path(path)
    try:
        pipeline = PipelineConfig.model_validate(parse_yaml(path.read_text(), str(path)))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc).replace("invalid config", f"invalid pipeline {path}")) from exc
    if pipeline.name is None:
        pipeline.name = path.stem
    for stage in pipeline.stages:
        if not (path.parent / stage.config).is_file():
            raise ConfigError(f"stages[{stage.name}].config: {path.parent / stage.config} does not exist")
    return pipeline


def stage_config(
    pipeline: PipelineConfig, stage: StageSpec, base: Path, models: dict[str, str], overrides: list[str] = ()
) -> RunConfig:
    """The stage's RunConfig: its file, its `set` (earlier models substituted), the command line's
    `--set STAGE.key=value`, in its run directory."""
    from rlbridge.run.loading import load_config

    for key in [*stage.set, *(o.partition("=")[0] for o in overrides)]:
        if key.strip() in ("output_dir", "run_name"):
            raise ConfigError(
                f"stages[{stage.name}]: {key.strip()} is the pipeline's (OUTPUT_DIR/{stage.name}); set the "
                "pipeline's output_dir instead"
            )
    sets = [f"{key}={json.dumps(value)}" for key, value in _substitute(stage.set, models).items()]
    config = load_config(base / stage.config, [*sets, *overrides])
    config.run_name = stage.name
    config.output_dir = str(Path(pipeline.output_dir.replace("{name}", pipeline.name or "pipeline")) / stage.name)
    return config


def _comparable(config: dict[str, Any]) -> dict[str, Any]:
    config = json.loads(json.dumps(config))
    config.get("checkpoint", {}).pop("resume", None)
    return config


def run_pipeline(
    path: str | Path, overrides: list[str] = (), progress: bool | None = None, plugins=None
) -> dict[str, Any]:
    """Run (or continue) every stage of a pipeline file; returns pipeline.json's content."""
    from rlbridge.run.runner import resolve, train

    path = Path(path)
    pipeline = load_pipeline(path)
    names = [s.name for s in pipeline.stages]
    per_stage: dict[str, list[str]] = {name: [] for name in names}
    for item in overrides:
        head, _, rest = item.partition(".")
        if head not in per_stage or not rest:
            raise ConfigError(
                f"--set {item}: a pipeline's overrides name their stage first (STAGE.key=value; stages: "
                f"{', '.join(names)})"
            )
        per_stage[head].append(rest)
    out = Path(pipeline.output_dir.replace("{name}", pipeline.name or "pipeline"))
    record: dict[str, Any] = {"name": pipeline.name, "file": str(path), "status": "running", "stages": []}
    models: dict[str, str] = {}

    def write() -> None:
        out.mkdir(parents=True, exist_ok=True)
        (out / PIPELINE_FILE).write_text(json.dumps(record, indent=2) + "\n")

    for stage in pipeline.stages:
        config = stage_config(pipeline, stage, path.parent, models, per_stage[stage.name])
        run_dir = Path(config.output_dir)
        entry: dict[str, Any] = {
            "name": stage.name,
            "config": stage.config,
            "run_dir": str(run_dir),
            "algorithm": config.algorithm.name,
            "backend": config.backend,
            "model_in": config.model.path,
        }
        record["stages"].append(entry)
        previous = _previous(run_dir)
        same = previous is not None and _comparable(previous["config"]) == _comparable(
            resolve(config).model_dump(mode="json")
        )
        if same and previous["summary"].get("status") == "completed":
            entry.update(status="completed", skipped=True, summary=previous["summary"])
        else:
            # a stage that failed (or was killed) with this config resumes from its last complete checkpoint
            config.checkpoint.resume = "auto" if same else False
            entry["resumed"] = bool(same)
            write()
            try:
                summary = train(config, plugins, progress=progress)
            except BaseException as exc:
                entry.update(status="failed", error=f"{type(exc).__name__}: {exc}")
                record["status"] = "failed"
                write()
                raise
            entry.update(status="completed", skipped=False, summary=summary)
        summary = entry["summary"]
        if summary.get("model"):
            models[stage.name] = entry["model_out"] = str(Path(summary["model"]).resolve())
        for later in pipeline.stages[pipeline.stages.index(stage) + 1 :]:
            if stage.name in _references(later.set) and stage.name not in models:
                raise ConfigError(
                    f"stage '{later.name}' uses {{{stage.name}.model}}, but stage '{stage.name}' "
                    f"({config.algorithm.name}) wrote no model to {run_dir / 'model'}"
                )
        write()
    record["status"] = "completed"
    write()
    return record


def _previous(run_dir: Path) -> dict[str, Any] | None:
    try:
        return {
            "config": yaml.safe_load((run_dir / "config.yaml").read_text()),
            "summary": json.loads((run_dir / "summary.json").read_text()),
        }
    except (OSError, ValueError, yaml.YAMLError):
        return None
