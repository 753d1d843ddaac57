"""`rlbridge report RUN_DIR [RUN_DIR...]`: one self-contained HTML page comparing runs.

The page holds, for the given run directories: a plot per canonical metric with every run on it
(inline SVG, one shared step axis across all plots, every point carrying its value as a tooltip and
as data-* attributes), the differences between the runs' resolved configs, their summaries and the
last sampled rows. No JavaScript, no network: it opens from disk in any browser. Reads only files of
the run directories (config.yaml, summary.json, metrics.jsonl, samples.jsonl); imports no plotting library.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlbridge.contract.metrics import CANONICAL
from rlbridge.errors import RLBridgeError
from rlbridge.helpers import flatten

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
SUMMARY_KEYS = (
    "status",
    "backend",
    "engine_version",
    "steps",
    "reward_first",
    "reward_last",
    "reward_max",
    "reward_last10pct_mean",
    "first_step_reward_ge_0_9",
    "step_s_median",
    "train_s",
    "wall_s",
    "error",
)
W, H, PAD_L, PAD_R, PAD_T, PAD_B = 420, 240, 56, 12, 24, 34


@dataclass
class Run:
    label: str
    path: Path
    config: dict[str, Any]
    summary: dict[str, Any]
    history: list[dict[str, float]]
    samples: list[dict[str, Any]] = field(default_factory=list)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load_run(path: Path) -> Run:
    path = Path(path)
    if not (path / "metrics.jsonl").is_file():
        raise RLBridgeError(
            f"report: {path} has no metrics.jsonl; give run directories (the output_dir of `rlbridge train`)"
        )
    config = yaml.safe_load((path / "config.yaml").read_text()) if (path / "config.yaml").is_file() else {}
    summary = json.loads((path / "summary.json").read_text()) if (path / "summary.json").is_file() else {}
    label = f"{config.get('run_name') or path.name} [{config.get('backend', '?')}]"
    return Run(label, path, config or {}, summary, _jsonl(path / "metrics.jsonl"), _jsonl(path / "samples.jsonl"))


def metric_names(runs: list[Run]) -> list[str]:
    present = {k for run in runs for row in run.history for k in row if k != "step"}
    fixed = [name for name in CANONICAL if name in present]
    return fixed + sorted(present - set(fixed))


def config_differences(runs: list[Run]) -> list[tuple[str, list[Any]]]:
    flat = [flatten(run.config) for run in runs]
    keys = sorted({k for f in flat for k in f})
    missing = object()
    diffs = []
    for key in keys:
        values = [f.get(key, missing) for f in flat]
        if len({json.dumps(v, sort_keys=True, default=str) for v in values if v is not missing}) > 1 or (
            missing in values and len(values) > 1 and any(v is not missing for v in values)
        ):
            diffs.append((key, ["—" if v is missing else v for v in values]))
    return diffs


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)  # ticks enclose [lo, hi]
    return [round(i * step, 12) for i in range(first, max(last, first + 1) + 1)]


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def svg_plot(name: str, runs: list[Run], x_max: float) -> str:
    """One metric of every run against the shared step axis [0, x_max]."""
    series = [[(row["step"], row[name]) for row in run.history if name in row] for run in runs]
    values = [v for s in series for _, v in s]
    lo, hi = min(values), max(values)
    yticks = _nice_ticks(lo, hi)
    y0, y1 = yticks[0], yticks[-1] if yticks[-1] > yticks[0] else yticks[0] + 1
    xticks = _nice_ticks(0, x_max)
    x1 = xticks[-1] or 1

    def px(x: float) -> float:
        return PAD_L + (W - PAD_L - PAD_R) * x / x1

    def py(y: float) -> float:
        return H - PAD_B - (H - PAD_T - PAD_B) * (y - y0) / (y1 - y0)

    out = [
        f'<svg class="plot" data-metric="{html.escape(name)}" viewBox="0 0 {W} {H}" width="{W}" height="{H}" '
        f'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{html.escape(name)}">',
        f'<text x="{W / 2}" y="15" text-anchor="middle" class="title">{html.escape(name)}</text>',
    ]
    for t in yticks:
        out.append(
            f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{py(t):.1f}" y2="{py(t):.1f}" class="grid"/>'
            f'<text x="{PAD_L - 4}" y="{py(t) + 4:.1f}" text-anchor="end" class="tick">{_fmt(t)}</text>'
        )
    for t in xticks:
        out.append(
            f'<line x1="{px(t):.1f}" x2="{px(t):.1f}" y1="{PAD_T}" y2="{H - PAD_B}" class="grid"/>'
            f'<text x="{px(t):.1f}" y="{H - PAD_B + 14}" text-anchor="middle" class="tick">{_fmt(t)}</text>'
        )
    out.append(f'<text x="{(W + PAD_L) / 2}" y="{H - 4}" text-anchor="middle" class="axis">training step</text>')
    for i, (run, pts) in enumerate(zip(runs, series)):
        if not pts:
            continue
        color = COLORS[i % len(COLORS)]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2" data-run="{i}"/>')
        for x, y in pts:
            out.append(
                f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{color}" data-run="{i}" '
                f'data-step="{x:g}" data-value="{y!r}"><title>{html.escape(run.label)} step {x:g}: '
                f"{y:.6g}</title></circle>"
            )
    out.append("</svg>")
    return "".join(out)


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
.legend span{display:inline-block;margin-right:18px}.legend i{display:inline-block;width:14px;height:4px;margin-right:6px;vertical-align:middle}
.plots{display:flex;flex-wrap:wrap;gap:12px}.plot{border:1px solid #eee;background:#fff}
.plot .title{font-size:13px;font-weight:600}.plot .tick{font-size:10px;fill:#555}.plot .axis{font-size:10px;fill:#555}
.plot .grid{stroke:#eee;stroke-width:1}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f5f5f5}td.num{text-align:right;font-variant-numeric:tabular-nums}pre{margin:0;white-space:pre-wrap;max-width:520px}
"""


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f'<td class="num">{value:.6g}</td>'
    if isinstance(value, int) and not isinstance(value, bool):
        return f'<td class="num">{value}</td>'
    if isinstance(value, (dict, list)):
        value = json.dumps(value)
    return f"<td>{html.escape('' if value is None else str(value))}</td>"


