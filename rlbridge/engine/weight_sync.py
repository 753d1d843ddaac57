"""The weight-sync seam inside engine processes: what adapters call where an engine hands updated
weights to its rollout engine, so that a plugin may replace what is sent (`rlbridge_weight_sync`)
and rlbridge counts what actually went (bytes and tensors, as a `weight_sync` event of the step)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from rlbridge.engine.events import synced_weights, write_event


def weights_to_send(engine: str, weights: Iterable[tuple[str, Any]]) -> Iterable[tuple[str, Any]]:
    """The engine's weights, or what a `rlbridge_weight_sync` plugin returns instead."""
    from rlbridge.contract.registry import get_plugin_manager

    replaced = get_plugin_manager().hook.rlbridge_weight_sync(engine=engine, weights=weights)
    return weights if replaced is None else replaced


class Counted:
    """Wraps the (name, tensor) pairs of one sync; `report()` sends their total as one event."""

    def __init__(self, pairs: Iterable[tuple[str, Any]]) -> None:
        self.pairs = pairs
        self.bytes = 0
        self.tensors = 0

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        for name, tensor in self.pairs:
            self.bytes += tensor.numel() * tensor.element_size()
            self.tensors += 1
            yield name, tensor

    def report(self) -> None:
        write_event(synced_weights(self.bytes, self.tensors))
