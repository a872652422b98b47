"""What the command-line tools share: one-line usage errors, the ``--device`` check and the
output-path check (:func:`~ripple_flwr.io.paths.check_output_path`, in ``io`` so that the
experiment runners can use it too).

They run a check on their options before any work (no file read, no model built), and a
bad option ends in one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import re

from ripple_flwr.io.paths import OutputPathError, check_output_path

__all__ = [
    "DEVICES",
    "OneLineParser",
    "OutputPathError",
    "UsageError",
    "check_device",
    "check_output_path",
]


class UsageError(ValueError):
    """A bad option, found before any work; the message names the option and the fix."""


class OneLineParser(argparse.ArgumentParser):
    """argparse's own errors (unknown option, bad type or choice) in one line, not usage +
    error: ``<prog>: error: <message> (see --help)``, exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see --help)\n")


DEVICES = "auto, cpu, cuda or cuda:N"
_DEVICE = re.compile(r"(auto|cpu|cuda(:\d+)?)")


def check_device(device: str, option: str = "--device") -> None:
    """Refuse a device this machine cannot train or route on, before anything is loaded.

    ``auto`` picks CUDA when there is one (:func:`ripple_flwr.router.pretrain.resolve_device`);
    ``cuda`` and ``cuda:N`` need CUDA and, for ``N``, that many devices.
    """
    if not _DEVICE.fullmatch(device):
        raise UsageError(f"{option} {device!r} is not a device these tools run on; use {DEVICES}")
    if device in ("auto", "cpu"):
        return
    import torch

    if not torch.cuda.is_available():
        raise UsageError(
            f"{option} {device}: CUDA is not available on this machine; use cpu or auto"
        )
    count = torch.cuda.device_count()
    index = int(device.partition(":")[2] or 0)
    if index >= count:
        raise UsageError(
            f"{option} {device}: this machine has {count} CUDA device(s); use cuda:0"
            + (f" to cuda:{count - 1}" if count > 1 else "")
        )
