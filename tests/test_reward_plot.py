"""reward.png, which every `rlbridge train` writes: drawn with Pillow in a few milliseconds (matplotlib cost
0.6-0.7 s of CPU per run, most of rlbridge's fixed cost over a native TRL run, issue 45)."""

import subprocess
import sys

from PIL import Image

from rlbridge.run.summary import nice_ticks, plot

GREEN = (0x2C, 0xA0, 0x2C)  # the third series' colour: reward/mean after two per-reward series


def _near(image, colour, box) -> bool:
    left, top, right, bottom = box
    return any(
        all(abs(a - b) < 40 for a, b in zip(image.getpixel((x, y)), colour))
        for x in range(left, right)
        for y in range(top, bottom)
    )


def test_the_plot_draws_the_rising_reward_and_the_step_time(tmp_path):
    history = [
        {"step": s, "reward/mean": s / 40, "reward/a/mean": 0.5, "reward/b/mean": 0.2, "timing/step_s": 0.3 + s / 100}
        for s in range(1, 41)
    ]
    assert plot(history, tmp_path / "reward.png", "quickstart on trl") is None
    image = Image.open(tmp_path / "reward.png").convert("RGB")
    assert image.size == (700, 600)
    # reward/mean (0.025 -> 1.0) starts at the reward panel's bottom left and ends at its top right
    assert _near(image, GREEN, (70, 250, 110, 290))
    assert _near(image, GREEN, (640, 40, 680, 80))
    assert not _near(image, GREEN, (640, 250, 680, 290))


def test_ticks_are_round_and_cover_the_values():
    assert nice_ticks(0.012, 0.999) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert nice_ticks(1, 150, count=6) == [0, 50, 100, 150]
    ticks = nice_ticks(0.5, 0.5)  # one value: a range around it
    assert ticks[0] < 0.5 < ticks[-1]


def test_plotting_imports_no_matplotlib(tmp_path):
    code = (
        "import sys; from pathlib import Path; from rlbridge.run.summary import plot; "
        "rows = [{'step': 1, 'reward/mean': 0.1}, {'step': 2, 'reward/mean': 0.2}]; "
        f"plot(rows, Path({str(tmp_path)!r}) / 'r.png', 't'); "
        "print('matplotlib' in sys.modules)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "False"
