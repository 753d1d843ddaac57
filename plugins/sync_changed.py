"""Built-in resharding optimisation (issue 16): send the rollout engine only the tensors that changed
since the last weight sync.

Opt-in, because it only wins when part of the model does not train (LoRA, whose merged weights leave
every non-target tensor as it was; frozen layers) and it costs a host-memory copy of the model:

    plugins: [rlbridge_plugins.sync_changed]

It implements `rlbridge_weight_sync`, so it acts at each engine's seam (TRL's vLLM colocate
`sync_weights`, verl's `ServerAdapter.update_weights`), and what is actually sent is what
`weight_sync/bytes` and `weight_sync/tensors` count. The first sync sends everything. Measured against
each engine's default in docs/scale.md.

Needs a rollout engine that keeps its weights between syncs: not TRL's server mode (TRL streams a
fixed list of tensors to the server), not a vLLM that discards weights while sleeping (sleep level 2).
OpenRLHF sends from inside its actor's broadcast loop: no seam, not called there. It acts on the
backends that declare `Backend.partial_weight_sync`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from rlbridge import hookimpl

_last: dict[str, Any] = {}  # name -> a host copy of the tensor as last sent, per engine process and run
_run: list[str | None] = [None]  # the run those copies were sent in


def _this_run() -> str | None:
    """The run this process works for (every engine process of a run gets its patch directory): a new
    run in the same process has a fresh rollout engine, whose weights are the checkpoint's again."""
    import os

    from rlbridge.engine.patch_report import PATCH_DIR_ENV

    return os.environ.get(PATCH_DIR_ENV)


def changed_only(weights: Iterable[tuple[str, Any]], last: dict[str, Any] | None = None) -> Iterator[tuple[str, Any]]:
    """The (name, tensor) pairs of `weights` whose value differs from what was sent last time."""
    import torch

    seen = _last if last is None else last
    for name, tensor in weights:
        value = tensor.detach()
        previous = seen.get(name)
        if previous is not None and previous.shape == value.shape and previous.dtype == value.dtype:
            if torch.equal(previous, value if value.device == previous.device else value.to(previous.device)):
                continue
        seen[name] = value.to("cpu", copy=True)
        yield name, tensor


def _partial_sync_allowed(engine: str) -> bool:
    """Whether backend `engine` declares that its rollout engine keeps the weights a sync does not send."""
    from rlbridge.contract.registry import get_plugin_manager

    backend = get_plugin_manager().items["backend"].get(engine)
    return backend is not None and backend.item.partial_weight_sync


@hookimpl
def rlbridge_weight_sync(engine: str, weights: Iterable[tuple[str, Any]]) -> Iterable[tuple[str, Any]] | None:
    if not _partial_sync_allowed(engine):
        return None
    if _run[0] != _this_run():
        _last.clear()
        _run[0] = _this_run()
    return changed_only(weights)
