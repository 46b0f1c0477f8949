"""State records through every backend: the OS, the Hadoop FileSystem API of Spark's JVM (here
on ``file://``; the same calls serve ``hdfs://``) and S3 conditional PUTs against a real S3
server (SeaweedFS); and a whole dump + seal cycle whose commit log, journal and lock go
through the Hadoop API, then through S3."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.tables import fresh_table, landed
from tidemark.errors import BatchConflictError, ConditionalWriteUnsupportedError
from tidemark.ingest.dump import run_dump
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.snapshot.delta import DELETE_FLAG, DeltaSnapshot
from tidemark.snapshot.snapshots import SnapshotRecord
from tidemark.state import storage
from tidemark.state.commitlog import CommitLog
from tidemark.state.journal import HourJournal
from tidemark.state.locks import TableLock
from tidemark.state.storage import HadoopStorage, LocalStorage, Location, S3Storage, Storage, storage_for
from tidemark.tablefs import Store, filesystem, parquet_files
from tidemark.tablefs import delta_storage_options as storage_options
from tidemark_dev.generator import create_topic, produce, records
from tidemark_dev.s3 import S3_SECRET_KEY

pytestmark = pytest.mark.integration

HOUR = datetime(2026, 11, 22, 10, tzinfo=UTC)


@pytest.fixture(params=["local", "hadoop", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Storage, Location]:
    """A storage backend and a fresh root location on it."""
    if request.param == "local":
        return LocalStorage(), Location(f"file://{tmp_path}")
    if request.param == "hadoop":
        spark = request.getfixturevalue("spark")
        jsc = spark.sparkContext._jsc
        return HadoopStorage(spark.sparkContext._jvm, jsc.hadoopConfiguration()), Location(
            f"file://{tmp_path}"
        )
    bucket = request.getfixturevalue("s3")
    root = Location(f"{bucket}/{uuid.uuid4().hex}")
    store = storage_for(root)
    assert isinstance(store, S3Storage)
    return store, root


def test_records_are_create_only_whole_and_replaceable(
    backend: tuple[Storage, Location], tmp_path: Path
) -> None:
    storage, root = backend
    record = root / "log" / "commits" / "0000000000.json"
    assert storage.read(record) is None
    assert storage.create_only(record, b'{"batch": 0}')
    assert not storage.create_only(record, b'{"batch": "second writer"}')
    assert storage.read(record) == b'{"batch": 0}'
    storage.replace(record, b'{"batch": 1}')
    storage.replace(record, b'{"batch": 2}')
    assert storage.read(record) == b'{"batch": 2}'
    storage.delete(record)
    assert storage.read(record) is None
    if root.scheme == "file":
        commits = tmp_path / "log" / "commits"
        assert [p.name for p in commits.iterdir() if not p.name.endswith(".crc")] == []  # no temp files


def test_concurrent_writers_of_one_record_exactly_one_wins(backend: tuple[Storage, Location]) -> None:
    storage, root = backend
    for round_ in range(5):
        record = root / "runs" / f"run-{round_}.json"
        payloads = [json.dumps({"w": i}).encode() for i in range(16)]
        with ThreadPoolExecutor(8) as pool:
            won = list(pool.map(storage.create_only, [record] * 16, payloads))
        assert won.count(True) == 1
        winner = won.index(True)
        assert json.loads(storage.read(record) or b"") == {"w": winner}


def test_location_keeps_uris_intact() -> None:
    loc = Location("hdfs://nn:8020/tidemark/state/") / "events" / "log"
    assert str(loc) == "hdfs://nn:8020/tidemark/state/events/log"
    assert loc.name == "log" and str(loc.parent) == "hdfs://nn:8020/tidemark/state/events"
    assert loc.scheme == "hdfs" and Location("/var/x").scheme == ""


@pytest.mark.parametrize("kind", ["hadoop", "s3"])
def test_dump_and_seal_with_state_off_the_local_disk(
    kind: str,
    request: pytest.FixtureRequest,
    spark: Any,
    broker: str,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config, settings = fresh_table(settings, tmp_path)
    if kind == "hadoop":
        monkeypatch.setenv("TIDEMARK_STORAGE", "hadoop")
        settings = replace(settings, state_uri=f"file://{tmp_path}/hadoop-state")
        assert isinstance(storage_for(settings.state_location), HadoopStorage)
    else:
        settings = replace(settings, state_uri=f"{request.getfixturevalue('s3')}/{uuid.uuid4().hex}/state")
        assert isinstance(storage_for(settings.state_location), S3Storage)
    create_topic(broker, config.source.topic, 1)
    delivered = produce(
        broker,
        config.source.topic,
        records(
            [(0, HOUR + timedelta(minutes=m)) for m in range(0, 60, 10)]
            + [(0, HOUR + timedelta(hours=1, minutes=30))]
        ),
    )
    first = run_dump(spark, config, settings, "run-1", HOUR + timedelta(hours=2))
    again = run_dump(spark, config, settings, "run-1", HOUR + timedelta(hours=2))
    assert (first.status, again.status) == ("committed", "already_committed")
    sealed = run_seal(spark, config, settings, "run-1")
    assert sealed.sealed == ["2026-11-22T10"]

    table = config.table
    state_files = {
        f"{table}/log/plans/0000000000.json",
        f"{table}/log/commits/0000000000.json",
        f"{table}/partitions/journal/0000000000.json",
    }
    for name in state_files:  # each record where the backend put it, whole
        assert json.loads(storage_for(settings.state_location).read(settings.state_location / name) or b"")
    if kind == "hadoop":
        assert any(p.name.endswith(".crc") for p in (tmp_path / "hadoop-state").rglob("*"))
    else:
        assert not (tmp_path / "state").exists() and not settings.home.joinpath("state", table).exists()
    assert CommitLog(settings.state_location, table).state().rows == 7
    assert [e.hour for e in HourJournal(settings.state_location, table).entries()] == ["2026-11-22T10"]
    rows, _, _ = landed(settings, table)
    assert sum(rows.values()) == 7 and Counter((p, o) for p, o, _ in delivered) == rows
    os.environ["TIDEMARK_LOCK_WAIT_S"] = "1"  # a dump waits for the batch lock: bounded here
    try:
        with TableLock(settings.state_location, table).hold("a"), pytest.raises(BatchConflictError):
            run_dump(spark, config, settings, "run-2", HOUR + timedelta(hours=2))
    finally:
        del os.environ["TIDEMARK_LOCK_WAIT_S"]


def test_table_files_read_through_pyarrow_fs_on_s3_and_local(spark: Any, s3: str, tmp_path: Path) -> None:
    """``tidemark.tablefs``: the same rows from S3 and from the local disk through the Spark
    data source over pyarrow.fs as Spark's own reader gives for the local files; hidden
    (``_``/``.``) files and directories are not table files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tidemark.sparkfiles import read_files

    prefix = f"{s3}/tablefs-{uuid.uuid4().hex[:8]}"
    local = tmp_path / "table"
    names = ["dt=2026-11-22/hr=10/part-00000.parquet", "dt=2026-11-22/hr=11/part-00000.parquet"]
    hidden = ["_sealing/dt=2026-11-22/hr=12/part-00000.parquet", "dt=2026-11-22/hr=10/.part-1.parquet"]
    for i, name in enumerate(names + hidden):
        table = pa.table(
            {"id": pa.array([i * 10 + n for n in range(3)], pa.int64()), "app": ["web", "ios", "x"]}
        )
        (local / name).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, local / name)
        fs, path = filesystem(f"{prefix}/{name}")
        with fs.open_output_stream(path) as out:
            pq.write_table(table, out)

    assert parquet_files(f"{prefix}") == [f"{prefix}/{n}" for n in names]
    assert parquet_files(str(local)) == [str(local / n) for n in names]
    assert parquet_files(f"{prefix}/nothing-here") == []
    ddl = "id bigint, app string"
    expected = sorted(
        (r.id, r.app) for r in spark.read.schema(ddl).parquet(*(str(local / n) for n in names)).collect()
    )
    assert len(expected) == 6
    for files in (parquet_files(prefix), parquet_files(str(local))):
        frame = read_files(spark, files, ddl)
        assert frame.rdd.getNumPartitions() == 2  # one Spark task per file
        assert sorted((r.id, r.app) for r in frame.collect()) == expected
        plan = frame._jdf.queryExecution().toString()  # the executors' S3 keys are redacted
        assert S3_SECRET_KEY not in plan


