"""Table locks as leases with fencing tokens: one batch-changing job of a table at a time,
across processes and hosts.

A lock is a sequential, create-only log (``<state>/<table>/locks/<name>/<token>.json``): an
``acquire`` record makes its writer the holder, with a lease that expires unless renewed; a
``release`` record frees it. The sequence number of the acquire record is the **fencing
token**. Taking a lock is creating the next record, so of two processes breaking the same
stale lock exactly one wins (the create-only write), never both.

- A live holder renews its lease in the background (``<token>.renew.json``, its own file).
- A lease is broken only after it expired, or at once when its holder ran in this pid
  namespace (same boot, same ``/proc/self/ns/pid``) and its process is gone (a killed job's
  retry need not wait). Containers with a fixed hostname, or pods sharing the node's network,
  share a hostname but not a pid namespace: there a pid says nothing, and only expiry counts.
- Expiry tolerates clock skew between hosts: a lease whose holder-written expiry has passed
  by this host's clock is broken only once it has also been silent (no renewal) for a whole
  lease as this process saw it, or its expiry is a whole lease in the past.
- The batch lock is waited for, bounded (``TIDEMARK_LOCK_WAIT_S``, 120 s) and logged, instead
  of failing at once: a seal behind a dump, a rebuild swap or a stream micro-batch goes on
  when the other job is done. Other locks (a rebuild's hour, the stream) fail at once.
- A holder checks its token before every step that makes data visible (``Lease.check``): a
  job paused past its lease (GC, a frozen VM) finds another holder and stops with
  ``LeaseLostError`` instead of publishing.
- ``tidemark unlock`` releases a lock by an operator's decision, with an audit record.

``latest.json`` is a hint of the newest record (readers probe forward from it), so taking a
lock costs a few reads however long the log grows.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tidemark.errors import BatchConflictError, LeaseLostError
from tidemark.state.seqlog import SequentialLog
from tidemark.state.storage import Location, read_json, replace_atomically

log = logging.getLogger(__name__)

DEFAULT_LEASE = timedelta(minutes=10)


DEFAULT_WAIT_S = 120.0
POLL_S = 0.5


def lease_duration() -> timedelta:
    """``TIDEMARK_LOCK_LEASE_S`` (seconds) or 10 minutes: how long a silent holder keeps a lock."""
    return timedelta(seconds=float(os.environ.get("TIDEMARK_LOCK_LEASE_S", DEFAULT_LEASE.total_seconds())))


def lock_wait(name: str) -> float:
    """Seconds to wait for a held lock: ``TIDEMARK_LOCK_WAIT_S`` (120) for the batch lock, which
    short steps of other jobs take in turn; 0 for the others (one rebuild of an hour, one
    stream: a second one is a mistake to report, not to queue)."""
    if name != "batch":
        return 0.0
    return float(os.environ.get("TIDEMARK_LOCK_WAIT_S", DEFAULT_WAIT_S))


@functools.cache
def pid_namespace() -> str:
    """This process's pid namespace: the boot and ``/proc/self/ns/pid``; "" where unknown. Two
    processes can judge each other's pids only when these are equal."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return ""


