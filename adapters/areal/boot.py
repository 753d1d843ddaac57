"""Installed in every AReaL process of a run (rlbridge/engine/boot/sitecustomize.py calls install): the
controller, its training and rollout workers (AReaL's RPC servers, started by its local scheduler with this
process's environment) and the inference server they launch. It applies the version-gated patches and
instruments, through post-import hooks (nothing of AReaL is imported before AReaL itself is):

* the controller's StatsLogger.commit: each step's statistics, copied into the events file;
* the controller's RecoverHandler.dump: AReaL's recover checkpoint (it keeps one, overwritten), moved to
  `<checkpoint.dir>/global_step_<N>` once written, the older ones pruned to checkpoint.keep_last;
* the controller's last step: AReaL resumes its rollout after every step, so its executor starts generating the
  next step's batch (queued while the step trained) also after the last one, and scores it for nothing; rlbridge
  leaves the rollout paused after the last step instead;
* the training rank 0's weight update: what it broadcast to the inference server (or wrote for it, from disk),
  counted as a `weight_sync` event of the step.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from pathlib import Path

from rlbridge.contract.metrics import numbers
from rlbridge.engine.events import engine_metrics, synced_weights, write_event
from rlbridge.engine.ray_engine import once
from rlbridge.engine.kit import install_boot, is_wrapped, mark_wrapped, wrap_once

NATIVE_ENV = "RLBRIDGE_AREAL_NATIVE"
PATCH_REPORT_ENV = "RLBRIDGE_AREAL_PATCH_REPORT"
STEP_PREFIX = "global_step_"
COMPLETE = "rlbridge_complete.json"  # written last into a step's directory: it holds every file AReaL wrote


@once
def install() -> None:
    from rlbridge_adapters.areal.patches import PATCHES

    hooks = [
        ("areal.utils.stats_logger", _instrument_stats),
        ("areal.utils.recover", _instrument_recover),
        ("areal.engine.fsdp_engine", _instrument_weight_update),
        ("areal.trainer.rl_trainer", _instrument_last_step),
    ]
    install_boot(PATCHES, NATIVE_ENV, PATCH_REPORT_ENV, hooks)


def _native() -> dict:
    path = os.environ.get(NATIVE_ENV)
    return json.loads(Path(path).read_text()) if path and os.path.exists(path) else {}


def _instrument_stats(module) -> None:
    logger = module.StatsLogger

    def make(original):
        @functools.wraps(original)
        def commit(self, epoch, step, global_step, data):
            rows = data if isinstance(data, list) else [data]
            for i, row in enumerate(rows):  # without AReaL's counter keys, as it logs them itself
                kept = {k: v for k, v in row.items() if not k.endswith("__count")}
                write_event(engine_metrics(global_step + 1 + i, numbers(kept)))
            return original(self, epoch, step, global_step, data)

        return commit

    wrap_once(logger, "commit", make)


def _instrument_recover(module) -> None:
    handler = module.RecoverHandler

    def make(original):
        @functools.wraps(original)
        def dump(self, engine, step_info, *args, **kwargs):
            before = self.last_step_info.global_step
            result = original(self, engine, step_info, *args, **kwargs)
            if self.last_step_info.global_step != before:  # AReaL saved at this step (its frequency said so)
                keep_step(Path(self.config.fileroot), step_info.global_step + 1, _native().get("keep_last"))
            return result

        return dump

    wrap_once(handler, "dump", make)


def _instrument_last_step(module) -> None:
    trainer = module.PPOTrainer

    def make(original):
        @functools.wraps(original)
        def export_and_commit_stats(self, epoch, epoch_step, global_step):
            result = original(self, epoch, epoch_step, global_step)
            config = self.config
            last = config.total_train_epochs * len(self.train_dataloader)
            if config.total_train_steps is not None:
                last = min(last, config.total_train_steps)
            # PPOTrainer.train resumes the rollout next: no step will train on what it makes
            if global_step + 1 >= last:
                self.rollout.resume = lambda *args, **kwargs: None
            return result

        return export_and_commit_stats

    wrap_once(trainer, "_export_and_commit_stats", make)


def areal_root(fileroot: Path) -> Path:
    """What AReaL's Saver and RecoverHandler write under a recover fileroot (checkpoints/<user>/...)."""
    return fileroot / "checkpoints"


