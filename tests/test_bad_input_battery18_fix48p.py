"""Battery 18 (issue 38), fix pass P: frozen shape traces (g06, g07's ShapeTrace cases), read-only
mappings in check_record, nn.MultiheadAttention's mask ranks (g28) and MultiHeadAttention.to_torch
after its projections were replaced (g29)."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping

import pytest

from course_utils.attention.validation import check_record, freeze_fields


# -- check_record takes read-only mappings; freeze_fields ------------------------------------
@dataclasses.dataclass(frozen=True)
class _Counts:
    counts: Mapping[str, int]
    order: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        freeze_fields(self, "counts", "order")
        check_record(self)


@pytest.mark.parametrize(("counts", "error", "words"), [
    pytest.param(3, TypeError, ["_Counts.counts", "int 3"], id="int"),
    pytest.param({"a": -1}, ValueError, ["_Counts.counts['a']", "-1"], id="negative value"),
    pytest.param({1: 1}, TypeError, ["_Counts.counts key 1", "str"], id="int key"),
])
def test_check_record_checks_mapping_fields(counts, error, words):
    with pytest.raises(error) as err:
        _Counts(counts)
    for word in words:
        assert word in str(err.value)


def test_freeze_fields_stores_read_only_copies():
    given = {"a": 1}
    record = _Counts(given, ["x"])
    given["a"] = -5
    assert record.counts == {"a": 1} and record.order == ("x",)
    assert isinstance(record.counts, types.MappingProxyType)
    assert _Counts(record.counts).counts == {"a": 1}  # a read-only mapping is taken as it is


def test_freeze_fields_names_an_unknown_field():
    @dataclasses.dataclass(frozen=True)
    class Bad:
        items: tuple[int, ...]

        def __post_init__(self) -> None:
            freeze_fields(self, "itmes")

    with pytest.raises(ValueError, match=r"'itmes'.*not a field of Bad"):
        Bad([1])
