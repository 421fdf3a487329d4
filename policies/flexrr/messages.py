"""The RapidReassignment messages ([Harlap], §3.3.3, Fig. 3.2) and the actions a worker asks for.

The paper has five messages: progress-report, do-this, begun-helping, help-completed and cancel-help.
We add ``CancelAck``: §3.3.3 closes the cancel race by having "the helpee only commit changes
corresponding to reassigned work after it confirms that the helper acknowledged the cancel-help", which
needs an acknowledgement; ours says which of the cancelled assignments the helper had already begun.

Timestamps: Algorithm 1 compares the sender's runtime timer with the receiver's (``sent_at``). Algorithm
2 compares a do-this's timestamp with the latest cancel-help's, both from the same helpee; for that we
carry a per-sender counter ``stamp`` so two messages sent at the same instant are still ordered.
"""

from __future__ import annotations

from dataclasses import dataclass

# An assignment is named by the helpee and the stamp of its do-this.
AssignmentId = tuple[int, int]


@dataclass(frozen=True)
class ProgressReport:
    """Potential helper -> each helpee, at the progress checkpoint of its own iteration (§3.3.3)."""

    src: int
    dst: int
    iteration: int
    sent_at: float  # the sender's timer


@dataclass(frozen=True)
class DoThis:
    """Helpee -> helper: process items [start, end) of the helpee's iteration ``iteration``."""

    src: int
    dst: int
    iteration: int
    start: int
    end: int
    stamp: int
    sent_at: float

    @property
    def aid(self) -> AssignmentId:
        return (self.src, self.stamp)


@dataclass(frozen=True)
class BegunHelping:
    """Helper -> helpee: the helper has started on assignment ``aid``."""

    src: int
    dst: int
    aid: AssignmentId


@dataclass(frozen=True)
class HelpCompleted:
    """Helper -> helpee: assignment ``aid`` is processed (its updates are flushed with it)."""

    src: int
    dst: int
    aid: AssignmentId


@dataclass(frozen=True)
class CancelHelp:
    """Helpee -> helper: do not start any do-this of mine stamped <= ``stamp``; ``aids`` are the
    assignments the helpee is taking back (so the acknowledgement can answer for each)."""

    src: int
    dst: int
    stamp: int
    aids: tuple[AssignmentId, ...]
    sent_at: float


@dataclass(frozen=True)
class CancelAck:
    """Helper -> helpee: of ``aids`` (the cancel's), ``begun`` had already been started by the helper
    and will be completed by it; the rest are the helpee's to commit."""

    src: int
    dst: int
    aids: tuple[AssignmentId, ...]
    begun: tuple[AssignmentId, ...]


Message = ProgressReport | DoThis | BegunHelping | HelpCompleted | CancelHelp | CancelAck


@dataclass(frozen=True)
class Commit:
    """Items [start, end) of ``owner``'s iteration ``iteration`` were processed by worker ``by`` and
    their updates are final. Every item is committed exactly once per iteration."""

    owner: int
    iteration: int
    start: int
    end: int
    by: int
    kind: str  # "own", "help" (by a helper), "reclaimed" (by the owner after a cancel)


@dataclass(frozen=True)
class IterationDone:
    """Worker ``worker`` finished iteration ``iteration``: its own items and all its reassigned items
    are committed, so the slack bound may move (§3.3.3, "to guarantee the slack-bound")."""

    worker: int
    iteration: int
    started_at: float
    own_done_at: float
    done_at: float


@dataclass(frozen=True)
class Wasted:
    """``items`` were processed speculatively by ``worker`` and thrown away (the cancel race, §3.3.3)."""

    worker: int
    items: int


Action = Message | Commit | IterationDone | Wasted
