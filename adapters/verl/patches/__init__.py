"""Version-gated patches the verl adapter applies in every verl process (see ../boot.py)."""

from rlbridge_adapters.verl.patches.v05_cpu import PATCHES as V05_CPU
from rlbridge_adapters.verl.patches.v09_cpu import PATCHES as V09_CPU
from rlbridge_adapters.verl.patches.v09_determinism import PATCHES as V09_DETERMINISM

PATCHES = [*V05_CPU, *V09_CPU, *V09_DETERMINISM]
