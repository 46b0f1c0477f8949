"""Table configuration: one YAML file per table, validated into a typed model, a module per
section (``source``, ``sections``: event time, partitioning, watermark, dirty, output,
stream and quality; ``maintenance``: retention and compaction; ``cdc``), the table's model
checking them against each other (``table``) and the reading of a file (``loading``).

A data engineer describes a table once (topic, schema, event-time field, partitioning, watermark
tolerances, primary key, quality rules, retention); every DAG, job and CLI command reads it through
:func:`tidemark.catalog.load_table`. Validation errors name the file, the key and what was
expected, all at once.
"""

from __future__ import annotations

from tidemark.config.loading import effective_config, load_table_file, parse_table, table_files
from tidemark.config.sections import OutputConfig, expectation_columns
from tidemark.config.table import TableConfig

__all__ = [
    "OutputConfig",
    "TableConfig",
    "effective_config",
    "expectation_columns",
    "load_table_file",
    "parse_table",
    "table_files",
]
