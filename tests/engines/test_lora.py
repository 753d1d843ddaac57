"""LoRA rank 8 GRPO end to end in the engine's environment (verl 0.9.1, OpenRLHF 0.11.2): the adapter
trains, the checkpoint holds it, and a resumed run goes on from the last checkpoint. TRL's run is
tests/test_knobs_plan.py::test_trl_lora_grpo_run_saves_the_adapter_and_resumes. It runs in those
engines' environments (make compat) and skips elsewhere."""

import json
from pathlib import Path

import pytest
import yaml

from rlbridge.run.loading import load_config
from rlbridge.run.runner import train

from . import proven_backend_here


# The untrained policy scores ~0.01 on digit_match, so both samples of a group often score 0: a zero
# advantage everywhere leaves lora_B at its zero init (by estimate in about half the runs; seen once).
# A reward that differs between nearly any two samples makes the advantage, and the update, non-zero.
VARIETY = """\
def token_variety(prompts, completions, completion_ids, **kwargs):
    return [len(set(ids)) / max(len(ids), 1) for ids in completion_ids]
"""

CONFIG = """\
model: {path: builtin:tiny-digits, lora: {rank: 8, alpha: 16, target_modules: [q_proj, v_proj]}}
reward: [{name: digit_match}, {native: trl, function: "variety.py:token_variety"}]
algorithm: {name: grpo, group_size: 2}
training: {steps: 2, batch_size: 2, lr: 2.0e-2}
rollout: {max_new_tokens: 8}
checkpoint: {interval: 1}
resources: {gpus_per_node: 0}
telemetry: {progress: false}
"""

# the engine CI proves end to end whose capability table runs CONFIG, in its environment (its measured LoRA
# runs: docs/roles.md)
BACKEND, NOT_HERE = proven_backend_here(yaml.safe_load(CONFIG))
pytestmark = pytest.mark.skipif(BACKEND is None, reason=NOT_HERE)


def _lora_tensors(checkpoint: Path) -> dict:
    """name -> tensor of every LoRA weight the engine saved under one checkpoint directory."""
    import torch

    out = {}
    for path in checkpoint.rglob("*"):
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path))
        elif path.suffix in (".pt", ".bin") and "optim" not in path.name and "extra" not in path.name:
            state = torch.load(path, map_location="cpu", weights_only=False)
            state = state.get("module", state) if isinstance(state, dict) else {}
        else:
            continue
        for name, value in (state or {}).items():
            if "lora_" in name and hasattr(value, "abs"):
                value = value.to_local() if hasattr(value, "to_local") else value
                out[f"{path.relative_to(checkpoint)}:{name}"] = value.float()
    return out


@pytest.mark.engine
@pytest.mark.matrix_only  # make compat only: CI's engine cells keep one run per engine seam
def test_lora_grpo_saves_the_adapter_and_resumes(tmp_path):
    from rlbridge import hookimpl
    from rlbridge.contract.registry import PluginManager

    saved = []

    class Saves:
        @hookimpl
        def rlbridge_checkpoint_saved(self, step, path):
            saved.append((step, Path(path)))

    plugins = PluginManager()
    plugins.register(Saves(), "saves")
    path = tmp_path / "lora.yaml"
    path.write_text(CONFIG)
    (tmp_path / "variety.py").write_text(VARIETY)
    base = [f"backend={BACKEND}", "engine_env=current", f"output_dir={tmp_path}/run"]
    summary = train(load_config(path, base), plugins, progress=False)
    assert summary["status"] == "completed"
    assert [s for s, _ in saved] == [1, 2]
    lora = _lora_tensors(saved[-1][1])
    assert lora, f"no LoRA weight in the checkpoint {saved[-1][1]}: {sorted(p.name for p in saved[-1][1].rglob('*'))}"
    lora_b = [v for k, v in lora.items() if "lora_B" in k]
    assert lora_b and any(float(v.abs().max()) > 0 for v in lora_b)  # B starts at zero: the adapter trained
    ranks = {min(v.shape) for k, v in lora.items() if "lora_A" in k and v.dim() == 2}
    assert ranks == {8}, ranks
    resumed = train(load_config(path, [*base, "training.steps=3", "checkpoint.resume=true"]), plugins, progress=False)
    assert resumed["status"] == "completed"
    assert [s for s, _ in saved] == [1, 2, 3]  # the resumed run saved step 3 only
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
