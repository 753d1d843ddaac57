"""Generate the per-engine tables of the docs from what the adapters declare, one column per in-tree backend.

    python scripts/doc_tables.py          # rewrite every generated table
    python scripts/doc_tables.py --check  # exit 1 if one is not current (a test runs this)

Each table sits between `<!-- <name>:begin (scripts/doc_tables.py) -->` and `<!-- <name>:end -->`:

- docs/roles.md `everyday-knobs` and docs/batch-semantics.md `batch-knobs`: a row per canonical knob, a cell per
  backend from its capability table (`Backend.capability_table()`: support, native keys, note), as docs/knobs.md;
- docs/metrics.md `metrics-training`, `metrics-stages`, `metrics-eval`: a row per canonical metric (meaning:
  `rlbridge.contract.metrics`), a cell per backend from its adapter's `metrics.py`: the native names of its maps
  (as scripts/metric_table.py reads them) followed by its `DOC_NOTES[canonical]` in parentheses (what the maps
  cannot say: where rlbridge computes the value, when the engine has it), the note alone where no map names
  one, "—" when it has neither.

--check also checks the metric table of docs/telemetry.md (scripts/metric_table.py). Imports no engine.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from rlbridge.contract.backend import Support
from rlbridge.contract.metrics import CANONICAL, EVAL, STAGE

DOCS = Path(__file__).resolve().parents[1] / "docs"
SCRIPT = "scripts/doc_tables.py"


def _metric_table():
    spec = importlib.util.spec_from_file_location("metric_table", Path(__file__).with_name("metric_table.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


metric_table = _metric_table()

# The knobs each table shows, with a short meaning (the full one: rlbridge/contract/config.py, `rlbridge schema`)
EVERYDAY_KNOBS = {
    "training.gradient_checkpointing": "recompute activations in the backward pass (default false)",
    "algorithm.entropy_coef": "weight of the entropy bonus",
    "algorithm.kl_estimator": "k1/k2/k3; unset: k3 in the loss, k1 in the reward",
    "algorithm.gamma": "discount (ppo; also reinforce_pp)",
    "algorithm.gae_lambda": "GAE lambda (ppo)",
    "algorithm.dynamic_sampling": "DAPO: drop groups with identical rewards",
    "algorithm.rollout_correction": "none, token/sequence x truncate/mask",
    "algorithm.rollout_correction_threshold": "the importance weights' bound",
    "rollout.drop_overlong_prompts": "needs max_prompt_tokens",
    "model.chat_template_kwargs": "e.g. `{enable_thinking: false}`",
    "training.max_tokens_per_device": "token-budget micro batches",
    "training.sequence_packing": "no padding inside a micro batch",
    "training.sequence_parallel_size": "sequence-dimension parallelism",
    "training.forward_micro_batch_size": "log-prob passes' micro batch (unset: the training micro batch)",
    "algorithm.name": "the algorithm (grpo, dr_grpo, rloo, reinforce_pp, reinforce_pp_baseline, ppo, ...)",
}
BATCH_KNOBS = {
    "training.batch_size": "prompts per training step",
    "algorithm.group_size": "samples per prompt",
    "training.mini_batch_size": "samples per optimizer update (default: the whole rollout batch)",
    "training.micro_batch_size": "samples per forward/backward on one device",
    "algorithm.epochs_per_rollout": "passes over one rollout batch",
    "training.steps": "training steps (rollout + updates)",
}


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def in_tree_backends() -> dict[str, object]:
    """backend name -> its backend instance, for every in-tree backend (the `rlbridge` entry points)."""
    from rlbridge.contract.registry import get_plugin_manager

    backends = get_plugin_manager().items["backend"]
    return {name: backends[name].item() for name, _ in metric_table.engines()}


def capability_cell(cap) -> str:
    """`native`, ... (note), as "approximated: ..." when approximated; "refused: note" when rejected."""
    if cap.support is Support.REJECTED:
        return _escape("refused: " + cap.note) if cap.note else "refused"
    keys = ", ".join(f"`{k}`" for k in cap.native)
    text = f"{keys} ({cap.note})" if keys and cap.note else keys or cap.note or "—"
    return _escape(("approximated: " + text) if cap.support is Support.APPROXIMATED else text)


def knob_table(knobs: dict[str, str]) -> str:
    backends = in_tree_backends()
    tables = {name: backend.capability_table() for name, backend in backends.items()}
    lines = ["| knob | meaning | " + " | ".join(backends) + " |", "|---|---|" + "---|" * len(backends)]
    for knob, meaning in knobs.items():
        cells = [capability_cell(tables[name][knob]) for name in backends]
        lines.append(f"| `{knob}` | {_escape(meaning)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def metric_cell(found: dict[str, list[str]], notes: dict[str, str], canonical: str) -> str:
    """`native`, ... (note); the note alone where no map names it; "—" without either."""
    native, note = ", ".join(f"`{n}`" for n in found.get(canonical, [])), notes.get(canonical, "")
    return _escape(f"{native} ({note})" if native and note else native or note or "—")


def metric_rows(names: dict[str, str]) -> str:
    engines = [(name, metric_table.natives(m), getattr(m, "DOC_NOTES", {})) for name, m in metric_table.engines()]
    lines = ["| canonical | meaning | " + " | ".join(n for n, _, _ in engines) + " |"]
    lines.append("|---|---|" + "---|" * len(engines))
    for canonical, meaning in names.items():
        cells = [metric_cell(found, notes, canonical) for _, found, notes in engines]
        lines.append(f"| `{canonical}` | {_escape(meaning)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _eval_only() -> dict[str, str]:
    return {k: v for k, v in EVAL.items() if k.removeprefix("eval/") not in STAGE}


TABLES = {  # (doc, marker name) -> the table's text
    ("roles.md", "everyday-knobs"): lambda: knob_table(EVERYDAY_KNOBS),
    ("batch-semantics.md", "batch-knobs"): lambda: knob_table(BATCH_KNOBS),
    ("metrics.md", "metrics-training"): lambda: metric_rows({k: v for k, v in CANONICAL.items() if k not in STAGE}),
    ("metrics.md", "metrics-stages"): lambda: metric_rows(STAGE),
    ("metrics.md", "metrics-eval"): lambda: metric_rows(_eval_only()),
}


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin ({SCRIPT}) -->", f"<!-- {name}:end -->"


def render(doc: str, name: str, table: str) -> str:
    begin, end = markers(name)
    start, stop = doc.index(begin) + len(begin), doc.index(end)
    return doc[:start] + "\n" + table + "\n" + doc[stop:]


def rendered() -> dict[Path, tuple[str, str]]:
    """doc path -> (its text now, its text with every generated table current)."""
    out: dict[Path, tuple[str, str]] = {}
    for (doc, name), make in TABLES.items():
        path = DOCS / doc
        old, new = out.get(path, (path.read_text(), path.read_text()))
        out[path] = (old, render(new, name, make()))
    telemetry = metric_table.DOC.read_text()
    out[metric_table.DOC] = (telemetry, metric_table.render(telemetry))
    return out


def main(argv: list[str]) -> int:
    docs = rendered()
    if "--check" in argv:
        stale = [str(path) for path, (old, new) in docs.items() if old != new]
        if stale:
            print(f"not current: {', '.join(stale)}: run python {SCRIPT}", file=sys.stderr)
            return 1
        return 0
    for path, (old, new) in docs.items():
        if old != new:
            path.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
