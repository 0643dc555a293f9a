"""Record runs of the real runtime (driven by events only) as traces.

:class:`RecordingDriver` is the runtime tests' ``RtDriver`` whose runtime is
built from a :class:`~leasegate.shells.trace.RuntimeConfig` with ports
wrapped by a :class:`~leasegate.shells.trace.TraceRecorder`, and whose every
``handle`` is recorded, exactly as a shell records it (right after
``handle`` returns). Secrets of the builders contain ``CANARY``.
"""

from __future__ import annotations

import pathlib
import sys
from typing import Any, ClassVar

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "core" / "runtime"))

from runtime_kit import RtDriver

from leasegate.core._base import Command, Event
from leasegate.shells.trace import RuntimeConfig, TraceRecorder


class _Recorded:
    """A runtime whose ``handle`` reports each step to a recorder."""

    def __init__(self, rt: Any, recorder: TraceRecorder) -> None:
        self._rt = rt
        self._recorder = recorder

    def handle(self, event: Event) -> list[Command]:
        out: list[Command] = self._rt.handle(event)
        self._recorder.record(event, out)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rt, name)


class RecordingDriver(RtDriver):
    """``RtDriver`` recording a trace to ``path`` (call :meth:`close_trace`)."""

    #: trace paths of every driver built (a test may build several).
    paths: ClassVar[list[pathlib.Path]] = []
    directory: pathlib.Path | None = None

    def __init__(
        self, *, path: pathlib.Path | None = None, wrap: bool = True, monitor: Any = None, **kw: Any
    ) -> None:
        super().__init__(**kw)
        if path is None:
            assert RecordingDriver.directory is not None
            path = RecordingDriver.directory / f"trace-{len(RecordingDriver.paths) + 1}.jsonl"
        RecordingDriver.paths.append(path)
        self.path = path
        real = kw.get("real_replica", False)
        opts = {k: v for k, v in kw.items() if k.endswith("_ms")}
        self.config = RuntimeConfig(
            runner_kind=kw.get("runner_kind", "owned"),
            op_id_seed=kw.get("seed", "seed"),
            replica=bool(real),
            boot_id="boot1" if real else None,
            policy_epochs=(1,) if real else None,
            **opts,
        )
        self.recorder = TraceRecorder(path, self.config, monitor=monitor)
        ports = {"engines": self.engines, "mcp": self.mcp, "person": self.person}
        if wrap:
            engines, mcp, person, files = self.recorder.wrap_ports(**ports, files=self.files)
        else:
            engines, mcp, person, files = self.engines, self.mcp, self.person, self.files
        rt = self.config.build(engines=engines, mcp=mcp, person=person, files=files)
        self.real = rt.replica_port()  # type: ignore[assignment]
        real_reg = rt.registry.handle

        def spy(event: Any) -> list[Command]:
            self.reg_events.append(event)
            return real_reg(event)

        rt.registry.handle = spy  # type: ignore[method-assign]
        self.rt = _Recorded(rt, self.recorder)  # type: ignore[assignment]

    def close_trace(self) -> pathlib.Path:
        self.recorder.close()
        return self.path
