"""A throwaway PostgreSQL server for the ledger tests.

``PgServer`` runs ``initdb`` in a fresh temporary directory and ``pg_ctl``
on 127.0.0.1 with a free port, from the server binaries the machine has
(``$PG_BIN``, ``pg_ctl`` on ``PATH``, or ``/usr/lib/postgresql/*/bin``).
``initdb`` refuses to run as root: as root, the cluster belongs to the
``postgres`` user (the Debian package creates it) and every server command
runs through ``runuser``. Never a shared server, never a mock.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def find_pg_bin() -> str | None:
    """The directory holding ``pg_ctl`` and ``initdb``, or ``None``."""
    env = os.environ.get("PG_BIN")
    if env and os.path.exists(os.path.join(env, "pg_ctl")):
        return env
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True)
    found = shutil.which("pg_ctl")
    if found:
        candidates.insert(0, found)
    for path in candidates:
        directory = os.path.dirname(path)
        if os.path.exists(os.path.join(directory, "initdb")):
            return directory
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    """One PostgreSQL cluster in a temp dir; ``start``/``kill``/``stop``."""

    def __init__(self, bin_dir: str) -> None:
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="leasegate-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.user: str | None = None
        if os.geteuid() == 0:
            self.user = "postgres"
            pw = pwd.getpwnam(self.user)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        self.conninfo = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def _run(self, *args: str, timeout: float = 60) -> None:
        cmd = [os.path.join(self.bin_dir, args[0]), *args[1:]]
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=timeout, cwd=self.root)

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                f"unix_socket_directories = '{self.root}'\n"
                "synchronous_commit = on\nfsync = on\nmax_connections = 100\n"
                "shared_buffers = 32MB\n"
            )

    def start(self) -> None:
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.root / "log"),
            "-w",
            "-t",
            "60",
            "start",
        )

    def pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().splitlines()[0])

    def kill(self) -> None:
        """SIGKILL the postmaster and wait until its port is free."""
        pid = self.pid()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        # Orphaned backends exit once they notice the postmaster is gone.
        time.sleep(0.5)

    def stop(self) -> None:
        """Stop the server (immediate) and delete its directory; idempotent."""
        if not self.data.exists():
            return
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
