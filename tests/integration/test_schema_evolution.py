"""A schema change mid-stream, on the real broker, Spark and the Derby metastore: hour 10 is
sealed under schema v1; the YAML then widens three columns and adds one; hour 11 (batches of
both versions) is sealed under v2. One query reads both hours (old rows: the new column null,
narrow values promoted), the journal says which version wrote each hour, a rebuild of hour 10
reproduces it under v1 (a record whose field the new column would now refuse stays a row),
and an incompatible change is refused by the job and by the DAG file's import."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.tables import at, fresh_table
from tidemark.airflow.dags import all_dags, raise_table_problems
from tidemark.config import TableConfig, load_table_file
from tidemark.errors import SchemaEvolutionError, StaleConfigError, TableFilesError
from tidemark.evolution import SchemaHistory
from tidemark.ingest.dump import run_dump
from tidemark.seal.rebuild import run_rebuild
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.state.journal import HourJournal
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.integration

V1 = {"user_id": "int", "amount": "decimal(5,2)"}


def rewrite(config: TableConfig, settings: Settings, **schema: str | None) -> TableConfig:
    """The table's YAML with columns changed (None: dropped), loaded again."""
    path = settings.conf_dir / f"{config.table}.yaml"
    data = yaml.safe_load(path.read_text())
    for name, spec in schema.items():
        if spec is None:
            data["schema"].pop(name)
        else:
            data["schema"][name] = spec
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_table_file(path)


def rows_by_hour(spark: Any, table: str) -> dict[str, list[tuple[Any, ...]]]:
    spark.catalog.refreshTable(table)
    frame = spark.sql(f"SELECT hr, event_id, user_id, amount, score FROM `{table}` ORDER BY event_id")
    out: dict[str, list[tuple[Any, ...]]] = {}
    for row in frame.collect():
        out.setdefault(row["hr"], []).append(tuple(row)[1:])
    return out


