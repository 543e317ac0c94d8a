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


# -- F3: cli.run checks a raised SystemExit's code as it checks a returned one ------------------

@pytest.mark.parametrize("code, error", [(True, TypeError), (False, TypeError), (2.5, TypeError),
                                         ((1, 2), TypeError), (300, ValueError), (-1, ValueError)])
def test_run_refuses_a_raised_systemexit_with_a_wrong_code(code, error):
    def main(argv):
        raise SystemExit(code)

    raises_naming(error, ["main(argv) raised SystemExit", repr(code), "expected an exit status"],
                  lambda: cli.run(main, [], "demo"))


@pytest.mark.parametrize("code", [None, 0, 2, 255, "a message"])
def test_run_lets_a_raised_systemexit_with_a_good_code_through(code):
    def main(argv):
        raise SystemExit(code)

    with pytest.raises(SystemExit) as stopped:
        cli.run(main, [], "demo")
    assert stopped.value.code == code
