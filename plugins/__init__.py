"""rlbridge's built-in plugins. They register through the `rlbridge` entry-point group, exactly
like third-party plugins do, and import no engine at import time."""
