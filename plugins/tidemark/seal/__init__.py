"""Seal: from committed batch files to registered, checked, announced hours (and their rebuilds)."""
