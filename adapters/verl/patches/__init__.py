"""Version-gated patches the verl adapter applies in every verl process (see ../boot.py)."""

from rlbridge_adapters.verl.patches.v05_cpu import PATCHES as V05_CPU

PATCHES = [*V05_CPU]
