"""Entry point of the TRL adapter: registers the backend through the `rlbridge` group."""

from rlbridge import hookimpl


@hookimpl
def rlbridge_register_backends():
    from rlbridge_adapters.trl.backend import TRLBackend

    return [TRLBackend]
