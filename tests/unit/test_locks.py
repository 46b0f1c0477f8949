"""Table locks as leases with fencing tokens (local state dir: create-only records)."""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.helpers.locks import plant
from tidemark.errors import BatchConflictError, LeaseLostError
from tidemark.state.locks import TableLock, pid_namespace, process_start

pytestmark = pytest.mark.unit


def test_a_live_holder_blocks_and_its_release_frees_the_lock(tmp_path: Path) -> None:
    lock = TableLock(tmp_path, "t")
    with lock.hold("r1") as lease:
        assert lock.holder() is not None and lock.holder()["token"] == lease.token  # type: ignore[index]
        with pytest.raises(BatchConflictError, match="another job holds the batch lock"):
            lock.acquire("r2", wait=0)
        lease.check()
    assert lock.holder() is None
    with lock.hold("r3") as again:
        assert again.token > lease.token


def test_a_dead_process_on_this_host_is_broken_at_once(tmp_path: Path) -> None:
    lock = TableLock(tmp_path, "t")
    plant(lock, 0, pid=2**22 + 17, expires_at="2999-01-01T00:00:00+00:00", pid_namespace=pid_namespace())
    with lock.hold("r1") as lease:
        assert lease.token == 1


def test_a_lock_of_another_host_is_broken_only_after_its_lease_expired(tmp_path: Path) -> None:
    lock = TableLock(tmp_path, "t")
    plant(lock, 0, host="elsewhere", pid=2**22 + 17, expires_at="2999-01-01T00:00:00+00:00")
    with pytest.raises(BatchConflictError, match="host elsewhere"):
        lock.acquire("r1", wait=0)
    plant(lock, 1, kind="release", host="elsewhere", expires_at=None)
    plant(lock, 2, host="elsewhere", pid=2**22 + 17, expires_at="2000-01-01T00:00:00+00:00")
    with lock.hold("r2") as taken:
        assert taken.token == 3


def test_two_breakers_racing_for_an_expired_lease_have_exactly_one_winner(tmp_path: Path) -> None:
    for attempt in range(10):
        lock = TableLock(tmp_path / str(attempt), "t")
        plant(lock, 0, host="elsewhere", expires_at="2000-01-01T00:00:00+00:00")
        barrier = threading.Barrier(4)
        won: list[int] = []
        lost: list[BaseException] = []

        def breaker(
            lock: TableLock = lock,
            barrier: threading.Barrier = barrier,
            won: list[int] = won,
            lost: list[BaseException] = lost,
        ) -> None:
            barrier.wait()
            try:
                won.append(lock.acquire("breaker", wait=0).token)
            except BatchConflictError as exc:
                lost.append(exc)

        threads = [threading.Thread(target=breaker) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert won == [1] and len(lost) == 3


def test_a_paused_holder_whose_lease_expired_cannot_publish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDEMARK_LOCK_LEASE_S", "0.001")
    lock = TableLock(tmp_path, "t")
    paused = lock.acquire("slow")  # no renewal: as if the job were frozen past its lease
    time.sleep(0.05)
    monkeypatch.setenv("TIDEMARK_LOCK_LEASE_S", "600")
    successor = lock.acquire("next")
    with pytest.raises(LeaseLostError, match="taken over"):
        paused.check()
    successor.check()
    paused.release()  # a lost lease releases nothing
    assert lock.holder()["token"] == successor.token  # type: ignore[index]


def test_an_operator_unlock_frees_a_lock_left_by_a_lost_host(tmp_path: Path) -> None:
    lock = TableLock(tmp_path, "t")
    plant(lock, 0, host="lost-host", expires_at="2999-01-01T00:00:00+00:00")
    released = lock.release_by_operator("ops")
    assert released is not None and released[1].host == "lost-host"
    assert lock.holder() is None
    with lock.hold("r1") as lease:
        assert lease.token == 2


def test_a_pid_is_judged_only_in_the_pid_namespace_it_was_recorded_in(tmp_path: Path) -> None:
    """Containers with a fixed hostname share the hostname, not the pid namespace: a pid
    recorded in another one says nothing about a process here, so the lease holds."""
    lock = TableLock(tmp_path, "t")
    elsewhere = "another-boot/pid:[4026531836]"
    plant(lock, 0, pid=2**22 + 17, expires_at="2999-01-01T00:00:00+00:00", pid_namespace=elsewhere)
    with pytest.raises(BatchConflictError, match="another job holds"):
        lock.acquire("r1", wait=0)
    plant(lock, 1, kind="release", expires_at=None)
    plant(lock, 2, pid=2**22 + 17, expires_at="2999-01-01T00:00:00+00:00")  # an older record: no namespace
    with pytest.raises(BatchConflictError, match="another job holds"):
        lock.acquire("r1", wait=0)


def test_a_reused_pid_does_not_keep_a_dead_holder_alive(tmp_path: Path) -> None:
    lock = TableLock(tmp_path, "t")
    assert process_start(os.getpid())
    here = pid_namespace()
    plant(lock, 0, pid=os.getpid(), started="1", expires_at="2999-01-01T00:00:00+00:00", pid_namespace=here)
    with lock.hold("r1") as lease:  # pid alive, but another process than the holder
        assert lease.token == 1


def test_the_batch_lock_is_waited_for_bounded_and_the_wait_named(tmp_path: Path) -> None:
    lock = TableLock(tmp_path, "t")
    holder = lock.acquire("first")
    threading.Timer(1.0, holder.release).start()
    started = time.monotonic()
    with lock.hold("second", wait=30) as lease:  # goes on once the first one released
        assert lease.token == holder.token + 2
    assert time.monotonic() - started >= 0.9
    with lock.hold("third"), pytest.raises(BatchConflictError, match="after waiting 1 s"):
        lock.acquire("fourth", wait=1)
    other = TableLock(tmp_path, "t", "rebuild-2026-11-22T10")
    with other.hold("a"), pytest.raises(BatchConflictError):
        other.acquire("b")  # an hour's rebuild lock is not waited for


def test_clock_skew_below_a_lease_does_not_break_a_live_holder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder's clock runs behind: its expiry is already past by this host's clock, but it
    renews. Only a lease silent for a whole lease as seen here, or a whole lease past its
    expiry, is broken."""

    monkeypatch.setenv("TIDEMARK_LOCK_LEASE_S", "600")
    lock = TableLock(tmp_path, "t")
    lease = timedelta(seconds=600)
    behind = datetime.now(UTC) - timedelta(seconds=60)
    plant(lock, 0, host="skewed", at=(behind - lease).isoformat(), expires_at=behind.isoformat())
    with pytest.raises(BatchConflictError, match="host skewed"):
        lock.acquire("r1", wait=0.5)
    long_past = datetime.now(UTC) - timedelta(seconds=601)
    plant(lock, 1, kind="release", host="skewed", expires_at=None)
    plant(lock, 2, host="skewed", at=(long_past - lease).isoformat(), expires_at=long_past.isoformat())
    with lock.hold("r2") as taken:
        assert taken.token == 3
