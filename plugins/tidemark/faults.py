"""Crash points for fault-injection tests: ``TIDEMARK_FAIL_AT=<point>`` kills the job there.

The process exits at once (no cleanup, no finally blocks), like a lost executor or a killed
driver, so a retry with the same run id must recover from exactly that state. With
``TIDEMARK_FAIL_MODE=raise`` it raises InjectedFault instead (for tasks that run in-process);
with ``pause`` the process stops there (SIGSTOP) and goes on when sent SIGCONT: a zombie whose
lease expires while it is frozen.
"""

from __future__ import annotations

import logging
import os
import signal

from tidemark.errors import InjectedFault

log = logging.getLogger(__name__)

DUMP_POINTS = (
    "after_plan",
    "mid_read",
    "after_staging",
    "mid_move",
    "before_commit_record",
    "after_commit_record",
    "before_group_commit",
)
SEAL_POINTS = ("mid_compaction", "after_registration")
# before the events are added, and after (the task dies before Airflow records them: its
# retry or the next run emits them, once; the journal's announced pointer moves only when a
# later run sees them in Airflow)
ANNOUNCE_POINTS = ("before_announce", "after_announce")
REBUILD_POINTS = ("mid_rebuild", "before_swap", "after_swap")
SNAPSHOT_POINTS = ("after_alignment", "after_snapshot_staging", "after_snapshot_swap")
# The stream's micro-batch: its offsets are in the checkpoint, nothing planned yet; its
# commit record and seal are written, Spark has not recorded the micro-batch as done
STREAM_POINTS = ("stream_epoch_start", "stream_epoch_end")
# Between the protocol's other steps: recovered by the retry, tested in-process (raise mode)
PROTOCOL_POINTS = (
    "after_plan_written",  # plan -> run binding
    "after_success",  # _SUCCESS -> journal entry
    "after_journal_entry",  # journal entry -> cleanup of the hour's batch files
    "after_amend_files",  # amend's file moves -> registration and its _SUCCESS
    "after_amend_moves",  # amend's _SUCCESS -> its journal entry
    "after_amend_entry",  # amend's journal entry -> the folded late files deleted
    "after_late_registration",  # late partitions registered -> registry
)
# An hour's partitions of values new to it added (pointing where no file is) -> the one move
# of every value (test_metastore_switch)
METASTORE_POINTS = ("mid_partition_switch", "before_dropping_gone_values")
# A replay's commit -> its replayed dirty records hidden -> its own files visible (test_replay)
REPLAY_POINTS = ("mid_retire",)
# Retention: its journal entry -> the audit record and unregistering; one partition of the
# dropped hours unregistered -> the others; a drop's files deleted -> its pointer (test_retention)
RETENTION_POINTS = ("after_retention_entry", "mid_retention_unregister", "before_retention_pointer")
# The dirty records' and the late table's horizons recorded -> their audit, unregistering and
# deletion (test_retention)
SIDE_RETENTION_POINTS = ("after_dirty_horizon", "after_late_horizon")
# Between a commit record and the commit log's checkpoint (every CHECKPOINT_EVERY batches)
STATE_POINTS = ("before_checkpoint",)
# Faults of monitoring-only steps, which must never fail the job (used with TIDEMARK_FAIL_MODE=raise)
MONITORING_POINTS = ("group_commit", "snapshot_views")
POINTS = (
    DUMP_POINTS
    + STREAM_POINTS
    + SEAL_POINTS
    + ANNOUNCE_POINTS
    + REBUILD_POINTS
    + SNAPSHOT_POINTS
    + PROTOCOL_POINTS
    + REPLAY_POINTS
    + METASTORE_POINTS
    + RETENTION_POINTS
    + SIDE_RETENTION_POINTS
    + STATE_POINTS
    + MONITORING_POINTS
)
EXIT_CODE = 86


def crash_point(point: str) -> None:
    """Exit the process if ``TIDEMARK_FAIL_AT`` names ``point``."""
    assert point in POINTS, point
    if os.environ.get("TIDEMARK_FAIL_AT") == point:
        mode = os.environ.get("TIDEMARK_FAIL_MODE")
        if mode == "raise":  # for in-process tasks (dag.test)
            raise InjectedFault(f"TIDEMARK_FAIL_AT={point}: injected failure")
        if mode == "pause":  # a zombie: frozen here (a GC pause, a suspended VM) until SIGCONT
            log.error("TIDEMARK_FAIL_AT=%s: pausing here until SIGCONT", point)
            os.kill(os.getpid(), signal.SIGSTOP)
            return
        log.error("TIDEMARK_FAIL_AT=%s: simulating a crash here", point)
        logging.shutdown()
        os._exit(EXIT_CODE)
