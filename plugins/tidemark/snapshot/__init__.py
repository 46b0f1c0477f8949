"""Snapshots of CDC tables: bootstrap (full load aligned by offsets) and the periodic merge."""
