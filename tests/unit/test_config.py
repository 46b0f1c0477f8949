from __future__ import annotations

import copy
from dataclasses import replace as replace_settings
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tidemark.catalog import load_table, load_tables
from tidemark.config import effective_config, load_table_file, parse_table
from tidemark.errors import ConfigError
from tidemark.masking import mask_text, masked
from tidemark.settings import DEFAULT_BOOTSTRAP, Settings
from tidemark.spark import (
    class_archive,
    driver_class_path,
    driver_java_options,
    session_conf,
    with_class_archive,
)

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
MINIMAL: dict[str, Any] = {
    "table": "clicks",
    "source": {"topic": "clicks"},
    "schema": {"id": "string not null", "ts": "timestamp not null", "app": "string"},
    "event_time": {"field": "ts"},
}


def write(tmp_path: Path, data: dict[str, Any], name: str = "clicks") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def problems_of(tmp_path: Path, data: dict[str, Any]) -> tuple[str, list[str]]:
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        load_table_file(path)
    assert str(path) in str(info.value)  # the file is named
    return str(info.value), info.value.problems


def variant(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(MINIMAL)
    for dotted, value in changes.items():
        target = data
        *parents, last = dotted.split("__")
        for key in parents:
            target = target.setdefault(key, {})
        target[last] = value
    return data


def test_minimal_table_gets_sane_defaults(tmp_path: Path) -> None:
    config = load_table_file(write(tmp_path, MINIMAL))
    assert config.event_time.time_zone == "UTC"
    assert config.watermark.max_out_of_orderness == timedelta(minutes=5)
    assert config.late_policy == "side_table"
    assert config.consumer_group == "tidemark-clicks"
    assert config.dirty_table == "clicks__dirty" and config.late_table == "clicks__late"
    assert [c.name for c in config.schema_columns] == ["id", "ts", "app"]
    assert not config.columns["id"].nullable


def test_unknown_key_names_key_and_allowed_keys(tmp_path: Path) -> None:
    _, problems = problems_of(tmp_path, variant(source__topik="x"))
    assert problems == [
        "source.topik: unknown key; expected one of: consumer_group, conversions, done, format, kafka_properties, "
        "max_message_bytes, max_records_per_partition, on_data_loss, retired, schema_registry, "
        "starting_offsets, topic, writer_schema"
    ]


def test_unknown_top_level_key(tmp_path: Path) -> None:
    _, problems = problems_of(tmp_path, variant(watermarks={"idle_timeout": "1m"}))
    assert problems[0].startswith("watermarks: unknown key; expected one of: ")
    assert "watermark" in problems[0]


def test_bad_duration(tmp_path: Path) -> None:
    _, problems = problems_of(tmp_path, variant(watermark__idle_timeout="10 minutes"))
    assert problems == [
        "watermark.idle_timeout: expected a duration such as '30s', '10m', '1h' or '1h30m' "
        "(units: ms, s, m, h, d), got '10 minutes'"
    ]


def test_schema_spark_cannot_parse(tmp_path: Path) -> None:
    data = variant()
    data["schema"]["amount"] = "decimal(12,2"
    _, problems = problems_of(tmp_path, data)
    assert len(problems) == 1
    assert problems[0].startswith("schema: column 'amount': cannot parse type 'decimal(12,2'")
    assert "expected a Spark SQL type" in problems[0]


def test_event_time_field_missing_from_schema(tmp_path: Path) -> None:
    _, problems = problems_of(tmp_path, variant(event_time__field="event_ts"))
    assert problems == ["event_time.field: 'event_ts' is not a column of the schema (columns: id, ts, app)"]


def test_event_time_field_must_be_timestamp(tmp_path: Path) -> None:
    _, problems = problems_of(tmp_path, variant(event_time__field="id"))
    assert problems == ["event_time.field: column 'id' has type string; expected timestamp"]


def test_time_zone_that_does_not_exist(tmp_path: Path) -> None:
    _, problems = problems_of(tmp_path, variant(event_time__time_zone="Europe/Atlantis"))
    assert problems == [
        "event_time.time_zone: unknown time zone 'Europe/Atlantis'; expected an IANA name such as "
        "'UTC' or 'Europe/Berlin'"
    ]


def test_all_problems_reported_at_once(tmp_path: Path) -> None:
    message, problems = problems_of(
        tmp_path,
        variant(source__bogus=1, watermark__commit_delay="soon", late_policy="append"),
    )
    assert len(problems) == 3, message
    assert any(p.startswith("late_policy: Input should be 'side_table' or 'amend'") for p in problems)


def test_missing_required_key(tmp_path: Path) -> None:
    data = variant()
    del data["source"]
    _, problems = problems_of(tmp_path, data)
    assert problems == ["source: missing required key"]


def test_partition_columns_and_primary_key_are_checked(tmp_path: Path) -> None:
    _, problems = problems_of(
        tmp_path, variant(partitioning={"columns": ["ts", "nope"]}, primary_key=["missing"])
    )
    assert "primary_key: 'missing' is not a column of the schema" in problems
    assert "partitioning.columns: 'ts' must be a string column, not timestamp" in problems
    assert "partitioning.columns: 'nope' is not a column of the schema" in problems


def test_table_name_must_match_file(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL, name="other")
    with pytest.raises(ConfigError, match="table: 'clicks' must match the file name 'other'"):
        load_table_file(path)


def test_invalid_yaml(tmp_path: Path) -> None:
    path = tmp_path / "clicks.yaml"
    path.write_text("table: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_table_file(path)


def test_example_tables_are_valid() -> None:
    settings = Settings.from_env({"TIDEMARK_CONF_DIR": str(ROOT / "conf" / "tables")})
    tables = {t.table: t for t in load_tables(settings)}
    assert set(tables) >= {"events", "orders"}
    events, orders = tables["events"], tables["orders"]
    assert [c.name for c in events.schema_columns] == [
        "event_id",
        "user_id",
        "app",
        "event_type",
        "amount",
        "event_time",
    ]
    assert events.event_time.field == "event_time"
    assert orders.primary_key == ["order_id"]
    assert orders.cdc is not None and orders.cdc.version_field == "version"
    assert [c.name for c in orders.schema_columns] == [
        "op",
        "order_id",
        "version",
        "customer_id",
        "status",
        "amount",
        "updated_at",
    ]


def test_unknown_table_lists_known_ones(tmp_path: Path) -> None:
    write(tmp_path, MINIMAL)
    settings = Settings.from_env({"TIDEMARK_CONF_DIR": str(tmp_path)})
    with pytest.raises(ConfigError, match="known tables: clicks"):
        load_table("nope", settings)


def test_environment_overrides(tmp_path: Path) -> None:
    defaults = Settings.from_env({})
    assert defaults.kafka_bootstrap == DEFAULT_BOOTSTRAP
    assert defaults.home == (ROOT / ".tidemark").resolve()
    custom = Settings.from_env(
        {
            "TIDEMARK_HOME": str(tmp_path),
            "TIDEMARK_KAFKA_BOOTSTRAP": "kafka-1:9093,kafka-2:9093",
            "TIDEMARK_SPARK_MASTER": "spark://10.0.0.1:7077",
            "TIDEMARK_SPARK_CONF": '{"spark.executor.memory": "4g"}',
        }
    )
    assert custom.home == tmp_path.resolve()
    assert custom.warehouse == str(tmp_path.resolve() / "warehouse")
    assert custom.kafka_bootstrap == "kafka-1:9093,kafka-2:9093"
    assert custom.spark_master == "spark://10.0.0.1:7077"
    assert custom.spark_conf == {"spark.executor.memory": "4g"}


def test_bad_environment_is_named() -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"TIDEMARK_SPARK_CONF": "[1,2]", "TIDEMARK_AIRFLOW_PORT": "http"})
    assert info.value.source == "environment"
    assert [p.split(":")[0] for p in info.value.problems] == ["TIDEMARK_SPARK_CONF", "TIDEMARK_AIRFLOW_PORT"]


