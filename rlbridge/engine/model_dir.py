"""The model directory an engine loads: the run's (builtin models built on first use), with the chat
template the run asks for, so that every engine process tokenizes the same way."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

PASSTHROUGH_CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"


def run_and_model_dirs(ctx, chat_template: str | None) -> tuple[Path, str]:
    """What every engine launcher starts with: the run directory (absolute) and the model directory
    the engine loads (the builtin model built on first use, carrying the run's chat template)."""
    from rlbridge.contract.models import materialize_model, materialize_path

    run_dir = Path(ctx.run_dir).resolve()
    if ctx.config.critic.path:  # the plan names its resolved path; a builtin one is built here on first use
        materialize_path(ctx.config.critic.path, "critic.path", ctx.plugins)
    for i, spec in enumerate(ctx.config.reward):  # reward models, likewise
        if spec.model:
            materialize_path(spec.model, f"reward[{i}].model", ctx.plugins)
    return run_dir, model_dir_with_template(materialize_model(ctx.config, ctx.plugins), chat_template, run_dir)


def model_dir_with_template(base: str, template: str | None, run_dir: Path) -> str:
    """The model directory the engine loads: the base one, or a copy of its small files (weights
    linked) with the chat template this run needs, so that every engine process tokenizes the same way."""
    if template is None:
        return base
    target = Path(run_dir) / "model"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for item in Path(base).iterdir():
        if item.name in ("tokenizer_config.json", "chat_template.jinja"):
            continue
        (target / item.name).symlink_to(item.resolve())
    config_path = Path(base) / "tokenizer_config.json"
    data = json.loads(config_path.read_text()) if config_path.exists() else {}
    data["chat_template"] = template
    (target / "tokenizer_config.json").write_text(json.dumps(data, indent=2))
    (target / "chat_template.jinja").write_text(template)
    return str(target)
