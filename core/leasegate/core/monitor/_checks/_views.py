"""``view-below-floor-or-expired``: no view below its run's floor or past its expiry is used."""

from __future__ import annotations

from ...registry import FrameReceived
from ...runtime import Answer, HandleFrame
from ...wire import decode_frame
from ...wire.lease import LeaseStale
from .._mirror import Mirror
from .._ports import ViewStamp
from .._stream import Called, Emitted, Fed, Run, frame_fields, is_run, opened_stamp
from ._base import Checker, Flag

__all__ = ["ViewBelowFloorOrExpired"]


class ViewBelowFloorOrExpired(Checker):
    """Property ``view-below-floor-or-expired`` (``docs/monitor.md``, its section).

    A gate never opens — and the host is never served (the answer to its
    ``AwaitLaunchReady`` or ``AcquireHold``) — a view below the run's
    revision floor or at/after the view's expiry (LR-060, LR-078..LR-083;
    the view's expiry is its lease's, LR-038).

    The floor of a run (:attr:`floors`) is the largest ``minRevision`` of the
    ``lease.stale`` frames the wire codec decodes, for the run while it is the
    newest begun and not closed, before shutdown (LR-078: the registry takes
    a stale frame only for its current run; LR-081: it raises the minimum
    revision); it never lowers. Expiry is compared with the step's ``now_ms``
    (``now_ms >= expires_at``). A served view of another run is
    ``foreign-env-snapshot``'s, not judged here.
    """

    PROPERTY = "view-below-floor-or-expired"
    COMMANDS = (Answer,)

    def __init__(self, mirror: Mirror, flag: Flag) -> None:
        super().__init__(mirror, flag)
        #: ``(task, run)`` → its revision floor.
        self.floors: dict[Run, int] = {}

    def fed(self, item: Fed) -> None:
        """Raise a run's floor from a ``lease.stale`` frame the registry would take."""
        ev = item.event
        if not isinstance(ev, (HandleFrame, FrameReceived)):
            return
        frame = ev.frame
        kind, task, run = frame_fields(frame)
        if kind != "lease.stale":
            return
        floor = (
            frame.get("minRevision")
            if isinstance(frame, dict)
            else getattr(frame, "min_revision", None)
        )
        m = self.mirror
        if (
            type(task) is str
            and is_run(run)
            and type(floor) is int
            and m.newest.get(task) == run
            and m.closed.get(task) != run
            and not m.shut
            and _stale_valid(frame)
        ):
            key = (task, run)
            self.floors[key] = max(self.floors.get(key, 0), floor)

    def called(self, item: Called) -> None:
        """Judge the view a gate opened with."""
        c = item.call
        stamp = opened_stamp(c)
        if stamp is not None:
            self._check(item.step, stamp, c.task_id, c.run_epoch, "a gate opened")

    def emitted(self, item: Emitted) -> None:
        """Judge the run's own view an answer serves."""
        if isinstance(item.command, Answer) and self.mirror.served_view is not None:
            (task, run), stamp = self.mirror.served_view
            if (stamp.task_id, stamp.run_epoch) == (task, run):
                self._check(item.step, stamp, task, run, "a view was served")

    def _check(self, step: int, stamp: ViewStamp, task: object, run: object, what: str) -> None:
        """Flag a view opened or served below its run's floor or at/after its expiry."""
        if type(task) is str and type(run) is int:
            floor = self.floors.get((task, run), 0)
            if stamp.manifest_revision < floor:
                self.flag(
                    step,
                    task,
                    run,
                    f"{what} with manifest revision {stamp.manifest_revision}"
                    f" below the floor {floor}",
                )
        now = self.mirror.now
        if stamp.expires_at >= 0 and now >= stamp.expires_at:
            self.flag(
                step,
                task,
                run,
                f"{what} at {now} ms with a view that expired at {stamp.expires_at} ms",
            )


def _stale_valid(frame: object) -> bool:
    """Whether the runtime's registry would take this stale frame (the codec decides)."""
    if isinstance(frame, LeaseStale):
        return True
    return isinstance(decode_frame(frame), LeaseStale)