def test_inconsistent_watermark_tolerances_are_refused_naming_them() -> None:
    base = {
        "table": "t",
        "source": {"topic": "t"},
        "schema": {"id": "string", "ts": "timestamp"},
        "event_time": {"field": "ts"},
    }
    with pytest.raises(ConfigError) as refused:
        parse_table(
            {
                **base,
                "watermark": {"max_out_of_orderness": "10m", "commit_delay": "5m", "max_event_age": "12m"},
            },
            "t.yaml",
        )
    assert "watermark.max_event_age" in str(refused.value) and "max_out_of_orderness" in str(refused.value)
    with pytest.raises(ConfigError, match=r"watermark\.idle_timeout"):
        parse_table({**base, "watermark": {"idle_timeout": "0s"}}, "t.yaml")
    ok = parse_table({**base, "watermark": {"max_event_age": "7d", "too_old": "late"}}, "t.yaml")
    assert ok.watermark.max_event_age is not None and ok.watermark.too_old == "late"


def test_a_table_named_like_another_tables_side_table_is_refused(tmp_path: Path) -> None:
    body = "source: {topic: %s}\nschema: {id: string, ts: timestamp}\nevent_time: {field: ts}\n"
    for name in ("clicks", "clicks__late"):
        (tmp_path / f"{name}.yaml").write_text(f"table: {name}\n" + body % name)
    with pytest.raises(ConfigError, match="collides with the late table of table 'clicks'"):
        load_tables(replace_settings(Settings.from_env(), conf_dir=tmp_path))


