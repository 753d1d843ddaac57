"""Entry point of the OpenRLHF adapter: registers the backend through the `rlbridge` group."""

from rlbridge import hookimpl


@hookimpl
def rlbridge_register_backends():
    from rlbridge_adapters.openrlhf.backend import OpenRLHFBackend

    return [OpenRLHFBackend]
