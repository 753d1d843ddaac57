"""Entry point of the AReaL adapter: registers the backend through the `rlbridge` group."""

from rlbridge import hookimpl


@hookimpl
def rlbridge_register_backends():
    from rlbridge_adapters.areal.backend import ArealBackend

    return [ArealBackend]