def test_a_create_whose_response_was_lost_and_retried_by_boto3_is_reported_as_written(s3: str) -> None:
    """The connection drops after SeaweedFS stored the record: boto3 retries the PUT, which gets
    412. That is this writer's own record, not a lost race (a lock held by nobody otherwise)."""
    import boto3

    storage = S3Storage(boto3.client("s3"))
    dropped: list[int] = []

    def drop_first_response(attempts: int, response: Any, **_: Any) -> float | None:
        if attempts == 1 and response is not None and response[0].status_code == 200:
            dropped.append(attempts)
            return 0.0  # as botocore does for a connection reset: retry at once
        return None

    root = Location(f"{s3}/{uuid.uuid4().hex}")
    mine = root / "locks" / "batch" / "0000000001.json"
    storage.require_conditional("test", mine)  # the bucket's probe first (its PUTs are not the test's)
    storage.client.meta.events.register("needs-retry.s3.PutObject", drop_first_response)
    assert storage.create_only(mine, b'{"token": 1, "run": "mine"}')
    assert dropped == [1]  # the retry happened, and got 412
    assert storage.read(mine) == b'{"token": 1, "run": "mine"}'
    theirs = root / "locks" / "batch" / "0000000002.json"
    assert S3Storage(boto3.client("s3")).create_only(theirs, b'{"token": 2, "run": "theirs"}')
    assert not storage.create_only(theirs, b'{"token": 2, "run": "mine"}')  # a real lost race


