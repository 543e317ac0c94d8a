"""An answer that adds a name where the check looks names up (a built-in's name in a course
module, an attribute on a course class that hides an inherited one) is named, and the name is
removed: the next check in the same kernel answers as if nothing had happened."""

import sys

import numpy as np
import pytest

from course_utils.exercises import core, lesson02


def _wrong_rows(scores):
    return np.zeros_like(scores)


def _shadowing(scores):
    """Adds built-ins' names to every course module: `all` says True, `max` says 0."""
    for name, module in list(sys.modules.items()):
        if name.startswith("course_utils"):
            vars(module)["all"] = lambda *a, **k: True
            vars(module)["max"] = lambda *a, **k: 0.0
            vars(module)["abs"] = lambda x: 0 * x
    return np.zeros_like(scores)


def _hiding(scores):
    """Gives a course class its own __format__ (inherited from object before)."""
    assert "__format__" not in vars(core.Feedback)
    core.Feedback.__format__ = lambda self, spec: "passed"
    return np.zeros_like(scores)


@pytest.mark.parametrize("answer, where", [(_shadowing, (".all", ".max", ".abs")),
                                           (_hiding, ("core.Feedback.__format__",))])
def test_an_added_name_is_named_and_removed_before_the_next_check(answer, where):
    before = str(lesson02.check_softmax_rows(_wrong_rows))
    feedback = lesson02.check_softmax_rows(answer)
    assert not feedback.passed and "replaced" in str(feedback), feedback
    assert any(name in str(feedback) for name in where), feedback  # (six names are listed, then a count)
    assert "all" not in vars(core) and "max" not in vars(core) and "abs" not in vars(core)
    assert "__format__" not in vars(core.Feedback)
    assert str(lesson02.check_softmax_rows(_wrong_rows)) == before  # as if nothing had happened


def _copy_a_case():
    """What the outside grader does before a check: copy (pickle) a lesson's case, which makes
    copyreg cache ``__slotnames__`` on the Case class."""
    import copy

    from course_utils.exercises import cases
    copy.copy(cases.Case(args=(1,)))
    assert "__slotnames__" in vars(cases.Case)


def test_copyregs_own_cache_of_slot_names_is_nobodys_tampering():
    _copy_a_case()  # (after the check's originals were captured at import)
    feedback = lesson02.check_softmax_rows(_wrong_rows)
    assert not feedback.passed and "replaced" not in str(feedback) and "__slotnames__" not in str(feedback)


def _false_slot_names(scores):
    from course_utils.exercises import cases
    cases.Case.__slotnames__ = ["args"]  # (Case has no slots: copyreg caches [])
    return np.zeros_like(scores)


def test_a_false_cache_of_slot_names_is_named_and_removed():
    from course_utils.exercises import cases
    feedback = lesson02.check_softmax_rows(_false_slot_names)
    assert not feedback.passed and "Case.__slotnames__" in str(feedback), feedback
    assert vars(cases.Case).get("__slotnames__") in (None, [])


def _tensor_protocols_patched(scores):
    """Battery 15: names added to torch.Tensor that hide TensorBase's methods."""
    import torch

    torch.Tensor.__eq__ = lambda x, y: torch.tensor(True)
    torch.Tensor.__sub__ = lambda x, y: torch.zeros(())
    torch.Tensor.__array_ufunc__ = None
    return np.zeros_like(scores)


def test_names_added_to_torchs_tensor_are_removed_before_the_next_check():
    import torch

    from course_utils.exercises import lesson07

    def repeat_kv(kv, num_heads):  # a right 7.1, written out (the check compares torch tensors)
        B, g, T, dk = kv.shape
        return kv[:, :, None].expand(B, g, num_heads // g, T, dk).reshape(B, num_heads, T, dk)

    feedback = lesson02.check_softmax_rows(_tensor_protocols_patched)
    assert not feedback.passed and "torch.Tensor.__eq__" in str(feedback), feedback
    assert not {"__eq__", "__sub__", "__array_ufunc__"} & set(vars(torch.Tensor))
    assert lesson07.check_repeat_kv(repeat_kv).passed  # graded as if nothing had happened
