"""The built-in resharding optimisation (plugins/sync_changed.py): only tensors whose value changed
since the last sync are sent; the first sync sends everything. The engine runs measuring it are
benchmarks/weight_sync.py (docs/scale.md)."""

import torch

from rlbridge.contract.registry import get_plugin_manager
from rlbridge_plugins import sync_changed


def test_only_changed_tensors_are_sent_after_the_first_sync():
    last = {}
    weights = {"embed": torch.ones(4, 3), "q_proj": torch.zeros(3, 3), "norm": torch.full((3,), 2.0)}
    first = list(sync_changed.changed_only(weights.items(), last))
    assert [n for n, _ in first] == ["embed", "q_proj", "norm"]
    weights["q_proj"] = weights["q_proj"] + 1e-6  # a LoRA merge moves only its target modules
    second = list(sync_changed.changed_only(weights.items(), last))
    assert [n for n, _ in second] == ["q_proj"] and second[0][1] is weights["q_proj"]
    weights["norm"] = weights["norm"].to(torch.float64)  # a re-typed tensor is a changed one
    assert [n for n, _ in sync_changed.changed_only(weights.items(), last)] == ["norm"]
    assert list(sync_changed.changed_only(weights.items(), last)) == []


def test_the_hook_acts_where_engines_have_a_seam_and_only_when_listed_in_plugins():
    pm = get_plugin_manager()
    assert pm.hook.rlbridge_weight_sync(engine="trl", weights=iter([])) is None  # opt-in: not registered by default
    assert sync_changed.rlbridge_weight_sync(engine="openrlhf", weights=iter([])) is None
    assert sync_changed.rlbridge_weight_sync(engine="verl", weights=iter([])) is not None


def test_a_new_run_in_the_same_process_starts_from_a_full_sync(monkeypatch):
    from rlbridge.engine.patch_report import PATCH_DIR_ENV

    weights = [("w", torch.ones(2))]
    monkeypatch.setenv(PATCH_DIR_ENV, "/runs/a/patches")
    assert len(list(sync_changed.rlbridge_weight_sync(engine="trl", weights=iter(weights)))) == 1
    assert list(sync_changed.rlbridge_weight_sync(engine="trl", weights=iter(weights))) == []
    monkeypatch.setenv(PATCH_DIR_ENV, "/runs/b/patches")  # a fresh rollout engine: everything again
    assert len(list(sync_changed.rlbridge_weight_sync(engine="trl", weights=iter(weights)))) == 1
