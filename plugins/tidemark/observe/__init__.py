"""Observe: status, alerts, metrics and the health report, read from the state (no JVM)."""
