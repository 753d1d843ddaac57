"""rlbridge's own tests: a package, so that `tests.conftest` (the helpers) is this folder in every environment,
also where an engine installs a top-level package called tests (verl does)."""
