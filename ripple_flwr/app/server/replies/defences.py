"""The defences every valid training reply passes before any method sees it: one list.

A reply is first converted and checked in one place
(:func:`~ripple_flwr.app.server.replies.validation.check_train_replies`: structure,
finite values, shapes, the round's timeout) and its ``num-examples`` held to the client's
training split size; then every :class:`ReplyDefence` of :data:`REPLY_DEFENCES` runs, in
order, on the replies the ones before it kept. A defence returns, for each reply, the reason
to drop it or ``None``; a dropped reply is logged and recorded with its reason in the
round's ``dropped`` list, and the client's failure count is not touched (it answered).

Adding a defence is one :func:`register_defence` call (docs/adding-a-defence.md). The
aggregate itself has one more guard after every defence: a one-model strategy refuses an
aggregation step out of proportion with the round's honest steps
(``FlowerMethod.refuse_unsafe``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ripple_flwr.aggregation.robust import out_of_bound, out_of_rescale, state_norm, update_stats

if TYPE_CHECKING:
    from ripple_flwr.app.server.replies.validation import Accepted

# Rounds of accepted update norms and radial steps the update bound remembers.
HISTORY_ROUNDS = 5

Check = Callable[[Any, int, Sequence["Accepted"]], Sequence["str | None"]]


@dataclass(frozen=True)
class ReplyDefence:
    """One check of a round's valid training replies.

    Parameters
    ----------
    name : str
        A lower-case word naming it in logs and in :data:`REPLY_DEFENCES`.
    check : callable
        ``check(replies, server_round, accepted)`` -> one entry per reply: the reason to
        drop it (a short sentence, recorded in the results file), or ``None`` to keep it.
        ``replies`` is the run's :class:`~.acceptance.Replies`: its ``settings``,
        ``clients``, ``update_history``, ``update_origins`` and the method's
        ``check_reply``.
    doc : str
        One line: what it refuses and why.
    """

    name: str
    check: Check
    doc: str

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.strip().lower() or " " in self.name:
            raise ValueError(f"defence name {self.name!r} must be a lower-case word")
        if not callable(self.check):
            raise ValueError(f"defence {self.name!r}: check must be callable")
        if not self.doc.strip():
            raise ValueError(f"defence {self.name!r} has no doc")


REPLY_DEFENCES: list[ReplyDefence] = []


def register_defence(defence: ReplyDefence, *, before: str | None = None) -> ReplyDefence:
    """Add ``defence`` at the end of the list (or before the one named ``before``).

    Parameters
    ----------
    defence
        The defence (docs/adding-a-defence.md); its name must be new.
    before
        The name of a registered defence to run it before (``None``: after all).

    Returns
    -------
    ReplyDefence
        ``defence``, registered.
    """
    names = [d.name for d in REPLY_DEFENCES]
    if defence.name in names:
        raise ValueError(f"defence {defence.name!r} is registered already")
    if before is not None and before not in names:
        raise ValueError(f"no defence {before!r} to insert before; registered: {names}")
    at = names.index(before) if before is not None else len(REPLY_DEFENCES)
    REPLY_DEFENCES.insert(at, defence)
    return defence


def apply_defences(
    replies: Any, server_round: int, accepted: list[Accepted]
) -> tuple[list[Accepted], list[tuple[Accepted, str]]]:
    """The replies every registered defence keeps, and the dropped ones with their reason.

    Parameters
    ----------
    replies
        The run's :class:`~.acceptance.Replies` (the settings and the history a defence
        reads).
    server_round
        The round the replies answer.
    accepted
        The round's replies that passed validation, in arrival order.
    """
    dropped: list[tuple[Accepted, str]] = []
    for defence in list(REPLY_DEFENCES):
        if not accepted:
            break
        reasons = list(defence.check(replies, server_round, accepted))
        if len(reasons) != len(accepted):
            raise ValueError(
                f"defence {defence.name!r} gave {len(reasons)} verdicts for {len(accepted)} replies"
            )
        dropped += [(a, r) for a, r in zip(accepted, reasons, strict=True) if r is not None]
        accepted = [a for a, r in zip(accepted, reasons, strict=True) if r is None]
    return accepted, dropped


class UpdateHistory:
    """The accepted replies' update norms and radial steps of the last rounds, oldest first.

    The yardstick honest clients set for the update bound (:func:`update_bound`); it owns
    its two lists, and :meth:`record` keeps the last ``keep`` of each.
    """

    def __init__(self, norms: Sequence[float] = (), radials: Sequence[float] = ()) -> None:
        self.norms: list[float] = [float(v) for v in norms]
        self.radials: list[float] = [float(v) for v in radials]

    def record(self, norms: Sequence[float], radials: Sequence[float], keep: int) -> None:
        """Add this round's kept replies; keep the last ``keep`` of each list."""
        self.norms = (self.norms + list(norms))[-keep:]
        self.radials = (self.radials + list(radials))[-keep:]


# -- the built-in defences, in order ---------------------------------------------------------
def method_check(replies: Any, server_round: int, accepted: Sequence[Accepted]) -> list:
    """The method's own check (``check_reply``: IFCA's chosen index, SCAFFOLD's control)."""
    return [replies.check_reply(a) for a in accepted]


def update_bound(replies: Any, server_round: int, accepted: Sequence[Accepted]) -> list:
    """Replies whose update is out of proportion with the round's honest ones.

    Two yardsticks (:mod:`ripple_flwr.aggregation.robust`): the update's norm and its
    radial step, each against the low median of this round's and of the last
    :data:`HISTORY_ROUNDS` rounds' accepted replies; the kept ones join that history.
    """
    s = replies.settings
    if s.robustness.update_norm_factor <= 0 and s.robustness.max_update_norm <= 0:
        return [None] * len(accepted)
    origins = replies.update_origins(list(accepted))
    model_norm: dict[int, float] = {}  # one norm per distinct model sent
    for o in origins:
        if id(o) not in model_norm:
            model_norm[id(o)] = state_norm(o)
    stats = [update_stats(o, a.state) for o, a in zip(origins, accepted, strict=True)]
    norms = [n for n, _ in stats]
    squares = [max(model_norm[id(o)], 1e-12) ** 2 for o in origins]
    radials = [dot / sq for (_, dot), sq in zip(stats, squares, strict=True)]
    history: UpdateHistory = replies.update_history
    by_norm = out_of_bound(
        norms,
        history.norms,
        s.robustness.update_norm_factor,
        s.robustness.max_update_norm,
        model_norms=[model_norm[id(o)] for o in origins],
    )
    by_rescale = out_of_rescale(radials, history.radials, s.robustness.update_norm_factor)
    reasons = [r1 or r2 for r1, r2 in zip(by_norm, by_rescale, strict=True)]
    kept = [i for i, r in enumerate(reasons) if r is None]
    keep = HISTORY_ROUNDS * max(s.training.clients_per_round, 1)
    history.record([norms[i] for i in kept], [radials[i] for i in kept], keep)
    return reasons


register_defence(ReplyDefence("method-check", method_check, "the method's own reply check"))
register_defence(
    ReplyDefence(
        "update-bound",
        update_bound,
        "an update whose norm or radial step is out of proportion with the honest ones",
    )
)
