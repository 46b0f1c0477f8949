"""Ingest: from the broker to committed batch files (plan, read, classify, stage, publish, commit)."""
