"""The per-hour admission rule of data-derived partition values (pure)."""

from __future__ import annotations

import pytest

from tidemark.ingest.cardinality import admit
from tidemark.state.partition_values import merge

pytestmark = pytest.mark.unit

H10 = "dt=2026-11-22/hr=10"
H11 = "dt=2026-11-22/hr=11"


def test_new_values_are_admitted_in_sorted_order_up_to_the_bound() -> None:
    added = admit({}, {H10: {"app": ["web", "zeta", "alpha", "ios"]}}, bound=3)
    assert added == {H10: {"app": ["alpha", "ios", "web"]}}


def test_known_values_take_room_and_are_not_added_again() -> None:
    known = {H10: {"app": ["web", "ios"]}}
    added = admit(known, {H10: {"app": ["aaa", "web", "b"]}, H11: {"app": ["x"]}}, bound=3)
    assert added == {H10: {"app": ["aaa"]}, H11: {"app": ["x"]}}


def test_a_full_hour_admits_nothing_and_columns_are_bounded_separately() -> None:
    known = {H10: {"app": ["a", "b"], "region": ["eu"]}}
    added = admit(known, {H10: {"app": ["c"], "region": ["us", "apac"]}}, bound=2)
    assert added == {H10: {"region": ["apac"]}}


def test_merge_unions_sorted_without_touching_its_inputs() -> None:
    known = {H10: {"app": ["web"]}}
    merged = merge(known, {H10: {"app": ["ios"]}, H11: {"app": ["web"]}})
    assert merged == {H10: {"app": ["ios", "web"]}, H11: {"app": ["web"]}}
    assert known == {H10: {"app": ["web"]}}