def test_secrets_are_masked_in_properties_urls_and_messages() -> None:
    props = masked(
        {
            "sasl.oauthbearer.config": "clientId=app clientSecret=s3cr3t",
            "sasl.password": "pw",
            "bootstrap.servers": "broker:9092",
            "schema.registry.url": "https://user:hunter2@registry:8081",
        }
    )
    assert "s3cr3t" not in str(props) and "pw" not in props.values() and "hunter2" not in str(props)
    assert props["bootstrap.servers"] == "broker:9092"
    text = mask_text(
        "cannot read jdbc:postgresql://db/x?user=u&password=topsecret; https://a:b@h/ clientSecret=zz"
    )
    assert "topsecret" not in text and "a:***@h" in text and "zz" not in text


@pytest.mark.parametrize("example", sorted((ROOT / "conf" / "tables").glob("*.yaml")), ids=lambda p: p.stem)
def test_the_effective_configuration_reads_back_as_the_same_table(example: Path, tmp_path: Path) -> None:
    config = load_table_file(example)
    effective = effective_config(config)
    assert effective["watermark"]["commit_delay"] == "5m" or "m" in str(
        effective["watermark"]["commit_delay"]
    )
    assert effective["quality"]["default_expectations"] in (True, False)  # defaults are shown
    again = load_table_file(write(tmp_path, effective, config.table))
    assert again == config


def test_the_effective_configuration_masks_secrets(tmp_path: Path) -> None:
    secret = {"sasl.password": "hunter2", "sasl.mechanism": "PLAIN"}
    config = load_table_file(write(tmp_path, variant(source__kafka_properties=secret)))
    shown = effective_config(config)
    assert shown["source"]["kafka_properties"]["sasl.mechanism"] == "PLAIN"
    assert "hunter2" not in str(shown)
    assert shown["schema"] == {"id": "string not null", "ts": "timestamp not null", "app": "string"}
    assert shown["watermark"]["idle_timeout"] == "30m"


def test_only_the_driver_maps_the_class_archive_and_only_when_it_is_there(tmp_path: Path) -> None:
    archive = tmp_path / "spark-classes.jsa"
    settings = Settings.from_env({"TIDEMARK_JVM_CLASS_ARCHIVE": str(archive), "TIDEMARK_HOME": str(tmp_path)})
    assert settings.class_archive == archive
    assert "SharedArchiveFile" not in driver_java_options(settings)  # not written yet
    archive.write_bytes(b"")
    assert f"-XX:SharedArchiveFile={archive}" in driver_java_options(settings)
    conf = session_conf(settings)
    assert "SharedArchiveFile" in conf["spark.driver.extraJavaOptions"]
    assert "SharedArchiveFile" not in conf["spark.executor.extraJavaOptions"]  # another class path
    off = Settings.from_env({"TIDEMARK_JVM_CLASS_ARCHIVE": "off"})
    assert off.class_archive is None and "SharedArchiveFile" not in driver_java_options(off)
    default = Settings.from_env({"PYSPARK_PYTHON": "/opt/venv/bin/python"})
    assert default.class_archive == Path("/opt/venv/share/tidemark/spark-classes.jsa")
    # a warehouse on S3 puts the s3a jars on the driver's class path: an archive of its own
    on_s3 = Settings.from_env(
        {"PYSPARK_PYTHON": "/opt/venv/bin/python", "TIDEMARK_WAREHOUSE": "s3://lake/wh"}
    )
    assert on_s3.class_archive == Path("/opt/venv/share/tidemark/spark-classes-s3a.jsa")


