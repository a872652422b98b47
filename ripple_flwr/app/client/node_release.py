"""The node's side of the DP embedding: one release per run, the same vector if asked again.

The server asks each client once (a resumed run reuses the saved release,
:meth:`~ripple_flwr.app.server.roster.admission.ClientRoster.resume_from`).
As a second defence the node keeps its release in ``context.state``: asked
again in the same run, with the same mechanism and the same data, it sends
the vector it already released. Sending a released vector again is
post-processing and costs no further privacy; a fresh draw of noise would
cost another (epsilon, delta). Flower keeps ``context.state`` per run, so a
resumed run (a new Flower run) starts without it: there the server's count
is what holds.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import numpy as np
from flwr.app import ConfigRecord, RecordDict

if TYPE_CHECKING:  # scipy comes with it: 0.5 s of every ClientApp process's start
    from ripple_flwr.privacy.release import PublicMechanism


RELEASE_STATE_KEY = "ripple.dp-release"  # context.state: this node's one DP release of the run


def release_key(mech: PublicMechanism, embedding: np.ndarray) -> str:
    """A digest of the mechanism and the clean embedding (kept on the node, never sent)."""
    h = hashlib.sha256()
    for name, array in sorted(mech.arrays().items()):
        h.update(name.encode() + np.ascontiguousarray(array).tobytes())
    h.update(repr(sorted(mech.config().items())).encode())
    h.update(np.ascontiguousarray(embedding, dtype=np.float32).tobytes())
    return h.hexdigest()


def release_once(
    state: RecordDict, mech: PublicMechanism, embedding: np.ndarray, node_config: dict[str, Any]
) -> tuple[np.ndarray, bool]:
    """The node's DP release of ``embedding``, and whether it is one it had already sent.

    A new mechanism or new data is a new release (and counted as one in the
    node's state: ``releases``).
    """
    key = release_key(mech, embedding)
    held = state.config_records.get(RELEASE_STATE_KEY)
    if held is not None and held.get("key") == key:
        return np.frombuffer(held["phi"], dtype=np.float32).copy(), True
    from ripple_flwr.privacy.release import noise_generator

    noisy = np.asarray(mech.release(embedding, noise_generator(node_config)), dtype=np.float32)
    releases = 1 + (int(held["releases"]) if held is not None else 0)
    state[RELEASE_STATE_KEY] = ConfigRecord(
        {"key": key, "phi": noisy.tobytes(), "releases": releases}
    )
    return noisy, False