def render(runs: list[Run]) -> str:
    names = metric_names(runs)
    x_max = max((row["step"] for run in runs for row in run.history), default=1)
    legend = "".join(
        f'<span><i style="background:{COLORS[i % len(COLORS)]}"></i>{html.escape(run.label)} '
        f"<small>({html.escape(str(run.path))})</small></span>"
        for i, run in enumerate(runs)
    )
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        "<title>rlbridge report: "
        f"{html.escape(', '.join(r.label for r in runs))}</title><style>{CSS}</style></head><body>",
        f"<h1>rlbridge report: {len(runs)} run{'s' if len(runs) != 1 else ''}</h1>",
        f'<div class="legend">{legend}</div>',
        "<h2>Canonical metrics</h2>",
        f'<div class="plots">{"".join(svg_plot(n, runs, x_max) for n in names)}</div>'
        if names
        else "<p>No metrics recorded.</p>",
        '<h2>Summaries</h2><table id="summaries"><tr><th>run</th>'
        + "".join(f"<th>{k}</th>" for k in SUMMARY_KEYS)
        + "</tr>",
    ]
    for run in runs:
        row = {**run.summary, "backend": run.summary.get("backend", run.config.get("backend"))}
        parts.append(
            f"<tr><th>{html.escape(run.label)}</th>" + "".join(_cell(row.get(k)) for k in SUMMARY_KEYS) + "</tr>"
        )
    parts.append("</table>")
    diffs = config_differences(runs)
    parts.append("<h2>Config differences</h2>")
    if len(runs) < 2:
        parts.append(
            "<p>One run: nothing to compare. Its resolved config:</p><pre>"
            + html.escape(yaml.safe_dump(runs[0].config, sort_keys=False))
            + "</pre>"
        )
    elif not diffs:
        parts.append("<p>The resolved configs are identical.</p>")
    else:
        parts.append(
            '<table id="config-diff"><tr><th>key</th>'
            + "".join(f"<th>{html.escape(r.label)}</th>" for r in runs)
            + "</tr>"
        )
        for key, values in diffs:
            parts.append(f"<tr><th>{html.escape(key)}</th>" + "".join(_cell(v) for v in values) + "</tr>")
        parts.append("</table>")
    parts.append("<h2>Last sampled completions</h2>")
    for run in runs:
        if not run.samples:
            continue
        last = run.samples[-1]["step"]
        rows = [s for s in run.samples if s["step"] == last]
        parts.append(
            f"<h3>{html.escape(run.label)}, step "
            f"{last}</h3><table><tr><th>prompt</th><th>completion</th><th>reward</th></tr>"
        )
        for s in rows:
            parts.append(
                f"<tr><td><pre>{html.escape(str(s.get('prompt')))}</pre></td><td><pre>{html.escape(str(s.get('completion')))}</pre></td>"
                + _cell(s.get("reward"))
                + "</tr>"
            )
        parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(run_dirs: list[Path], output: Path) -> Path:
    """A pipeline's directory (its pipeline.json, rlbridge.run.pipeline) stands for its stages' runs,
    with a table of the stages first."""
    runs, pipelines = [], []
    for p in map(Path, run_dirs):
        if (p / "pipeline.json").is_file():
            record = json.loads((p / "pipeline.json").read_text())
            pipelines.append(record)
            runs += [
                load_run(Path(stage["run_dir"]))
                for stage in record["stages"]
                if (Path(stage["run_dir"]) / "metrics.jsonl").is_file()
            ]
        else:
            runs.append(load_run(p))
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    page = render(runs)
    if pipelines:
        page = page.replace(
            "<h2>Canonical metrics</h2>", "".join(map(pipeline_table, pipelines)) + "<h2>Canonical metrics</h2>", 1
        )
    output.write_text(page, encoding="utf-8")
    return output


def pipeline_table(record: dict[str, Any]) -> str:
    """One row per stage: what it trained, on which engine, from which model to which, how it ended."""
    rows = [
        f"<h2>Pipeline {html.escape(str(record.get('name')))}: {html.escape(str(record.get('status')))}</h2>",
        '<table class="pipeline"><tr><th>stage</th><th>algorithm</th><th>backend</th><th>status</th>'
        "<th>model in</th><th>model out</th><th>learned</th><th>run directory</th></tr>",
    ]
    for stage in record["stages"]:
        summary = stage.get("summary") or {}
        if "loss" in summary:
            learned = f"{summary['loss']} {summary['loss_first']:.3g} -> {summary['loss_last']:.3g}"
        elif "reward_first" in summary:
            learned = f"reward/mean {summary['reward_first']:.3g} -> {summary['reward_last']:.3g}"
        else:
            learned = ""
        status = stage.get("status", "") + (" (finished before, not rerun)" if stage.get("skipped") else "")
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{html.escape(str(v))}</td>"
                for v in (
                    stage["name"],
                    stage.get("algorithm"),
                    stage.get("backend"),
                    status,
                    stage.get("model_in"),
                    stage.get("model_out", "-"),
                    learned,
                    stage["run_dir"],
                )
            )
            + "</tr>"
        )
    return "".join(rows) + "</table>"