def test_commits_on_s3_are_conditional_and_a_store_ignoring_the_condition_is_refused(s3: str) -> None:
    """Six writers that loaded one Delta version race to commit the next on SeaweedFS with
    tidemark's delta-rs settings: exactly one wins. The probe passes on this store, leaves no
    object, and refuses the same store once its PUTs lose If-None-Match on the way (a store
    that ignores the condition), naming the table or record and the location: for a Delta
    commit and for a state record alike."""
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, write_deltalake
    from deltalake.exceptions import CommitFailedError

    uri = f"{s3}/delta-{uuid.uuid4().hex[:8]}/orders_snapshot"
    options = storage_options(uri)
    assert options["aws_conditional_put"] == "etag" and options["AWS_S3_ALLOW_UNSAFE_RENAME"] == "false"
    write_deltalake(uri, pa.table({"k": [0]}), storage_options=options)
    loaded = [DeltaTable(uri, storage_options=options) for _ in range(6)]

    def commit(i: int) -> bool:
        try:
            write_deltalake(
                loaded[i],
                pa.table({"k": [i + 1]}),
                mode="append",
                commit_properties=CommitProperties(max_commit_retries=0),
            )
        except CommitFailedError:  # the version is taken
            return False
        return True

    with ThreadPoolExecutor(6) as pool:
        won = list(pool.map(commit, range(6)))
    assert sum(won) == 1
    assert DeltaTable(uri, storage_options=options).version() == 1

    shared = storage._s3_storage()
    shared._honoured.clear()
    storage.require_conditional_create("orders", uri)
    bucket_root = s3.rstrip("/") + "/"
    probes = Store.of(bucket_root.rstrip("/")).all_files(uri.removeprefix(bucket_root).rsplit("/", 1)[0])
    assert not [f for f in probes if "_tidemark_probes" in f]

    # the same store once its PUTs lose the condition: a Delta commit and a state record
    # (a commit record of the commit log) are refused, never written as if they were created
    with ignoring_the_condition():
        with pytest.raises(ConditionalWriteUnsupportedError, match="orders: the object store of s3://"):
            storage.require_conditional_create("orders", uri)
        record = Location(f"{s3}/{uuid.uuid4().hex}/state/events/commits/0000000000.json")
        with pytest.raises(ConditionalWriteUnsupportedError, match="state record s3://"):
            storage.create_only(record, {"batch_id": 0})
        assert storage.read_json(record) is None


@contextmanager
def ignoring_the_condition() -> Iterator[None]:
    """The test's S3 client as a store that ignores If-None-Match: its PUTs lose the header on
    the way; every bucket is probed again."""

    shared = storage._s3_storage()

    def drop_condition(request: Any, **_: Any) -> None:
        if "If-None-Match" in request.headers:
            del request.headers["If-None-Match"]

    shared.client.meta.events.register("before-sign.s3.PutObject", drop_condition)
    shared._honoured.clear()
    try:
        yield
    finally:
        shared.client.meta.events.unregister("before-sign.s3.PutObject", drop_condition)
        shared._honoured.clear()


