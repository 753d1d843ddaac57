"""Entry point of the verl adapter: registers the backend through the `rlbridge` group."""

from rlbridge import hookimpl


@hookimpl
def rlbridge_register_backends():
    from rlbridge_adapters.verl.backend import VerlBackend

    return [VerlBackend]
