"""A verl checkpoint engine for CPU machines: the trainer hands the rollout its weights through a file.

verl's asynchronous trainers (one_step_off_policy, fully_async_policy) keep the rollout on devices of
its own and move the weights with a checkpoint engine (verl/checkpoint_engine/base.py). The ones verl
0.9.1 ships need CUDA or their own libraries: nccl, nixl and delta import cupy, hccl torch.npu, kimi and
mooncake their transfer engines; 'naive' is the colocated in-process copy (its prepare / build_topology
raise NotImplementedError). On a CPU every process of a run is on one machine, so the actor's rank 0
writes the full tensors to one file per policy version under the run directory and the rollout's
checkpoint-engine workers read it. verl imports this module in every process that builds a checkpoint
engine (`checkpoint_engine.custom_backend_module`), which registers it as BACKEND; the plan chooses it
on CPU only (adapters/verl/asynchrony.py). What the rollout receives still passes through the weight-sync
seam (boot.py wraps ServerAdapter.update_weights).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch

from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry
from verl.workers.rollout.utils import ensure_async_iterator

from rlbridge_adapters.verl.asynchrony import CHECKPOINT_ENGINE as BACKEND

RECEIVE_TIMEOUT_S = 900.0  # the trainer writes the file while the rollout waits for it; a dead trainer fails the run


@CheckpointEngineRegistry.register(BACKEND)
class FileCheckpointEngine(CheckpointEngine):
    """One file per weight version: `<directory>/weights-<global_steps>.pt`, written whole by the actor's
    rank 0 (a temporary name, then an atomic rename) and read by every rollout worker."""

    def __init__(self, bucket_size: int, is_master: bool = False, directory: str | None = None) -> None:
        if not directory:
            raise ValueError(
                f"checkpoint engine {BACKEND}: engine_kwargs.{BACKEND}.directory is not set (rlbridge's plan sets it)"
            )
        self.bucket_size = bucket_size
        self.is_master = is_master
        self.directory = Path(directory)

    def _path(self, global_steps: int | None) -> Path:
        return self.directory / f"weights-{'latest' if global_steps is None else int(global_steps)}.pt"

    def prepare(self) -> dict[str, Any]:
        return {}

    @classmethod
    def build_topology(cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list[dict]):
        return {"rank": list(range(actor_wg_world_size))}, {"rank": list(range(rollout_world_size))}

    def init_process_group(self, rank: int = 0, **kwargs) -> None:
        self.rank = rank

    def finalize(self) -> None:
        pass

    async def send_weights(self, weights, global_steps: int | None = None) -> None:
        tensors = {}
        # every rank iterates: FSDP gathers each full tensor collectively
        async for name, tensor in ensure_async_iterator(weights):
            if self.is_master:
                tensors[name] = tensor.detach().to("cpu", copy=True).contiguous()
        if not self.is_master:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        for old in self.directory.glob("weights-*.pt"):  # every reader of an older version has finished with it
            old.unlink(missing_ok=True)
        path = self._path(global_steps)
        partial = path.with_name(path.name + f".{os.getpid()}.tmp")
        torch.save(tensors, partial)
        os.replace(partial, path)

    def receive_weights(self, global_steps: int | None = None):
        """A plain generator, as verl's colocated engine gives: rlbridge's weight-sync seam and plugins take
        (name, tensor) pairs synchronously. Waiting blocks this checkpoint-engine worker only, which has
        nothing else to do until the weights arrive (the vLLM server is another process)."""
        path = self._path(global_steps)
        deadline = time.monotonic() + RECEIVE_TIMEOUT_S
        while not path.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"checkpoint engine {BACKEND}: the trainer wrote no {path} in {RECEIVE_TIMEOUT_S:.0f} s"
                )
            time.sleep(0.02)
        yield from torch.load(path, weights_only=True).items()