def test_a_delta_merge_on_s3_probes_the_store_and_refuses_one_ignoring_the_condition(
    spark: Any, s3: str, settings: Settings, tmp_path: Path
) -> None:
    """Not only the bootstrap: a MERGE into a Delta snapshot on S3 probes its bucket first (in a
    process whose state records live elsewhere, nothing else would), and on a store whose PUTs
    lose If-None-Match it commits nothing."""
    import pyarrow as pa
    from deltalake import write_deltalake

    config, own = fresh_table(settings, tmp_path, template="orders", cdc__snapshot_format="delta")
    own = replace(own, warehouse=f"{s3}/wh-{uuid.uuid4().hex[:8]}")
    delta = DeltaSnapshot(spark, config, own)
    write_deltalake(delta.uri, delta.arrow_schema().empty_table(), storage_options=delta.storage_options)
    row = {name: [None] for name in delta.names} | {
        config.primary_key[0]: [1],
        config.cdc.version_field if config.cdc else "": [1],
        DELETE_FLAG: [False],
    }
    source = spark.createDataFrame(pa.table(row, schema=delta.arrow_schema(with_flag=True)))
    pending = SnapshotRecord(1, config.table, "h1", "merge", 1, "run-1", "", "", -1, (), "")

    with (
        ignoring_the_condition(),
        pytest.raises(ConditionalWriteUnsupportedError, match=f"{config.table}: the object store"),
    ):
        delta.merge(source, pending, only_newer=True)
    assert delta.table().version() == 0
    merged = delta.merge(source, pending, only_newer=True)  # the honest store: probed, then merged
    assert merged.table_version == 1 and delta.table().to_pyarrow_table().num_rows == 1


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_stores_children_are_the_directories_right_under_one(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """What ``drop_staging`` lists under a Delta table: its top-level directories (one
    delimited listing on S3), never the data files of every version below them."""

    root = str(tmp_path) if where == "local" else f"{request.getfixturevalue('s3')}/{uuid.uuid4().hex[:8]}"
    store = Store.of(root)
    for name in ("t/snapshot_dt=a/_versions/s1/part-0.parquet", "t/_delta_log/0.json", "t/part-1.parquet"):
        store.write_json(name, {})
    assert store.children("t") == ["_delta_log", "snapshot_dt=a"]
    assert store.children("t/snapshot_dt=a") == ["_versions"]
    assert store.children("missing") == []


@pytest.mark.parametrize("backend", ["hadoop"], indirect=True)
def test_a_record_beside_another_writers_checksum_file_reads_whole(backend: tuple[Storage, Location]) -> None:
    """Hadoop's local checksummed file system renames a record's ``.crc`` apart from the record:
    a lost create-only race once left another writer's checksum beside the winner's record
    (a CI run's ChecksumException; create-only records on local disk are now linked by the OS,
    without a checksum). A record beside a stale checksum is still whole, and read."""
    storage, root = backend
    first, second = root / "runs" / "a.json", root / "runs" / "b.json"
    assert storage.create_only(first, b'{"w": 1}')
    storage.replace(second, b'{"w": 22}')  # through Hadoop's checksummed file system: a .crc
    folder = Path(root.uri.removeprefix("file://")) / "runs"
    shutil.copyfile(folder / ".b.json.crc", folder / ".a.json.crc")
    assert storage.read(first) == b'{"w": 1}'


def test_a_file_taken_into_a_version_on_s3_is_a_server_side_copy(s3: str) -> None:
    """``Store.link`` on an object store (the seal adopting a batch file): the same bytes under
    the new key, over what a crashed attempt left there, the source untouched."""
    store = Store.of(f"{s3}/link-{uuid.uuid4().hex[:8]}")
    with store.fs.open_output_stream(store.path("t/_open/h/b1.parquet")) as out:
        out.write(b"PAR1 the batch file's bytes PAR1")
    with store.fs.open_output_stream(store.path("t/h/_versions/v1/part-00000.parquet")) as out:
        out.write(b"a crashed attempt's")
    store.link("t/_open/h/b1.parquet", "t/h/_versions/v1/part-00000.parquet")
    for key in ("t/_open/h/b1.parquet", "t/h/_versions/v1/part-00000.parquet"):
        with store.fs.open_input_file(store.path(key)) as handle:
            assert handle.read() == b"PAR1 the batch file's bytes PAR1"