def keep_step(fileroot: Path, step: int, keep_last: int | None) -> Path:
    """Move AReaL's just-written recover checkpoint (its model and optimizer state and recover_info, under
    `fileroot`) to `<fileroot's parent>/global_step_<step>`, mark it complete, prune to keep_last."""
    source = areal_root(fileroot)
    target = fileroot.parent / f"{STEP_PREFIX}{step}"
    if target.exists():  # a step saved again after a resume from an earlier one
        shutil.rmtree(target)
    target.mkdir(parents=True)
    os.replace(source, target / source.name)
    files = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    (target / COMPLETE).write_text(json.dumps({"step": step, "files": files}))
    if keep_last:
        steps = sorted(
            int(p.name[len(STEP_PREFIX) :])
            for p in fileroot.parent.glob(f"{STEP_PREFIX}*")
            if p.name[len(STEP_PREFIX) :].isdigit()
        )
        for old in steps[:-keep_last]:
            shutil.rmtree(fileroot.parent / f"{STEP_PREFIX}{old}", ignore_errors=True)
    return target


def checkpoint_complete(path: Path) -> bool:
    """A global_step_N whose marker lists files that are all there (rlbridge moved AReaL's finished save in
    whole, then wrote the marker)."""
    marker = path / COMPLETE
    try:
        files = json.loads(marker.read_text())["files"]
    except (OSError, ValueError, KeyError):
        return False
    return bool(files) and all((path / name).is_file() for name in files)


def restore_step(path: Path, fileroot: Path) -> None:
    """Put a global_step_N back where AReaL's RecoverHandler loads from (a copy: the step stays)."""
    target = areal_root(fileroot)
    if target.exists():
        shutil.rmtree(target)
    fileroot.mkdir(parents=True, exist_ok=True)
    shutil.copytree(path / target.name, target)


def _instrument_weight_update(module) -> None:
    engine = module.FSDPEngine
    original = engine._update_weights_from_disk
    if is_wrapped(original):
        return
    _instrument_broadcast(engine)
    save = engine._save_model_to_hf

    @functools.wraps(save)
    def save_model_to_hf(self, path, *args, **kwargs):
        result = save(self, path, *args, **kwargs)
        if getattr(self, "_rlbridge_sync_path", None) == path:
            _report_saved_weights(Path(path))
        return result

    @functools.wraps(original)
    def update_weights_from_disk(self, meta):
        import torch.distributed as dist

        self._rlbridge_sync_path = meta.path if dist.get_rank() == 0 else None
        try:
            return original(self, meta)
        finally:
            self._rlbridge_sync_path = None

    engine._update_weights_from_disk = mark_wrapped(update_weights_from_disk)
    engine._save_model_to_hf = save_model_to_hf


def _instrument_broadcast(engine) -> None:
    """AReaL's weight update by broadcast (weight_update_mode xccl): rank 0 sends each bucket of full tensors
    through _update_bucket_weights_from_distributed_async; their bytes and count, once the update is done."""
    update, bucket = engine._update_weights_from_distributed, engine._update_bucket_weights_from_distributed_async

    @functools.wraps(bucket)
    def send_bucket(self, meta, named_tensors, *args, **kwargs):
        counts = getattr(self, "_rlbridge_sent", None)
        if counts is not None:
            counts[0] += sum(t.numel() * t.element_size() for _, t in named_tensors)
            counts[1] += len(named_tensors)
        return bucket(self, meta, named_tensors, *args, **kwargs)

    @functools.wraps(update)
    def update_weights_from_distributed(self, meta):
        import torch.distributed as dist

        self._rlbridge_sent = [0, 0] if dist.get_rank() == 0 else None
        try:
            result = update(self, meta)
        finally:
            sent, self._rlbridge_sent = self._rlbridge_sent, None
        if sent is not None:
            write_event(synced_weights(sent[0], sent[1]))
        return result

    engine._update_bucket_weights_from_distributed_async = send_bucket
    engine._update_weights_from_distributed = update_weights_from_distributed


def _report_saved_weights(directory: Path) -> None:
    """The bytes and tensors of the safetensors AReaL wrote for the inference server to load."""
    from safetensors import safe_open

    size, tensors = 0, 0
    for file in directory.glob("*.safetensors"):
        size += file.stat().st_size
        with safe_open(str(file), "pt") as fh:
            tensors += len(list(fh.keys()))
    write_event(synced_weights(size, tensors))
