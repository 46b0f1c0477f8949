"""The repository root on ``sys.path``, so that a bench script run as ``python bench/x.py``
imports ``tests.helpers``: imported before them (``import _root``)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
