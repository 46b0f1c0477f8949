"""Time: hours of a table's zone (DST-correct), instants, watermarks and the ready time (pure)."""
