"""Node admission: the one-shot query round and late joiners (waiting for nodes: node_wait).

The one-shot round (:mod:`~ripple_flwr.app.server.roster.query`) maps every
node to its partition (and collects the summary Ripple routes with); the
:class:`ClientRoster` keeps the usable training clients in partition order, the
held-out new clients beside them, and admits nodes that connect later with one
query each.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from flwr.serverapp import Grid

from ripple_flwr.app.protocol.records import DP_CONFIG, DP_RECORD
from ripple_flwr.app.server.replies.fields import SIZE_CAP_FACTOR, size_cap
from ripple_flwr.app.server.replies.releases import ReleaseLedger
from ripple_flwr.app.server.resume.roster import by_name, saved_result
from ripple_flwr.app.server.roster.node_wait import (
    MIN_CLIENTS,
    NotEnoughClientsError,
    wait_for_nodes,
)
from ripple_flwr.app.server.roster.own_data import LocalData
from ripple_flwr.app.server.roster.query import (
    QueryResult,
    query_round,
    split_new,
)
from ripple_flwr.methods.api import SummaryRows
from ripple_flwr.settings import RunSettings

log = logging.getLogger("flwr.ripple")

HELD_OUT_KEYS = ("new-clients", "alpha-new")


class ClientRoster:
    """Who takes part: the training clients (partition order) and the held-out new clients.

    Parameters
    ----------
    settings : RunSettings
        The run (partitions, new clients, timeouts, clients per round).
    summary_kind : str
        What the one-shot round asks each node for (``embedding | mean | none``).
    summary_dim : int or SummaryRows, optional
        The summary's length (or its most rows, :class:`~ripple_flwr.methods.api.SummaryRows`),
        checked on every reply.
    """

    def __init__(
        self, settings: RunSettings, summary_kind: str, summary_dim: int | SummaryRows | None
    ) -> None:
        self.settings = settings
        self.summary_kind = summary_kind
        self.summary_dim = summary_dim
        self.clients: QueryResult | None = None
        self.new_clients = QueryResult([], [], [], None)
        self.known_nodes: set[int] = set()
        self.joined: list[dict[str, Any]] = []
        self.query_seconds = 0.0
        self.query_records: dict[str, Any] = {}  # sent with every query (public DP mechanism)
        self.size_cap = 0  # the most examples any client is weighted by (0: not yet known)
        self.capped: dict[int, int] = {}  # partition -> the size it claimed, when capped
        # Benchmark runs: partition -> (train, test) split sizes, from the server's federation.
        self.known_sizes: dict[int, tuple[int, int]] | None = None
        self.corrected: dict[int, list[int]] = {}  # partition -> (train, test) it claimed
        self.local: LocalData | None = None  # set when the nodes bring their own data
        self.releases = ReleaseLedger()  # the DP releases of the embedding, per partition
        self.taken_over: list[int] = []  # rows whose node a newcomer replaced at the last look
        self.resuming: dict[str, Any] | None = None  # the saved server state a run continues
        self._restored = False
        # The server's node id -> partition binding ($RIPPLE_PARTITION_MAP), if it has one.
        self.bound: dict[int, int] | None = None

    def expect(
        self,
        *,
        query_records: dict[str, Any] | None = None,
        local: LocalData | None = None,
        known_sizes: dict[int, tuple[int, int]] | None = None,
        bound: dict[int, int] | None = None,
    ) -> None:
        """What the run's data tells the roster before its query round.

        ``query_records`` are sent with every query (the run's classes for nodes with their
        own data, the public DP mechanism); ``local`` is set when the nodes bring their own
        data; ``known_sizes`` are a benchmark run's (train, test) split sizes per partition;
        ``bound`` the server's node id -> partition binding ($RIPPLE_PARTITION_MAP).
        """
        self.query_records.update(query_records or {})
        if local is not None:
            self.local = local
        if known_sizes is not None:
            self.known_sizes = known_sizes
        if bound is not None:
            self.bound = bound

    def resume_from(self, state: dict[str, Any]) -> None:
        """Continue the interrupted run of ``state`` (its server checkpoint) in :meth:`prepare`.

        The query round then asks every node who it is (partition and sizes)
        but for no summary: the saved clients keep the summaries, and the DP
        releases, they sent once.
        """
        self.resuming = state

    def _ask(
        self, grid: Grid, node_ids: Sequence[int], taken: Sequence[int] = (), summary: bool = True
    ) -> QueryResult:
        """One query round to ``node_ids``; ``summary`` False asks who they are, nothing more.

        A round that carries the DP mechanism is counted in :attr:`releases`.
        """
        s = self.settings
        kind, dim, extra = self.summary_kind, self.summary_dim, self.query_records
        if not summary:
            kind, dim = "none", None
            extra = {k: v for k, v in extra.items() if k not in (DP_RECORD, DP_CONFIG)}
        result = query_round(
            grid,
            node_ids,
            kind,
            dim,
            s.data.total_partitions,
            s.robustness.round_timeout,
            taken=taken,
            extra=extra,
            local=self.local,
            bound=self.bound,
        )
        if kind != "none" and DP_RECORD in extra:
            self.releases.count(len(node_ids), result.partition_ids)
        return result

    def prepare(self, grid: Grid) -> QueryResult:
        """Wait for the nodes, run the one-shot round, keep the usable clients.

        Nodes holding a held-out partition (``partition-id >= num-partitions``)
        are set aside as new clients: they never train and are onboarded
        zero-shot after training.
        """
        s = self.settings
        node_ids = wait_for_nodes(
            grid,
            s.data.num_partitions,
            s.robustness.node_wait_timeout,
            allowed=s.data.total_partitions,
            local=self.local is not None,
        )
        t0 = time.perf_counter()
        everyone = self._ask(grid, node_ids, summary=self.resuming is None)
        self.query_seconds = time.perf_counter() - t0
        self.known_nodes.update(int(n) for n in node_ids)
        self._correct(everyone)
        self.size_cap = size_cap(everyone.num_examples)
        self._cap(everyone)
        clients, new = split_new(everyone, s.data.num_partitions)
        clients.rejected = everyone.rejected
        self.new_clients = new
        reasons = "; ".join(f"node {n}: {r}" for n, r in list(clients.rejected.items())[:5])
        if len(clients) < MIN_CLIENTS:
            raise NotEnoughClientsError(
                f"no usable training client after the query round (the run needs at least "
                f"{MIN_CLIENTS}). Left out: {reasons}"
            )
        if len(clients) < s.training.clients_per_round:
            log.warning(
                "only %d usable clients after the query round but clients-per-round=%d: "
                "every round trains all %d. Left out: %s",
                len(clients),
                s.training.clients_per_round,
                len(clients),
                reasons,
            )
        log.info(
            "query round: %d clients usable, %d held out for zero-shot onboarding, "
            "%d left out (%.2f s)",
            len(clients),
            len(new),
            len(clients.rejected),
            self.query_seconds,
        )
        self.clients = clients
        if self.resuming is not None:
            self._continue_saved(clients, new)
        return self.clients

    def _continue_saved(self, fresh: QueryResult, new: QueryResult) -> None:
        """Take up the saved roster: its clients with the node ids just found, its releases.

        A node that claims a partition the saved run routed is not asked again;
        held-out clients keep their saved summaries while the held-out group is
        the saved run's (``new-clients``, ``alpha-new`` unchanged). Every other
        node just found is forgotten, so that the next admission asks it for its
        summary, once, as a late joiner; a node the saved run already asked and
        left out is not asked again.
        """
        saved = self.resuming["roster"]
        if self.local is not None:  # own data: slots follow names, so match the names
            node_of, here = by_name(saved, fresh, new)
        else:
            node_of = dict(
                zip(
                    fresh.partition_ids + new.partition_ids,
                    fresh.node_ids + new.node_ids,
                    strict=True,
                )
            )
            here = set(new.partition_ids)
        self.restore(saved, node_of)
        self._restored = True
        mine, theirs = self.settings.to_dict(), self.resuming["settings"]
        self.new_clients = QueryResult([], [], [], None)
        if all(theirs.get(k) == mine[k] for k in HELD_OUT_KEYS):
            old = saved_result(saved["new_clients"], node_of)
            self.new_clients = old.select([r for r, p in enumerate(old.partition_ids) if p in here])
        asked = {int(n) for n in saved["known_nodes"]}
        routed = set(self.clients.partition_ids)
        again: set[int] = set()
        if self.local is None:  # (own data: by_name found every node among the saved ones)
            again = {node_of[p] for p in fresh.partition_ids if p not in routed} - asked
            kept = set(self.new_clients.partition_ids)
            again |= {node_of[p] for p in new.partition_ids if p not in kept}
        self.known_nodes -= again
        log.info(
            "resumed: %d saved clients and %d held-out ones keep their summaries; %d node(s) "
            "the saved run did not route are asked for theirs at the next admission",
            len(self.clients),
            len(self.new_clients),
            len(again),
        )

    def admit_late_joiners(
        self, grid: Grid, server_round: int, replaceable: Sequence[int] = ()
    ) -> QueryResult | None:
        """Query nodes that connected since the last look; return the new training clients.

        Only the newcomers get a message; the clients already in the run see
        nothing of it. A newcomer that fails its query is left out and not
        asked again. Held-out partitions among them join ``new_clients``.

        ``replaceable``: training partitions whose node failed its last round (a
        SuperNode that was killed and restarted comes back as a new node, since
        Flower gives a SuperNode without authentication keys a new node id). A
        newcomer claiming one of them takes it over: the run's row, summary and
        state stay, only the node id changes (recorded in ``took_over`` of the
        round's ``late_joiners`` entry; its rows in :attr:`taken_over`). Its new
        summary is not used, but with embedding DP the query was a release and is
        counted as that partition's second (the restarted node lost its first).
        Any other partition already held is refused as before, and so is a
        newcomer that asks before its partition's node has failed a round (it is
        not asked again; a deployment that restarts nodes often should give them
        authentication keys, which keep the node id).
        """
        self.taken_over = []
        fresh = sorted(int(n) for n in grid.get_node_ids() if int(n) not in self.known_nodes)
        if not fresh:
            return None
        s = self.settings
        free = set(replaceable) if self.local is None else set()  # own data: slots by name
        taken = [p for p in self.clients.partition_ids if p not in free]
        taken += list(self.new_clients.partition_ids)
        t0 = time.perf_counter()
        result = self._ask(grid, fresh, taken=taken)
        self.known_nodes.update(fresh)
        took_over = self._take_over(result, free, server_round)
        self._correct(result)
        self._cap(result)  # a late joiner is held to the cap the first round set
        train, new = split_new(result, s.data.num_partitions)
        self.clients.rejected.update(result.rejected)
        if len(new):
            self.new_clients.extend(new)
        self.joined.append(
            {
                "round": server_round,
                "partitions": list(train.partition_ids),
                "new_clients": list(new.partition_ids),
                "rejected": {str(n): r for n, r in result.rejected.items()},
                "seconds": time.perf_counter() - t0,
                **({"took_over": took_over} if took_over else {}),
            }
        )
        log.info(
            "round %d: %d late node(s) joined (training partitions %s, new clients %s, "
            "%d left out)",
            server_round,
            len(fresh),
            list(train.partition_ids),
            list(new.partition_ids),
            len(result.rejected),
        )
        return train if len(train) else None

    def _take_over(self, result: QueryResult, free: set[int], server_round: int) -> dict:
        """Newcomers of ``result`` that claim a ``free`` partition replace its node; removed
        from ``result``. Returns partition -> {from, to} node ids."""
        rows = [r for r, p in enumerate(result.partition_ids) if p in free]
        if not rows:
            return {}
        row_of = {p: r for r, p in enumerate(self.clients.partition_ids)}
        moved: dict[str, dict[str, str]] = {}
        for r in rows:
            pid, nid = result.partition_ids[r], result.node_ids[r]
            row = row_of[pid]
            old = self.clients.node_ids[row]
            self.clients.node_ids[row] = nid
            self.taken_over.append(row)
            moved[str(pid)] = {"from": str(old), "to": str(nid)}
            log.warning(
                "round %d: node %d takes over partition %d from node %d, which failed its "
                "last round (a restarted SuperNode is a new node)",
                server_round,
                nid,
                pid,
                old,
            )
        keep = [r for r in range(len(result)) if r not in set(rows)]
        rest = result.select(keep)
        rest.rejected = result.rejected
        for name in vars(result):
            setattr(result, name, getattr(rest, name))
        return moved

    def _correct(self, result: QueryResult) -> None:
        """Benchmark partitions: the sizes are the server's, whatever a client reports.

        Every node rebuilds the run's federation from its config, the server
        too, so it knows each partition's split sizes; a different claim is
        logged, recorded under ``clients.sizes_corrected`` and replaced.
        """
        if self.known_sizes is None:
            return
        for row, pid in enumerate(result.partition_ids):
            train, test = self.known_sizes[pid]
            said = (result.num_examples[row], result.num_test[row] if result.num_test else 0)
            if any(v and v != k for v, k in zip(said, (train, test), strict=True)):
                self.corrected[pid] = list(said)
                log.warning(
                    "partition %d reported %d/%d examples; its split has %d/%d (the server's "
                    "federation): weighted by those",
                    pid,
                    *said,
                    train,
                    test,
                )
            result.num_examples[row] = train
            if result.num_test:
                result.num_test[row] = test

    def _cap(self, result: QueryResult) -> None:
        claimed = {r: (result.num_examples[r], result.num_test[r]) for r in range(len(result))}
        for row in result.cap_sizes(self.size_cap):
            pid = result.partition_ids[row]
            self.capped[pid] = max(claimed[row])
            log.warning(
                "partition %d reported %s examples; it is weighted as %d (%.0fx the median)",
                pid,
                "/".join(str(v) for v in claimed[row]),
                self.size_cap,
                SIZE_CAP_FACTOR,
            )

    def to_dict(self) -> dict[str, Any]:
        """The roster as plain data (for a server checkpoint)."""
        return {
            "clients": asdict(self.clients),
            "new_clients": asdict(self.new_clients),
            "known_nodes": sorted(self.known_nodes),
            "joined": self.joined,
            "query_seconds": self.query_seconds,
            "size_cap": self.size_cap,
            "capped": {str(p): n for p, n in self.capped.items()},
            "corrected": {str(p): list(n) for p, n in self.corrected.items()},
            "releases": self.releases.to_dict(),
        }

    def restore(self, saved: dict[str, Any], node_of: dict[int, int]) -> None:
        """The saved training clients, with node ids from this process's query round where known.

        Held-out new clients are restored by :meth:`prepare` of a run that
        :meth:`resume_from` a checkpoint (they never trained: only while the
        held-out group is unchanged). Once :meth:`prepare` has restored the
        roster, calling this again changes nothing.
        """
        if self._restored:
            return
        self.clients = saved_result(saved["clients"], node_of)
        self.size_cap = int(saved.get("size_cap") or size_cap(self.clients.num_examples))
        self.known_nodes |= {int(n) for n in saved["known_nodes"]}
        self.joined = list(saved["joined"])
        # What the results record of sizes a client misreported (absent in older checkpoints).
        self.capped = {int(p): int(n) for p, n in saved.get("capped", {}).items()}
        self.corrected = {
            int(p): [int(v) for v in n] for p, n in saved.get("corrected", {}).items()
        }
        if "releases" in saved:
            self.releases = ReleaseLedger.from_dict(saved["releases"])
        elif DP_RECORD in self.query_records:  # a checkpoint from before the count was kept
            self.releases = ReleaseLedger.of_saved_roster(saved)

    def record(self) -> dict[str, Any]:
        """Who took part, for the results file."""
        c = self.clients
        return {
            "partition_ids": list(c.partition_ids) if c else [],
            "node_ids": [str(n) for n in c.node_ids] if c else [],
            "data_sources": list(c.sources) if c else [],
            "names": list(c.names) if c else [],
            "left_out": {str(n): r for n, r in (c.rejected.items() if c else [])},
            "size_cap": self.size_cap,
            "sizes_capped": {str(p): n for p, n in sorted(self.capped.items())},
            "sizes_corrected": {str(p): n for p, n in sorted(self.corrected.items())},
        }
