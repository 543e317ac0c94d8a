"""Battery 20 (issue 38), fixes by fix50u: course.py, course_utils/cli.py, env.py, paths.py and scripts/."""

from __future__ import annotations

import pytest
from bad_input_cases import raises_naming

from course_utils import cli, env

# -- F2: the name label of pick_device and cli.words is checked, as check_seed's is -------------

@pytest.mark.parametrize("call, label", [
    (lambda label: env.pick_device("gpu", name=label), 5),
    (lambda label: env.pick_device("cpu", name=label), None),
    (lambda label: env.pick_device(None, name=label), ""),
    (lambda label: cli.words(3, name=label), None),
    (lambda label: cli.words(["a"], name=label), 7),
    (lambda label: cli.words(["a"], name=label), "  "),
])
def test_a_wrong_name_label_is_refused_naming_name(call, label):
    error = ValueError if isinstance(label, str) else TypeError
    message = raises_naming(error, ["name must be a non-empty str", repr(label)], lambda: call(label))
    assert not message.startswith(repr(label)), message  # "5 must be one of ...": the value as the name
