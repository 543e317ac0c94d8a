"""Battery 20 (issue 38), fix pass P: ReadOnlyDict given a non-mapping (O1), run_with_cache on a
module with no hook point (O2), records with an empty ``name`` refused at the root, in
check_record (S1), check_increasing given NaN or a str (S3)."""

from __future__ import annotations

import pytest
from bad_input_cases import raises_naming

from course_utils.attention.validation import ReadOnlyDict


# -- O1: ReadOnlyDict's items must be a mapping or (key, value) pairs -----------------------------
@pytest.mark.parametrize("items", [None, 3, [1], [(1, 2, 3)]], ids=["None", "int", "list of int", "triple"])
def test_read_only_dict_refuses_a_non_mapping_by_name(items):
    raises_naming(TypeError, ["items", "mapping", type(items).__name__, repr(items)],
                  lambda: ReadOnlyDict(items, "Rec.field"))


def test_read_only_dict_still_takes_a_mapping_and_pairs():
    assert ReadOnlyDict({"a": 1}) == ReadOnlyDict([("a", 1)]) == {"a": 1}
    assert ReadOnlyDict() == {}
