"""Battery 22's mechanical re-run (issue 38): ``sandbox.is_stub(code, name='')`` answered False
("not a stub") for a name no function can have; the name is now checked as an identifier, as
the sandbox's other functions check the answer's name."""

from __future__ import annotations

import pytest
from bad_input_cases import raises_naming

from course_utils.exercises import sandbox

STUB = "def f():\n    raise NotImplementedError\n"


@pytest.mark.parametrize("name", ["", "1f", "f g", "f()"])
def test_is_stub_refuses_a_name_no_function_can_have(name):
    raises_naming(ValueError, ["name", "identifier", repr(name)], lambda: sandbox.is_stub(STUB, name))


def test_is_stub_still_reads_a_stub_and_an_answer():
    assert sandbox.is_stub(STUB, "f")
    assert not sandbox.is_stub("def f():\n    return 1\n", "f")
