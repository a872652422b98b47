"""Pre-train Ripple's GMM-VAE router on synthetic clients (phase 1), standalone.

    python pretrain_vae.py --dataset mnist-5k --output outputs/gmm_vae.pt

A thin shim: the body is :mod:`ripple_flwr.cli.pretrain` (``--help`` lists every option).
"""

import sys

from ripple_flwr.cli.pretrain import main

if __name__ == "__main__":
    sys.exit(main())
