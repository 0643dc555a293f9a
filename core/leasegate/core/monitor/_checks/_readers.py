"""``read-on-closed-reader``: no parameter read goes through a closed reader."""

from __future__ import annotations

from ...registry import ReadParameters
from .._stream import Emitted
from ._base import Checker

__all__ = ["ReadOnClosedReader"]


class ReadOnClosedReader(Checker):
    """Property ``read-on-closed-reader`` (``docs/monitor.md``, its section).

    No ``ReadParameters`` goes through a reader after its ``CloseReader``:
    a grant's reader reads while its grant is current and a sealed one
    refuses new reads (LR-154, LR-155); credential reads and project value
    reads alike. The readers are the mirror's, in command order (also within
    one step). A read through a reader id never opened is not judged.
    """

    PROPERTY = "read-on-closed-reader"
    COMMANDS = (ReadParameters,)

    def emitted(self, item: Emitted) -> None:
        """Flag a read through a reader the mirror saw closed."""
        cmd = item.command
        if not isinstance(cmd, ReadParameters) or type(cmd.reader_id) is not int:
            return
        rd = self.mirror.readers.get(cmd.reader_id)
        if rd is not None and rd.closed:
            self.flag(
                item.step,
                rd.task,
                rd.run,
                f"a parameter read went through reader {cmd.reader_id} after it was closed",
            )
