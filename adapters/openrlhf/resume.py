"""Resuming an OpenRLHF run from its newest complete checkpoint (never a half-written one).

OpenRLHF saves DeepSpeed checkpoints as <ckpt.path>/_actor/global_step<N> (and _critic/ with a
critic), each role with a `latest` pointer that DeepSpeed loads from. Importable without OpenRLHF.
"""

from __future__ import annotations

from pathlib import Path

from rlbridge.engine.checkpoints import read_step, step_dirs, tensors_complete, write_pointer
from rlbridge.errors import ConfigError


def checkpoint_complete(path: Path, committed: int | None) -> bool:
    """DeepSpeed writes a tag's model states (which hold OpenRLHF's step, episode and data-loader
    state) and its optimizer shards (`*optim_states.pt`, where the optimizer is sharded), then the
    `latest` pointer (`committed`): a global_stepN is complete when its tensor files are whole and
    `latest` has reached it; when `latest` is torn, when it also has its optimizer shards (if this
    run's checkpoints have any)."""
    step = int(path.name[len("global_step") :])
    if committed is not None and step > committed:
        return False
    sharded = committed is None and any(path.parent.glob("global_step*/*optim_states.pt"))
    return tensors_complete(path, ["*model_states.pt", "*optim_states.pt"] if sharded else ["*model_states.pt"])


def resume_point(ckpt: Path) -> int:
    """The newest step complete for every role OpenRLHF checkpoints (<ckpt>/_actor, and _critic with
    a critic). DeepSpeed loads the tag its `latest` file names, written with a plain write (a kill can
    leave it empty) and never checked against the files: it is rewritten, atomically, to name the
    chosen step."""
    roles = [d for d in (ckpt / "_actor", ckpt / "_critic") if d.is_dir()]
    complete: set[int] | None = None
    for role in roles:
        committed = read_step(role / "latest")
        steps = {s for s, p in step_dirs(role, "global_step").items() if checkpoint_complete(p, committed)}
        complete = steps if complete is None else complete & steps
    if not complete:
        raise ConfigError(
            f"checkpoint.resume: no complete global_step* checkpoint in {ckpt / '_actor'} to resume from; "
            "run without --resume (or checkpoint.resume: false) to start over"
        )
    step = max(complete)
    for role in roles:
        latest = role / "latest"
        if not latest.is_file() or latest.read_text(errors="replace").strip() != f"global_step{step}":
            write_pointer(latest, f"global_step{step}")
    return step