def process_start(pid: int) -> str:
    """A process's start time in clock ticks since boot (``/proc/<pid>/stat``), "" if unknown:
    tells a live holder from another process that reuses its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[-1].split()[19]


@dataclass(frozen=True)
class LockRecord:
    """One step of a lock: ``acquire`` (a holder and its lease) or ``release``."""

    kind: str
    host: str
    pid: int
    run_id: str
    at: str
    expires_at: str | None = None
    by: str = ""  # release: who (a job, or an operator's tidemark unlock)
    pid_namespace: str = ""  # "" (older records, unknown systems): the pid is never judged
    started: str = ""  # the holder process's start time (pid reuse)

    def describe(self) -> str:
        return f"host {self.host}, pid {self.pid}, run {self.run_id}"

    def lease(self) -> timedelta:
        """The lease its holder took (its own setting, not this process's)."""
        if self.expires_at is None:
            return timedelta(0)
        return datetime.fromisoformat(self.expires_at) - datetime.fromisoformat(self.at)

    def process_gone(self) -> bool:
        """The holder ran in this pid namespace and its process is gone (or its pid is now
        another process's). False whenever that cannot be known."""
        if not self.pid_namespace or self.pid_namespace != pid_namespace():
            return False
        if not _pid_alive(self.pid):
            return True
        return bool(self.started) and process_start(self.pid) not in ("", self.started)


class TableLock:
    """A named lock of one table (``batch`` serialises dump, seal, release and swaps)."""

    def __init__(self, state_dir: Location | Path, table: str, name: str = "batch") -> None:
        self.table = table
        self.name = name
        self.root = Location(state_dir) / table / "locks" / name
        self._log = SequentialLog(self.root)
        self._hint = self.root / "latest.json"

    @classmethod
    def at(cls, root: Location) -> TableLock:
        """The lock whose records live at ``root`` (``<state>/<table>/locks/<name>``)."""
        lock = cls(root.parent.parent.parent, root.parent.parent.name, root.name)
        assert lock.root == root, (lock.root, root)
        return lock

    # -- reading -------------------------------------------------------------------------
    def latest(self) -> tuple[int, LockRecord] | None:
        """The newest record and its sequence number."""
        hint = read_json(self._hint)
        seq = int(hint["seq"]) if hint else -1
        while self._log.read(seq + 1) is not None:
            seq += 1
        if seq < 0:
            return None
        data = self._log.read(seq)
        if data is None:  # a hint ahead of the records cannot happen: it is written after them
            return None
        return seq, LockRecord(**data)

    def expires_at(self, token: int, record: LockRecord) -> datetime:
        renewal = read_json(self._renewal(token))
        text = renewal["expires_at"] if renewal else record.expires_at
        assert text is not None
        return datetime.fromisoformat(text)

    def _renewal_text(self, token: int) -> str:
        renewal = read_json(self._renewal(token))
        return str(renewal["expires_at"]) if renewal else ""

    def holder(self, now: datetime | None = None) -> dict[str, Any] | None:
        """The current holder and its lease, for ``tidemark status``; None when free."""
        latest = self.latest()
        if latest is None or latest[1].kind != "acquire":
            return None
        token, record = latest
        expires = self.expires_at(token, record)
        now = now or datetime.now(UTC)
        return {
            "lock": self.name,
            "token": token,
            "holder": record.describe(),
            "since": record.at,
            "expires_at": expires.isoformat(),
            "expired": expires <= now,
            "process_gone": record.process_gone(),
        }

    def holds(self, token: int) -> bool:
        """Whether ``token`` is the live holder, by the rule ``acquire`` breaks leases with
        (seen once: no silence observed, so only a whole lease past its expiry counts)."""
        latest = self.latest()
        if latest is None or latest[0] != token or latest[1].kind != "acquire":
            return False
        record = latest[1]
        expires = self.expires_at(token, record)
        return not (_expired(record, expires, datetime.now(UTC), timedelta(0)) or record.process_gone())

    # -- taking and giving back ------------------------------------------------------------
    @contextmanager
    def hold(self, run_id: str, *, wait: float | None = None) -> Iterator[Lease]:
        lease = self.acquire(run_id, wait=wait)
        try:
            with lease.renewing():
                yield lease
        finally:
            lease.release()

    def acquire(self, run_id: str, *, wait: float | None = None) -> Lease:
        """Take the lock; a live holder is waited for up to ``wait`` seconds (default:
        :func:`lock_wait`), polling and logging, then ``BatchConflictError``."""
        budget = lock_wait(self.name) if wait is None else wait
        deadline = time.monotonic() + budget
        silence = _Silence()
        logged = 0.0
        while True:
            try:
                return self._try_acquire(run_id, silence)
            except _Held as held:
                left = deadline - time.monotonic()
                if left <= 0:
                    waited = f" after waiting {budget:.0f} s" if budget else ""
                    raise BatchConflictError(f"{held}{waited}; {held.advice}") from None
                if time.monotonic() - logged >= 30:
                    log.info(
                        "%s: waiting for the %s lock (%s), %.0f s left", self.table, self.name, held, left
                    )
                    logged = time.monotonic()
                time.sleep(min(POLL_S, left))

    def _try_acquire(self, run_id: str, silence: _Silence) -> Lease:
        now = datetime.now(UTC)
        duration = lease_duration()
        latest = self.latest()
        next_seq = 0
        if latest is not None:
            seq, record = latest
            next_seq = seq + 1
            if record.kind == "acquire":
                expires = self.expires_at(seq, record)
                silent_for = silence.observe(seq, self._renewal_text(seq))
                expired = _expired(record, expires, now, silent_for)
                gone = record.process_gone()
                if not (expired or gone):
                    raise _Held(
                        f"{self.table}: another job holds the {self.name} lock ({record.describe()}, lease "
                        f"until {expires.isoformat()})",
                        advice="this attempt did nothing and can be retried (a lock left by a lost host: "
                        f"tidemark unlock --table {self.table})",
                    )
                log.warning(
                    "%s: breaking the %s lock of %s (%s)",
                    self.table,
                    self.name,
                    record.describe(),
                    "its process is gone" if gone else "its lease expired",
                )
        me = LockRecord(
            "acquire",
            socket.gethostname(),
            os.getpid(),
            run_id,
            now.isoformat(),
            (now + duration).isoformat(),
            pid_namespace=pid_namespace(),
            started=process_start(os.getpid()),
        )
        if not self._log.create(next_seq, asdict(me)):  # a lost race is a held lock: waited for alike
            raise _Held(
                f"{self.table}: another job holds the {self.name} lock (it took it at the same moment)",
                advice="this attempt did nothing and can be retried",
            )
        replace_atomically(self._hint, {"seq": next_seq})
        return Lease(self, next_seq, me, duration)

    def release_by_operator(self, by: str) -> tuple[int, LockRecord] | None:
        """``tidemark unlock``: free the lock whoever holds it; returns what was released."""
        latest = self.latest()
        if latest is None or latest[1].kind != "acquire":
            return None
        seq, _ = latest
        self._append_release(seq + 1, by=by, run_id="unlock")
        return latest

    def _append_release(self, seq: int, *, by: str, run_id: str) -> bool:
        record = LockRecord(
            "release", socket.gethostname(), os.getpid(), run_id, datetime.now(UTC).isoformat(), by=by
        )
        if not self._log.create(seq, asdict(record)):
            return False
        replace_atomically(self._hint, {"seq": seq})
        return True

    def _renewal(self, token: int) -> Location:
        return self.root / f"{token:010d}.renew.json"


class Lease:
    """A held lock: its fencing token, renewal while held, the check before visible steps."""

    def __init__(self, lock: TableLock, token: int, record: LockRecord, duration: timedelta) -> None:
        self.lock = lock
        self.token = token
        self.record = record
        self.duration = duration
        self._stop = threading.Event()

    def check(self) -> None:
        """Raise ``LeaseLostError`` unless this lease is still the lock's current holder."""
        latest = self.lock.latest()
        if latest is None or latest[0] != self.token:
            now = f"now {latest[1].kind} by {latest[1].describe()}" if latest else "gone"
            raise LeaseLostError(
                f"{self.lock.table}: the {self.lock.name} lock (token {self.token}, run {self.record.run_id}) "
                f"was taken over ({now}): its lease expired while this job was paused; nothing more is "
                "made visible by this attempt, retry it"
            )

    def renew(self) -> None:
        expires = datetime.now(UTC) + self.duration
        replace_atomically(self.lock._renewal(self.token), {"expires_at": expires.isoformat()})

    @contextmanager
    def renewing(self) -> Iterator[None]:
        """Renew the lease every third of its duration while the block runs."""
        interval = max(1.0, self.duration.total_seconds() / 3)

        def loop() -> None:
            while not self._stop.wait(interval):
                try:
                    self.renew()
                except Exception:  # a renewal that fails ends in LeaseLostError at the next check
                    log.exception("%s: could not renew the %s lock", self.lock.table, self.lock.name)

        thread = threading.Thread(target=loop, name=f"lease-{self.lock.table}-{self.lock.name}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            self._stop.set()
            thread.join(timeout=5)

    def release(self) -> None:
        latest = self.lock.latest()
        if latest is not None and latest[0] == self.token:
            self.lock._append_release(self.token + 1, by="job", run_id=self.record.run_id)


def _expired(record: LockRecord, expires: datetime, now: datetime, silent_for: timedelta) -> bool:
    """Expired by this host's clock, and either silent for a whole lease as this process saw it
    or a whole lease past its expiry: clock skew up to a lease never breaks a live holder."""
    lease = record.lease()
    return expires <= now and (silent_for >= lease or expires + lease <= now)


class _Held(Exception):
    """The lock is held by a live holder (internal: ``acquire`` waits or raises)."""

    def __init__(self, message: str, *, advice: str) -> None:
        super().__init__(message)
        self.advice = advice


class _Silence:
    """How long a holder's lease has gone unrenewed, as this process observed it (its own
    monotonic clock: no other host's clock involved)."""

    def __init__(self) -> None:
        self._seen: tuple[int, str] | None = None
        self._since = time.monotonic()

    def observe(self, token: int, renewal: str) -> timedelta:
        if self._seen != (token, renewal):
            self._seen = (token, renewal)
            self._since = time.monotonic()
        return timedelta(seconds=time.monotonic() - self._since)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