def test_a_driver_with_a_tables_jars_maps_the_archive_of_its_own_class_path(tmp_path: Path) -> None:
    """An Iceberg table's jobs put Iceberg's runtime on the driver's class path, which the
    default archive does not match (the JVM would ignore it): they map the archive written
    with that class path, in spark-submit's options, an in-process session's and an
    Airflow task's, with the default archive's options dropped."""
    archive = tmp_path / "spark-classes.jsa"
    settings = Settings.from_env({"TIDEMARK_JVM_CLASS_ARCHIVE": str(archive), "TIDEMARK_HOME": str(tmp_path)})
    own = driver_class_path(settings)
    iceberg = ":".join(p for p in (own, "/jars/iceberg-spark-runtime.jar") if p)
    theirs = class_archive(settings, iceberg)
    assert theirs is not None and theirs != archive and theirs.parent == archive.parent
    assert class_archive(settings, own) == archive == class_archive(settings)
    assert class_archive(settings, iceberg) == theirs  # named by the jars: stable
    archive.write_bytes(b"")
    default = driver_java_options(settings)
    assert "SharedArchiveFile" not in with_class_archive(default, settings, iceberg)  # not written yet
    theirs.write_bytes(b"")
    options = with_class_archive(default, settings, iceberg)
    assert f"-XX:SharedArchiveFile={theirs}" in options and str(archive) + " " not in options + " "
    assert options.count("SharedArchiveFile") == 1 and options.count("-Xlog:cds=off") == 1
    assert with_class_archive(options, settings, own) == default  # and back


def test_a_retention_shorter_than_two_hours_is_refused(tmp_path: Path) -> None:
    text, _ = problems_of(tmp_path, variant(retention__hours="90m"))
    assert "retention.hours: 1:30:00 is shorter than 2:00:00" in text and "'90d'" in text
    kept = load_table_file(write(tmp_path, variant(retention__hours="90d", retention__dirty="30d"))).retention
    assert (kept.hours, kept.dirty) == (timedelta(days=90), timedelta(days=30))
    text, _ = problems_of(tmp_path, variant(retention__dirty="1h"))
    assert "retention.dirty: 1:00:00 is shorter than 2:00:00" in text
    # the late side table is side_table's: with amend, a key that would do nothing is refused
    _, problems = problems_of(tmp_path, variant(late_policy="amend", retention__late="30d"))
    assert any("retention.late: the late side table is late_policy side_table's" in p for p in problems)
    side = load_table_file(write(tmp_path, variant(late_policy="side_table", retention__late="30d")))
    assert side.retention.late == timedelta(days=30)


def test_an_iceberg_snapshot_s_format_and_merge_mode_are_iceberg_s_alone(tmp_path: Path) -> None:
    orders = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "conf" / "tables" / "orders.yaml").read_text()
    )
    orders["cdc"].update(snapshot_format="iceberg", iceberg_format_version=3, merge_mode="merge-on-read")
    cdc = load_table_file(write(tmp_path, orders, "orders")).cdc
    assert cdc is not None and (cdc.iceberg_format_version, cdc.merge_mode) == (3, "merge-on-read")
    orders["cdc"]["snapshot_format"] = "delta"
    message, _ = problems_of_named(tmp_path, orders, "orders")
    assert "cdc.iceberg_format_version applies to cdc.snapshot_format: iceberg only" in message
    orders["cdc"].update(snapshot_format="iceberg", iceberg_format_version=4)
    message, _ = problems_of_named(tmp_path, orders, "orders")
    assert "iceberg_format_version" in message


def problems_of_named(tmp_path: Path, data: dict[str, Any], name: str) -> tuple[str, list[str]]:
    with pytest.raises(ConfigError) as info:
        load_table_file(write(tmp_path, data, name))
    return str(info.value), info.value.problems
