"""The TRL adapter's own tests (package.py TESTS lists them): here those that run in rlbridge's own
environment, in in_env/ those that need TRL installed (its engine environment's compat cells run them).
A package, so that pytest imports them as adapters.trl.tests.X."""