def test_old_and_new_hours_read_together_after_a_compatible_change(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = fresh_table(
        settings, tmp_path, schema__user_id=V1["user_id"], schema__amount=V1["amount"]
    )
    topic = config.source.topic
    create_topic(broker, topic, 2)
    # v1 ignores "score"; as a double (v2) "n/a" would be a type mismatch
    produce(broker, topic, records([(p, at(10, m), {"score": "n/a"}) for p in (0, 1) for m in (5, 25, 45)]))
    run_dump(spark, config, settings, "run-1", at(11))
    produce(broker, topic, records([(0, at(11, 20)), (1, at(11, 25))], prefix="b"))
    run_dump(spark, config, settings, "run-2", at(11, 40))
    run_seal(spark, config, settings, "run-2")  # ready 11:10 -> hour 10 sealed under v1
    journal = HourJournal(settings.state_location, config.table)
    assert journal.state().hours["2026-11-22T10"].schema_version == 1
    before = sorted(tuple(r) for r in spark.sql(f"SELECT * FROM `{config.table}` WHERE hr = '10'").collect())

    # v2: widen int -> bigint and decimal(5,2) -> decimal(12,2), add a nullable double
    config = rewrite(config, settings, user_id="bigint", amount="decimal(12,2)", score="double")
    big = {"user_id": 5_000_000_000, "amount": "1234567.89", "score": 2.5}
    produce(
        broker,
        topic,
        records([(0, at(11, 50), big), (1, at(11, 55), big), (0, at(12, 30)), (1, at(12, 30))], prefix="c"),
    )
    run_dump(spark, config, settings, "run-3", at(12, 40))
    run_seal(spark, config, settings, "run-3")  # ready 12:20 -> hour 11 sealed: v1 and v2 batches

    history = SchemaHistory(settings.state_location, config.table)
    assert [v.version for v in history.versions()] == [1, 2]
    assert history.versions()[1].changes == (
        "column 'user_id': widened int -> bigint",
        "column 'amount': widened decimal(5,2) -> decimal(12,2)",
        "column 'score' added (double); old hours read it as null",
    )
    hours = journal.state().hours
    assert (hours["2026-11-22T10"].schema_version, hours["2026-11-22T11"].schema_version) == (1, 2)
    schema = {f.name: f.dataType.simpleString() for f in spark.table(config.table).schema.fields}
    assert (schema["user_id"], schema["amount"], schema["score"]) == ("bigint", "decimal(12,2)", "double")

    both = rows_by_hour(spark, config.table)
    assert sorted(both["10"]) == sorted(
        (f"r-{i}", i, Decimal("1.00"), None) for i in range(6)
    )  # v1 files: promoted, score null
    assert sorted(both["11"]) == [
        ("b-0", 0, Decimal("1.00"), None),  # a v1 batch file compacted under v2
        ("b-1", 1, Decimal("1.00"), None),
        ("c-0", 5_000_000_000, Decimal("1234567.89"), 2.5),
        ("c-1", 5_000_000_000, Decimal("1234567.89"), 2.5),
    ]

    # A rebuild of hour 10 classifies its batch under v1 ("n/a" stays a row) and writes v1.
    (done,) = run_rebuild(spark, config, settings, "rebuild-10", ["2026-11-22T10"]).hours
    assert (done["status"], done["rows"]) == ("rebuilt", 6)
    assert journal.state().hours["2026-11-22T10"].schema_version == 1
    spark.catalog.refreshTable(config.table)
    after = spark.sql(f"SELECT * FROM `{config.table}` WHERE hr = '10'").drop("score").collect()
    assert sorted(tuple(r) for r in after) == before

    # Incompatible: user_id narrowed back and score dropped. The job refuses before reading.
    refused = rewrite(config, settings, user_id="int", score=None)
    with pytest.raises(SchemaEvolutionError) as info:
        run_dump(spark, refused, settings, "run-4", at(13))
    text = str(info.value)
    assert config.table in text and "'user_id': bigint -> int is not a widening" in text
    assert "column 'score' (double) is gone" in text
    assert len(history.versions()) == 2

    # the table disappears from Airflow alone; the errors DAG file says why, naming the column
    assert not [d for d in all_dags(settings) if d.endswith(config.table)]
    with pytest.raises(TableFilesError, match=r"'user_id': bigint -> int is not a widening"):
        raise_table_problems(settings)


def test_a_seal_with_an_older_yaml_refuses_before_it_writes_and_loses_no_new_column(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    """A rolling deploy adds column ``score``: a dump on a worker with the new YAML commits
    rows with it, then a seal on a worker still holding the old YAML runs. It must refuse
    with StaleConfigError before compacting or registering anything (else the hour is sealed
    without ``score`` and a retry reuses that compaction), and the seal with the new YAML
    then keeps every ``score``."""

    old, settings = fresh_table(
        settings, tmp_path, schema__user_id=V1["user_id"], schema__amount=V1["amount"]
    )
    topic = old.source.topic
    create_topic(broker, topic, 2)
    produce(broker, topic, records([(p, at(10, 5)) for p in (0, 1)]))
    run_dump(spark, old, settings, "run-1", at(10, 30))
    new = rewrite(old, settings, score="double")
    produce(broker, topic, records([(p, at(10, 40), {"score": 1.5}) for p in (0, 1)], prefix="s"))
    produce(broker, topic, records([(p, at(11, 30)) for p in (0, 1)], prefix="n"))
    run_dump(spark, new, settings, "run-2", at(11, 40))

    with pytest.raises(StaleConfigError) as info:
        run_seal(spark, old, settings, "seal-old-worker")
    assert "schema version 1" in str(info.value) and "version 2" in str(info.value)
    assert HourJournal(settings.state_location, old.table).state().hours == {}
    assert not spark.catalog.tableExists(old.table)  # nothing registered
    hour_dir = Path(settings.warehouse) / old.table
    assert not (hour_dir / "dt=2026-11-22" / "hr=10").exists()
    assert not (hour_dir / "_sealing").exists()

    run_seal(spark, new, settings, "seal-new-worker")
    rows = spark.sql(f"SELECT event_id, score FROM `{new.table}` WHERE hr = '10' ORDER BY event_id").collect()
    assert [tuple(r) for r in rows] == [("r-0", None), ("r-1", None), ("s-0", 1.5), ("s-1", 1.5)]
