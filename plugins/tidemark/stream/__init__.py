"""The continuous writer: the dump protocol driven by a Structured Streaming query."""
