"""The hash of a class list: what the server, a checkpoint and the nodes compare."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence


def classes_hash(class_names: Sequence[str]) -> str:
    """A short hash of a class list, in order: what server, checkpoint and nodes compare."""
    blob = json.dumps([str(c) for c in class_names]).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
