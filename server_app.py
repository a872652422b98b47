"""Ripple's ServerApp: thin wrapper around :func:`ripple_flwr.app.server.run_server`."""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from flwr.app import Context  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402

from ripple_flwr.app.server.run import run_server  # noqa: E402

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Validate the run config, route the clients once, federate, and write the results."""
    run_server(grid, dict(context.run_config))
