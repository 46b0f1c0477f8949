"""Pointing an hour's partitions at a new version, on the real (Derby) metastore: with a
data-derived column an hour is several partitions, one per value; the values the new version
keeps move in one ``alter_partitions`` call, new values are added and vanished ones dropped;
other hours are not touched. The same call serves object stores (``s3a://`` locations) and
snapshots, whose one partition per label moves the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.tables import fresh_table
from tidemark.errors import InjectedFault
from tidemark.seal.metastore import HiveClientMetastore, Metastore
from tidemark.settings import Settings

pytestmark = pytest.mark.integration


def locations(spark: Any, metastore: Metastore, table: str) -> dict[str, str]:
    """Partition name -> location, from the catalog."""
    names = metastore.partition_names(table)
    found = {}
    for name in names:
        spec = ", ".join(f"{k}='{v}'" for k, v in (part.split("=", 1) for part in name.split("/")))
        row = spark.sql(f"DESCRIBE FORMATTED `{table}` PARTITION ({spec})").collect()
        found[name] = next(r.data_type for r in row if r.col_name == "Location")
    return found


def test_an_hours_value_partitions_switch_together_new_values_added_vanished_ones_dropped(
    spark: Any, settings: Settings, tmp_path: Path
) -> None:
    config, _ = fresh_table(settings, tmp_path, partitioning__columns=["app"])
    table, metastore = config.table, HiveClientMetastore(spark, config)
    metastore.ensure_table(table, tmp_path / "table")
    hour = {"dt": "2026-11-22", "hr": "10"}

    def version(name: str, apps: list[str], spec: dict[str, str] = hour) -> list[tuple[dict[str, str], str]]:
        return [({**spec, "app": a}, f"file://{tmp_path}/{name}/app={a}") for a in apps]

    other = {"dt": "2026-11-22", "hr": "11"}
    metastore.switch_partitions(table, other, version("h11-v1", ["web"], other))
    metastore.switch_partitions(table, hour, version("v1", ["web", "ios"]))
    before = locations(spark, metastore, table)
    hour_11 = "dt=2026-11-22/hr=11/app=web"
    assert sorted(before) == [*(f"dt=2026-11-22/hr=10/app={a}" for a in ("ios", "web")), hour_11]
    assert all("/v1/" in loc for name, loc in before.items() if "hr=10" in name)

    metastore.switch_partitions(table, hour, version("v2", ["web", "android"]))
    after = locations(spark, metastore, table)
    assert sorted(after) == [*(f"dt=2026-11-22/hr=10/app={a}" for a in ("android", "web")), hour_11]
    assert after["dt=2026-11-22/hr=10/app=web"].endswith("/v2/app=web")
    assert after["dt=2026-11-22/hr=10/app=android"].endswith("/v2/app=android")
    assert after[hour_11] == before[hour_11]
    # the same call again changes nothing (a retry after a kill)
    metastore.switch_partitions(table, hour, version("v2", ["web", "android"]))
    assert locations(spark, metastore, table) == after


def tagged_versions(
    spark: Any, settings: Settings, tmp_path: Path
) -> tuple[Any, HiveClientMetastore, Any, Any]:
    """A table partitioned by ``app`` and (config, metastore, version, seen): ``version(name,
    apps)`` writes one row per app tagged with the version's number in ``_mq_offset`` and
    returns its partitions of hour 10; ``seen()`` is (app, version) of every row readers see."""
    from pyspark.sql import functions as F

    config, _ = fresh_table(settings, tmp_path, partitioning__columns=["app"])
    table, metastore = config.table, HiveClientMetastore(spark, config)
    metastore.ensure_table(table, tmp_path / "table")
    columns = [f for f in spark.table(table).schema if f.name not in ("dt", "hr", "app")]

    def version(name: str, apps: list[str]) -> list[tuple[dict[str, str], str]]:
        for app in apps:
            spark.range(1).select(
                *(
                    (F.lit(int(name[1:])) if f.name == "_mq_offset" else F.lit(None))
                    .cast(f.dataType)
                    .alias(f.name)
                    for f in columns
                )
            ).write.parquet(str(tmp_path / name / f"app={app}"))
        return [({**HOUR_10, "app": a}, f"file://{tmp_path}/{name}/app={a}") for a in apps]

    def seen() -> list[tuple[str, int]]:
        spark.catalog.refreshTable(table)
        return sorted((r.app, r._mq_offset) for r in spark.table(table).select("app", "_mq_offset").collect())

    return config, metastore, version, seen


HOUR_10 = {"dt": "2026-11-22", "hr": "10"}


def test_a_reader_between_adding_a_new_value_and_the_move_sees_the_old_version_only(
    spark: Any, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """v2 of an hour brings a value v1 lacked (``android``). Until the one move, its partition
    points where no file is: a query meanwhile (here: the switch killed right there) reads v1
    whole, not v1 plus v2's android rows; the retry finishes the switch."""
    config, metastore, version, seen = tagged_versions(spark, settings, tmp_path)
    table, hour = config.table, HOUR_10
    metastore.switch_partitions(table, hour, version("v1", ["web", "ios"]))
    assert seen() == [("ios", 1), ("web", 1)]
    v2 = version("v2", ["web", "ios", "android"])
    monkeypatch.setenv("TIDEMARK_FAIL_AT", "mid_partition_switch")
    monkeypatch.setenv("TIDEMARK_FAIL_MODE", "raise")
    with pytest.raises(InjectedFault):
        metastore.switch_partitions(table, hour, v2)
    assert seen() == [("ios", 1), ("web", 1)]  # v1 whole: no android row of v2 beside it
    monkeypatch.delenv("TIDEMARK_FAIL_AT")
    metastore.switch_partitions(table, hour, v2)
    assert seen() == [("android", 2), ("ios", 2), ("web", 2)]


def test_a_value_the_new_version_lacks_shows_no_old_rows_when_the_switch_is_killed_before_its_drop(
    spark: Any, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """v2 of an hour no longer has ``ios``. Its partition is emptied in the same one move that
    points ``web`` at v2, and dropped after: a kill between the two leaves v2 whole, never v2's
    web beside v1's ios rows."""
    config, metastore, version, seen = tagged_versions(spark, settings, tmp_path)
    table, hour = config.table, HOUR_10
    metastore.switch_partitions(table, hour, version("v1", ["web", "ios"]))
    v2 = version("v2", ["web"])
    monkeypatch.setenv("TIDEMARK_FAIL_AT", "before_dropping_gone_values")
    monkeypatch.setenv("TIDEMARK_FAIL_MODE", "raise")
    with pytest.raises(InjectedFault):
        metastore.switch_partitions(table, hour, v2)
    assert seen() == [("web", 2)]  # no ios row of v1 beside v2
    monkeypatch.delenv("TIDEMARK_FAIL_AT")
    metastore.switch_partitions(table, hour, v2)  # the retry drops it
    assert metastore.partition_names(table) == ["dt=2026-11-22/hr=10/app=web"] and seen() == [("web", 2)]
