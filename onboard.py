"""Zero-shot onboarding of a new client from a finished run (phase 4), standalone.

    python onboard.py outputs/ripple-ripple-seed0.run.pt --images client.npy --out client.model.pt

A thin shim: the body is :mod:`ripple_flwr.cli.onboard` (``--help`` lists every option).
"""

import sys

from ripple_flwr.cli.onboard import main

if __name__ == "__main__":
    sys.exit(main())
