"""Pure transforms of the dump: raw MQ records -> typed rows or dirty records.

Decoding is the source format's (``ingest/decoders``: JSON, Avro, Protobuf), inside the data source's
tasks, into Arrow; every check after it is this module's and the same for every format.

Each record is classified once, with the first reason that applies, in this order:

| reason | when |
|---|---|
| ``oversized`` | the message is larger than ``source.max_message_bytes`` |
| ``tombstone`` | the message has no value (a compaction tombstone): kept in the dirty files for \
the offsets' sake but counted apart, never toward ``max_dirty_ratio`` |
| ``invalid_json`` | (JSON) the value is not exactly one JSON object: empty, several objects, \
trailing data, not an object, invalid UTF-8, ``NaN``/``Infinity`` literals, a key given twice, \
nesting deeper than the parser allows (``decoders/json.py``) |
| ``bad_framing`` | (Avro with a registry, Protobuf) not the Confluent wire format: no magic byte 0, or \
shorter than its 5-byte header (``decoders/avro.py``) |
| ``unknown_schema_id`` | (Avro) the registry has no schema of the message's id |
| ``schema_unresolvable`` | (Avro) the message's writer schema cannot be read into the table schema \
(a type Avro does not promote, a missing ``not null`` column, a union of several types) |
| ``undecodable`` | (Avro) the payload is not a record of its writer schema (corrupt, truncated, \
trailing bytes) |
| ``invalid_envelope`` | (CDC tables with ``cdc.envelope``) not the envelope's shape: no or an \
unknown op, a schema change or truncate event, several rows in one message, no row \
(``envelopes.py``) |
| ``null_event_time`` | the event-time field is missing or null |
| ``missing_field`` | a ``not null`` column is missing or null |
| ``type_mismatch`` | a value cannot be converted to its column's type (numbers out of range too) |
| ``unrepresentable_in_parquet``, ``unrepresentable_in_orc`` | a value the table's format cannot \
hold so that every documented reader reads it back exactly (a date or timestamp before 1582-10-15; \
in ORC also a fraction of a second before 1970 and a timestamp outside 1677..2262): ``exact.py`` |
| ``event_time_out_of_range`` | event time before 1900-01-01 UTC (``EARLIEST_EVENT_TIME``) |
| ``event_time_too_old`` | event time before the batch's clock - ``watermark.max_event_age`` (with \
``too_old: late`` such rows are late rows instead) |
| ``future_event_time`` | event time > the batch's processing time + ``watermark.max_future_skew`` |
| ``invalid_partition_value`` | a value of a ``partitioning.columns`` column is null, longer than 64, or \
not made of ``[A-Za-z0-9_.-]`` (so no path separators, ``..``, quotes or spaces) |
| ``partition_cardinality`` | the value would exceed ``partitioning.max_values_per_column`` distinct \
values of its column in its hour (decided after this classification, see ``cardinality.py``) |

Good records whose event time is before the plan's ``sealed_through`` belong to an hour that
is already sealed: they are *late* (``_late``) and go to the late files, never to the table.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from tidemark.config.columns import PARTITION_VALUE_PATTERN, REASONS, TOMBSTONE, dirty_schema
from tidemark.conversions import Conversion
from tidemark.ingest.decoders import Decoded, Verdict, decoder_for
from tidemark.ingest.exact import reason_of, unrepresentable
from tidemark.ingest.spec import Classified, ClassifySpec, RawRecords, good_schema
from tidemark.time.hours import hour_of

if TYPE_CHECKING:
    import pyarrow as pa

# Event times before this are dirty (``event_time_out_of_range``): Spark and Hive read older
# timestamps differently by calendar (the Julian/Gregorian rebase of INT96 and legacy files),
# and an hour of year 1 is not representable in every zone.
EARLIEST_EVENT_TIME = datetime(1900, 1, 1, tzinfo=UTC)


class Classifier:
    """Classifies blocks of raw records by a spec; one per task (it keeps the format's decoder)."""

    def __init__(self, spec: ClassifySpec) -> None:
        self.spec = spec
        self.columns = spec.schema_columns
        conversions = {name: Conversion.parse(described) for name, described in spec.conversions}
        self.decoder = decoder_for(spec, self.columns, conversions)
        self.good_schema = good_schema(spec)
        self.dirty_schema = dirty_schema()
        self.future_limit = datetime.fromisoformat(spec.future_limit)
        self.sealed_through = datetime.fromisoformat(spec.sealed_through) if spec.sealed_through else None
        self._hours: dict[int, tuple[str, str]] = {}

    def classify(self, raw: RawRecords) -> Classified:
        dirty: dict[int, Verdict] = {}  # record index -> (reason, detail)
        values, index = self._admissible(raw, dirty)
        decoded = self.decoder.decode(values, index)
        dirty.update(decoded.rejected)
        good, checked_dirty = self._check(decoded, raw)
        dirty.update(checked_dirty)
        return Classified(good=good, dirty=self._dirty_table(raw, dirty))

    def _admissible(self, raw: RawRecords, dirty: dict[int, Verdict]) -> tuple[list[bytes], list[int]]:
        """The messages any format may decode, and their record indices; a tombstone or an
        oversized message gets its reason in ``dirty``."""
        values = raw.values
        n = len(values)
        if n and None not in values:
            present = cast("list[bytes]", values)
            if max(map(len, present)) <= self.spec.max_message_bytes:
                return present, list(range(n))  # the common case
        admitted: list[bytes] = []
        index: list[int] = []
        for i, value in enumerate(values):
            if value is not None and len(value) > self.spec.max_message_bytes:
                dirty[i] = ("oversized", f"bytes={len(value)}")
            elif value is None:
                dirty[i] = (TOMBSTONE, None)
            else:
                admitted.append(value)
                index.append(i)
        return admitted, index

    def _check(self, decoded: Decoded, raw: RawRecords) -> tuple[pa.Table, dict[int, Verdict]]:
        """Null, future-time and partition-value checks of the rows the decoder accepted;
        the good rows get hour labels, ``_late`` and lineage."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        columns, accepted = decoded.columns, decoded.accepted
        n = len(accepted)
        ts = columns[self.spec.event_time_field]
        masks: list[tuple[str, str, pa.Array]] = []  # (reason, field, bad mask), in reason order

        def absent(name: str) -> pa.Array:
            """Null and not sent: a value sent but not convertible is a type mismatch instead."""
            null = pc.is_null(columns[name])
            if name in decoded.mismatched:
                return pc.and_(null, pc.invert(pc.fill_null(decoded.mismatched[name], False)))
            return null

        masks.append(("null_event_time", "", absent(self.spec.event_time_field)))
        masks += [("missing_field", c.name, absent(c.name)) for c in self.columns if not c.nullable]
        masks += [("type_mismatch", name, mask) for name, mask in decoded.mismatched.items()]
        kept = {c.name: columns[c.name] for c in self.columns if c.name != self.spec.event_time_field}
        unheld = unrepresentable(kept, self.spec.table_format)  # event time: its own bounds below
        masks += [(reason_of(self.spec.table_format), field, mask) for field, mask in unheld]
        ts_utc = ts.cast(pa.timestamp("us", tz="UTC")) if n else pa.array([], pa.timestamp("us", tz="UTC"))
        floor = pa.scalar(EARLIEST_EVENT_TIME, type=pa.timestamp("us", tz="UTC"))
        masks.append(("event_time_out_of_range", "", pc.fill_null(pc.less(ts_utc, floor), False)))
        too_old = pa.array(np.zeros(n, dtype=bool))
        if self.spec.oldest_limit is not None:
            oldest = pa.scalar(
                datetime.fromisoformat(self.spec.oldest_limit), type=pa.timestamp("us", tz="UTC")
            )
            too_old = pc.fill_null(pc.less(ts_utc, oldest), False)
            if self.spec.too_old == "dirty":
                masks.append(("event_time_too_old", "", too_old))
        limit = pa.scalar(self.future_limit, type=pa.timestamp("us", tz="UTC"))
        masks.append(("future_event_time", "", pc.fill_null(pc.greater(ts_utc, limit), False)))
        for name in self.spec.partition_columns:
            value = columns[name]
            ok = pc.and_(
                pc.match_substring_regex(value, PARTITION_VALUE_PATTERN),
                pc.invert(pc.match_substring(value, "..")),
            )
            masks.append(("invalid_partition_value", name, pc.invert(pc.fill_null(ok, False))))
        any_bad = np.zeros(n, dtype=bool)
        for _, _, mask in masks:
            any_bad |= mask.to_numpy(zero_copy_only=False)
        dirty: dict[int, Verdict] = {}
        bad_rows = np.flatnonzero(any_bad)
        if len(bad_rows):
            flags = {(reason, name): mask.to_numpy(zero_copy_only=False) for reason, name, mask in masks}
            for row in bad_rows.tolist():
                dirty[accepted[row]] = self._reason_of(row, flags)
        keep = np.flatnonzero(~any_bad)
        good_idx = np.asarray(accepted, dtype=np.int64)[keep]
        take = pa.array(keep, type=pa.int64())
        out = {name: col.take(take) for name, col in columns.items()}
        ts_good = ts_utc.take(take)
        dt, hr = self._hour_labels(ts_good)
        if self.sealed_through is not None:
            late = pc.less(ts_good, pa.scalar(self.sealed_through, type=pa.timestamp("us", tz="UTC")))
        else:
            late = pa.array(np.zeros(len(good_idx), dtype=bool))
        if self.spec.too_old == "late":  # too old by policy: kept, as late rows
            late = pc.or_(late, too_old.take(take))
        out.update(
            dt=dt,
            hr=hr,
            _late=late,
            _mq_partition=pa.array(np.full(len(good_idx), raw.mq_partition, dtype=np.int32)),
            _mq_offset=pa.array(np.asarray(raw.offsets, dtype=np.int64)[good_idx]),
            _mq_timestamp=pa.array(np.asarray(raw.timestamps, dtype=np.int64)[good_idx]),
            _batch_id=pa.array(np.full(len(good_idx), self.spec.batch_id, dtype=np.int64)),
        )
        if self.spec.keep_raw:
            rows = pa.array(good_idx, type=pa.int64())
            out["_raw_key"] = pa.array(raw.keys, type=pa.binary()).take(rows)
            out["_raw_value"] = pa.array(raw.values, type=pa.binary()).take(rows)
        return pa.Table.from_pydict(out, schema=self.good_schema), dirty

    def _reason_of(self, row: int, flags: dict[tuple[str, str], Any]) -> Verdict:
        """The first reason of a row that failed a check, and the fields it names."""
        for reason in REASONS:
            fields = [name for (r, name), mask in flags.items() if r == reason and mask[row]]
            if not fields:
                continue
            if reason == "null_event_time":
                return reason, None
            if reason == "future_event_time":
                return reason, f"limit={self.spec.future_limit}"
            if reason == "event_time_out_of_range":
                return reason, f"earliest={EARLIEST_EVENT_TIME.isoformat()}"
            if reason == "event_time_too_old":
                return reason, f"oldest={self.spec.oldest_limit}"
            return reason, "fields=" + ",".join(fields)
        raise AssertionError(f"row {row} failed no check")

    def _hour_labels(self, ts: pa.Array) -> tuple[pa.Array, pa.Array]:
        """dt and hr of each instant by :func:`tidemark.time.hours.hour_of` itself, applied once per
        distinct minute (every zone's offset is whole minutes), so the rule exists once."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        # floor, not truncation: 1969-12-31T23:59:30 is in minute -1, not 0
        micros = ts.cast(pa.int64()).to_numpy(zero_copy_only=False) if len(ts) else np.zeros(0, np.int64)
        minutes = pa.array(np.floor_divide(micros, 60_000_000), pa.int64())
        distinct = pc.unique(minutes)
        labels = [self._hour_of_minute(m) for m in distinct.to_pylist()]
        index = pc.index_in(minutes, value_set=distinct)
        dt = pa.array([d for d, _ in labels], type=pa.string()).take(index)
        hr = pa.array([h for _, h in labels], type=pa.string()).take(index)
        return dt, hr

    def _hour_of_minute(self, minute: int) -> tuple[str, str]:
        label = self._hours.get(minute)
        if label is None:
            hour = hour_of(datetime.fromtimestamp(minute * 60, UTC), self.spec.time_zone)
            label = self._hours[minute] = (hour.dt, hour.hr)
        return label

    def _dirty_table(self, raw: RawRecords, dirty: dict[int, Verdict]) -> pa.Table:
        import pyarrow as pa

        rows = sorted(dirty)
        n = len(rows)
        return pa.Table.from_pydict(
            {
                "topic": pa.array([self.spec.topic] * n, pa.string()),
                "mq_partition": pa.array([raw.mq_partition] * n, pa.int32()),
                "mq_offset": pa.array([raw.offsets[i] for i in rows], pa.int64()),
                "mq_timestamp": pa.array([raw.timestamps[i] for i in rows], pa.int64()),
                "batch_id": pa.array([self.spec.batch_id] * n, pa.int64()),
                "run_id": pa.array([self.spec.run_id] * n, pa.string()),
                "reason": pa.array([dirty[i][0] for i in rows], pa.string()),
                "detail": pa.array([dirty[i][1] for i in rows], pa.string()),
                "raw_key": pa.array([raw.keys[i] for i in rows], pa.binary()),
                "raw_value": pa.array([raw.values[i] for i in rows], pa.binary()),
            },
            schema=self.dirty_schema,
        )
