"""What the stream tests share: the kill points of a micro-batch, and how the query's
checkpoint and the commit log are read back (local disk or S3)."""

from __future__ import annotations

from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog
from tidemark.stream.status import checkpoint_location
from tidemark.tablefs import Store

# a micro-batch's kill points, in the order of a micro-batch (the seal's inside)
KILLS = (
    "stream_epoch_start",
    "before_commit_record",
    "after_commit_record",
    "mid_compaction",
    "stream_epoch_end",
)
STREAM_ARGS = ("--trigger-interval", "1s")


def restart_words(point: str) -> str:
    """What a stream restarted after a kill at ``point`` logs about its checkpoint."""
    if point in ("stream_epoch_start", "before_commit_record"):
        return "in the checkpoint, not in the commit log"
    return "but not recorded as done by Spark"


def tiled(settings: Settings, table: str) -> dict[int, int]:
    """Assert the committed batches' ranges follow each other exactly per MQ partition (no
    offset read twice, none skipped); return the ends."""
    ends: dict[int, int] = {}
    for commit in CommitLog(settings.state_location, table).iter_commits():
        for r in commit.ranges:
            assert r.start == ends.get(r.mq_partition, r.start), (commit.batch_id, commit.run_id, r)
            ends[r.mq_partition] = r.end
    return ends


def checkpoint_batches(settings: Settings, table: str) -> tuple[set[int], set[int]]:
    """The micro-batches of the query's offset log and those Spark recorded as done."""
    store = Store.of(checkpoint_location(settings, table))
    return (
        {int(f.rsplit("/", 1)[-1]) for f in store.all_files("offsets") if f.rsplit("/", 1)[-1].isdigit()},
        {int(f.rsplit("/", 1)[-1]) for f in store.all_files("commits") if f.rsplit("/", 1)[-1].isdigit()},
    )


def assert_the_kill_stands(settings: Settings, table: str, point: str, commits_before: int) -> None:
    """After a stream killed at ``point``: Spark did not record the micro-batch as done, and
    the commit log has it exactly when the kill came after its commit record."""
    started, done = checkpoint_batches(settings, table)
    assert max(started) not in done, f"{point}: Spark recorded the killed micro-batch as done"
    commits = list(CommitLog(settings.state_location, table).iter_commits())
    if point in ("stream_epoch_start", "before_commit_record"):  # the checkpoint has it, the log not
        assert len(commits) == commits_before, point
    else:  # the log has it, the checkpoint not
        assert commits[-1].run_id.endswith(f"-{max(started)}"), (point, commits[-1].run_id)
