"""Version-gated patches the verl adapter applies in every verl process (see boot.py)."""

PATCHES: list = []
