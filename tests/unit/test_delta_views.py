"""Pure parts of a Delta snapshot on an object store: the views' SQL over a version's files
and delta-rs's settings from the ``AWS_*`` environment."""

from __future__ import annotations

import pytest

from tests.helpers.records import snapshot_record as record
from tidemark.snapshot.delta_views import views_sql
from tidemark.tablefs import delta_storage_options

pytestmark = pytest.mark.unit

COLUMNS = [("order_id", "bigint"), ("status", "string")]


def test_a_view_reads_exactly_its_versions_files_cast_to_the_table_types_and_quoted() -> None:
    head = record("2026-11-22T11", "merge", files=("part-2.parquet", "odd`name.parquet"), table_version=2)
    base = record("base", "bootstrap", files=("part-0.parquet",), table_version=0)
    empty = record("it's", "merge", files=(), table_version=1)
    current, labels, left_out = views_sql("s3://lake/wh/orders_snapshot", COLUMNS, head, [head, empty, base])
    assert left_out == []
    assert current == (
        "SELECT CAST(`order_id` AS bigint) AS `order_id`, CAST(`status` AS string) AS `status`, "
        "'2026-11-22T11' AS `snapshot_dt` FROM parquet.`s3a://lake/wh/orders_snapshot/part-2.parquet` "
        "UNION ALL SELECT CAST(`order_id` AS bigint) AS `order_id`, CAST(`status` AS string) AS `status`, "
        "'2026-11-22T11' AS `snapshot_dt` FROM parquet.`s3a://lake/wh/orders_snapshot/odd``name.parquet`"
    )
    # every live label in Delta version order; an empty version has the columns and no rows
    branches = labels.split(" UNION ALL ")
    assert [b.split(" AS `snapshot_dt`")[0].rsplit(", ", 1)[1] for b in branches] == [
        "'base'",
        "'it\\'s'",
        "'2026-11-22T11'",
        "'2026-11-22T11'",
    ]
    assert branches[1].endswith("WHERE false") and "CAST(NULL AS bigint) AS `order_id`" in branches[1]


def test_the_labels_view_keeps_the_newest_labels_that_fit_in_the_metastores_limit() -> None:
    """200 labels of one file each pass the embedded Derby's 32,700 characters (a merge once
    failed after its commit there): the oldest are left out, named, and the head's stays."""
    labels = [
        record(
            f"2026-11-{1 + i // 24:02d}T{i % 24:02d}",
            "merge",
            files=(f"part-{i:05d}-0123456789abcdef.parquet",),
            table_version=i,
        )
        for i in range(200)
    ]
    current, text, left_out = views_sql("s3://lake/wh/orders_snapshot", COLUMNS, labels[-1], labels)
    kept = text.count(" AS `snapshot_dt`")
    assert len(text) <= 32_000 and 0 < kept < 200 and len(left_out) == 200 - kept
    assert left_out == [r.label for r in labels[: 200 - kept]]  # the oldest, in order
    assert f"'{labels[-1].label}' AS `snapshot_dt`" in text and "part-00199" in current
    one, text_one, none_left = views_sql("s3://x/t", COLUMNS, labels[0], labels[:1], limit=10)
    assert none_left == [] and text_one == one  # the head's label is never left out


def test_delta_rs_gets_the_aws_environment_and_conditional_puts_only_for_s3(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    assert delta_storage_options("/data/warehouse/orders_snapshot") == {}
    assert delta_storage_options("s3://lake/wh/orders_snapshot") == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_ACCESS_KEY_ID": "key",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_REGION": "eu-west-1",
        "aws_conditional_put": "etag",
        "AWS_S3_ALLOW_UNSAFE_RENAME": "false",
        "AWS_ALLOW_HTTP": "true",
    }
    monkeypatch.setenv("AWS_ENDPOINT_URL", "https://s3.example.com")
    monkeypatch.setenv("AWS_S3_ALLOW_UNSAFE_RENAME", "true")  # never taken over: the option wins
    options = delta_storage_options("s3a://lake/wh/orders_snapshot")
    assert "AWS_ALLOW_HTTP" not in options and options["AWS_S3_ALLOW_UNSAFE_RENAME"] == "false"
