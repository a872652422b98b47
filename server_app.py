"""Ripple's ServerApp: thin wrapper around :func:`ripple_flwr.app.server.run_server`."""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from flwr.app import Context  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402

from ripple_flwr.app.server.run import (  # noqa: E402
    RunFailed,
    quiet_reported_failures,
    reported_failure,
    run_server,
)

app = ServerApp()
quiet_reported_failures()  # a failure the run explains in one line gets no traceback from Flower


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Validate the run config, route the clients once, federate, and write the results.

    A bad run config or missing data is logged in one line and written to
    ``<results>.status`` (``ripple-status`` shows it); the run then fails as
    ``RunFailed: <that line>``, so Flower marks it ``finished:failed``.
    """
    try:
        run_server(grid, dict(context.run_config))
    except Exception as err:
        line = reported_failure(err)
        if line is None:
            raise  # unexpected: Flower logs it with its traceback
        raise RunFailed(line) from None
