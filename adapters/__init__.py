"""Engine adapters: one self-contained folder per engine (translation, launch, metric mapping,
supported version range, version-gated patches)."""
