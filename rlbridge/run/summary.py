"""What a run leaves in output_dir besides metrics.jsonl: summary.json and the plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def summarize(history: list[dict[str, float]]) -> dict[str, Any]:
    rewards = [(row["step"], row["reward/mean"]) for row in history if "reward/mean" in row]
    step_times = [row["timing/step_s"] for row in history if "timing/step_s" in row]
    out: dict[str, Any] = {"steps": int(history[-1]["step"]) if history else 0}
    if rewards:
        tail = [r for _, r in rewards[-max(1, len(rewards) // 10) :]]
        out.update(
            reward_first=rewards[0][1],
            reward_last=rewards[-1][1],
            reward_max=max(r for _, r in rewards),
            reward_last10pct_mean=sum(tail) / len(tail),
            first_step_reward_ge_0_9=next((s for s, r in rewards if r >= 0.9), None),
        )
    for name in ("loss/sft", "loss/dpo", "loss/reward_model"):  # an offline stage's loss (docs/stages.md)
        losses = [row[name] for row in history if name in row]
        if losses:
            out.update(loss=name, loss_first=losses[0], loss_last=losses[-1])
    if step_times:
        ordered = sorted(step_times)
        out.update(step_s_median=ordered[len(ordered) // 2], train_s=sum(step_times))
    return out


# reward.png is drawn with Pillow, not matplotlib: importing matplotlib and rendering one figure cost 0.6-0.7 s
# of CPU in every `rlbridge train` (most of rlbridge's fixed cost over a native TRL run, issue 45); two line
# panels need none of it. Pillow is in every engine environment (transformers' and vLLM's dependency).
WIDTH, HEIGHT = 700, 600
MARGIN_LEFT, MARGIN_RIGHT, TITLE_H, GAP, BOTTOM = 70, 20, 36, 24, 46
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]  # tab10
GRID, AXIS, TEXT = "#e6e6e6", "#404040", "#202020"


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About `count` round tick values covering [low, high] (1, 2, 2.5 or 5 times a power of ten apart)."""
    import math

    if not high > low:
        pad = abs(low) * 0.1 or 0.5
        low, high = low - pad, high + pad
    raw = (high - low) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.floor(low / step) * step
    ticks = []
    value = first
    while value < high + step * 0.999:
        ticks.append(round(value, 12))
        value += step
    return ticks


def _label(value: float) -> str:
    return f"{value:.6g}"


def _panel(draw, font, box, series, ylabel: str, x_ticks: list[float], xlabel: str | None) -> None:
    """One line chart in `box` (left, top, right, bottom): series is [(label, colour, width, points)]."""
    left, top, right, bottom = box
    ys = [y for *_, points in series for _, y in points]
    y_ticks = nice_ticks(min(ys), max(ys)) if ys else [0.0, 1.0]
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]

    def at(x: float, y: float) -> tuple[float, float]:
        return left + (x - x0) / (x1 - x0) * (right - left), bottom - (y - y0) / (y1 - y0) * (bottom - top)

    for y in y_ticks:
        _, py = at(x0, y)
        draw.line([(left, py), (right, py)], fill=GRID)
        text = _label(y)
        draw.text((left - 6 - draw.textlength(text, font=font), py - 6), text, fill=TEXT, font=font)
    for x in x_ticks:
        px, _ = at(x, y0)
        draw.line([(px, top), (px, bottom)], fill=GRID)
        if xlabel is not None:
            text = _label(x)
            draw.text((px - draw.textlength(text, font=font) / 2, bottom + 4), text, fill=TEXT, font=font)
    draw.rectangle([left, top, right, bottom], outline=AXIS)
    for _, colour, width, points in series:
        pixels = [at(x, y) for x, y in points]
        if len(pixels) == 1:
            (px, py) = pixels[0]
            draw.ellipse([px - 2, py - 2, px + 2, py + 2], fill=colour)
        else:
            draw.line(pixels, fill=colour, width=width, joint="curve")
    draw.text((left, top - 16), ylabel, fill=TEXT, font=font)
    if len(series) > 1:  # the legend, bottom right as before
        lines = [(label, colour) for label, colour, *_ in series]
        widest = max(draw.textlength(label, font=font) for label, _ in lines)
        lx, ly = right - widest - 34, bottom - 8 - 15 * len(lines)
        draw.rectangle([lx - 6, ly - 4, right - 6, bottom - 6], fill="white", outline=GRID)
        for i, (label, colour) in enumerate(lines):
            draw.line([(lx, ly + 15 * i + 7), (lx + 18, ly + 15 * i + 7)], fill=colour, width=2)
            draw.text((lx + 24, ly + 15 * i), label, fill=TEXT, font=font)
    if xlabel is not None:
        draw.text(((left + right - draw.textlength(xlabel, font=font)) / 2, bottom + 22), xlabel, fill=TEXT, font=font)


def plot(history: list[dict[str, float]], path: Path, title: str) -> str | None:
    """Reward (every reward/*/mean) and step time against step, as a PNG. Returns why it was skipped, or None."""
    try:
        from PIL import Image, ImageDraw, ImageFont
    except ImportError:
        return "Pillow is not installed (pip install 'rlbridge[plot]')"
    keys = sorted({k for row in history for k in row if k.startswith("reward/") and k.endswith("/mean")})
    rewards = [
        (
            key,
            COLOURS[i % len(COLOURS)],
            3 if key == "reward/mean" else 1,
            [(r["step"], r[key]) for r in history if key in r],
        )
        for i, key in enumerate(keys)
    ]
    times = [("step time", COLOURS[1], 2, [(r["step"], r["timing/step_s"]) for r in history if "timing/step_s" in r])]
    steps = [r["step"] for r in history if "step" in r] or [0]
    x_ticks = nice_ticks(min(steps), max(steps), count=6)
    image = Image.new("RGB", (WIDTH, HEIGHT), "white")
    draw = ImageDraw.Draw(image)
    font, title_font = ImageFont.load_default(size=11), ImageFont.load_default(size=14)
    draw.text(((WIDTH - draw.textlength(title, font=title_font)) / 2, 10), title, fill=TEXT, font=title_font)
    right = WIDTH - MARGIN_RIGHT
    middle = TITLE_H + (HEIGHT - TITLE_H - BOTTOM - GAP) // 2
    _panel(draw, font, (MARGIN_LEFT, TITLE_H + 12, right, middle), rewards, "reward", x_ticks, None)
    _panel(
        draw,
        font,
        (MARGIN_LEFT, middle + GAP, right, HEIGHT - BOTTOM),
        times,
        "step time (s)",
        x_ticks,
        "training step",
    )
    image.save(path, optimize=False)
    return None


def main(argv: list[str] | None = None) -> int:
    """`python -m rlbridge.run.summary METRICS_JSONL PNG TITLE`: plot from a metrics file (used to draw
    the plot with an engine environment's Pillow when the user's environment has none)."""
    import json
    import sys

    args = list(argv or sys.argv[1:])
    metrics, png, title = args[:3]
    rows = [json.loads(line) for line in Path(metrics).read_text().splitlines() if line.strip()]
    # non-finite values are null (and named in "nonfinite"): leave them out of the plot
    history = [{k: v for k, v in row.items() if isinstance(v, (int, float))} for row in rows]
    skipped = plot(history, Path(png), title)
    if skipped:
        print(skipped, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
