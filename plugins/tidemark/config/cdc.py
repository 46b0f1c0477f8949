"""The ``cdc:`` section of a table YAML: a change-data-capture table's operation and version
fields, its envelope, and how the merge folds sealed increments into ``<table>_snapshot``.

``snapshot_format`` chooses the snapshot's table: ``parquet`` (a Hive partition per snapshot),
``delta`` or ``iceberg`` (one table, a version per snapshot). An Iceberg snapshot's new table
is format ``iceberg_format_version`` (2 by default; 3 where every reader reads it), and its
MERGE is ``merge_mode``: ``copy-on-write`` rewrites each file holding a changed key;
``merge-on-read`` writes deletes beside them instead (deletion vectors on format 3, position
deletes on 2), and readers apply them. Updates keep a row's identity (format 3's ``_row_id``):
the MERGE updates matched rows, it does not delete and insert them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tidemark.config.source import Size


class CdcConfig(BaseModel):
    """For change-data-capture tables (see the module)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    op_field: str = "op"
    version_field: str = "version"
    delete_ops: list[str] = Field(default_factory=lambda: ["d"])
    # how the capture tool wraps each change (envelopes.py): the flat record, or
    # Debezium's, Maxwell's or Canal's envelope, read into the columns, op and version
    envelope: Literal["flat", "debezium", "maxwell", "canal"] = "flat"
    snapshot_every: Literal["day", "hour"] = "day"
    snapshot_format: Literal["parquet", "delta", "iceberg"] = "parquet"
    # delta/iceberg: target file size; a MERGE rewrites only files holding changed keys
    snapshot_file_size: Size = 32 * 1024 * 1024
    # delta/iceberg: the newest labels kept readable; an older one expires (its files go)
    keep_labels: int = Field(default=48, ge=1)
    # delta: who writes a version: delta-rs in the driver, or delta-spark on the executors
    merge_engine: Literal["delta-rs", "spark"] = "delta-rs"
    # iceberg: the format of a new snapshot table (an existing one is upgraded, never downgraded)
    iceberg_format_version: Literal[2, 3] = 2
    # iceberg: how a MERGE writes changed rows (see the module)
    merge_mode: Literal["copy-on-write", "merge-on-read"] = "copy-on-write"

    @model_validator(mode="after")
    def _iceberg_only(self) -> CdcConfig:
        iceberg = {"iceberg_format_version": 2, "merge_mode": "copy-on-write"}
        changed = [k for k, default in iceberg.items() if getattr(self, k) != default]
        if changed and self.snapshot_format != "iceberg":
            raise ValueError(f"cdc.{changed[0]} applies to cdc.snapshot_format: iceberg only")
        return self
