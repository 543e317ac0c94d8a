"""Battery 30's library findings, part e: each test failed before its fix."""
import warnings

import torch

from course_utils.exercises.core import outputs_close


def test_outputs_close_keeps_imaginary_part_of_expected():
    got = torch.zeros(2, 3)
    expected = torch.zeros(2, 3, dtype=torch.complex64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert outputs_close(got, expected)
        expected[0, 0] = complex(0.0, 5.0)
        assert not outputs_close(got, expected)
        assert outputs_close(expected.clone(), expected)


def test_eval_batches_do_not_depend_on_default_dtype():
    from course_utils.tasks.synthetic import AgreementTask, InductionTask

    for task in (InductionTask(), AgreementTask()):
        a = task.eval_batch(16).tokens
        torch.set_default_dtype(torch.float64)
        try:
            b = task.eval_batch(16).tokens
        finally:
            torch.set_default_dtype(torch.float32)
        assert a.shape == b.shape and torch.equal(a, b), type(task).__name__


def test_paged_append_interrupted_leaves_sequence_as_it_was():
    import pytest

    from course_utils.model.paged_cache import PagedCache

    c = PagedCache(8, 4, 2, 8)
    c.add_sequence("s")
    g = torch.Generator().manual_seed(0)
    c.append("s", torch.randn(2, 3, 8, generator=g), torch.randn(2, 3, 8, generator=g))
    before = (list(c.tables["s"]), list(c.free), list(c.refs), c.lengths["s"])
    take = c._take_block

    def interrupted():
        raise KeyboardInterrupt

    c._take_block = interrupted  # the 4th new token needs a fresh block: interrupted there
    k, v = torch.randn(2, 3, 8, generator=g), torch.randn(2, 3, 8, generator=g)
    with pytest.raises(KeyboardInterrupt):
        c.append("s", k, v)
    assert (list(c.tables["s"]), list(c.free), list(c.refs), c.lengths["s"]) == before
    c._take_block = take
    c.append("s", k, v)
    assert c.lengths["s"] == 6


def test_induction_accuracy_rechecks_batch_changed_in_place():
    import pytest

    from course_utils.tasks.synthetic import InductionTask, induction_accuracy

    task = InductionTask()
    batch = task.eval_batch(4)
    logits = torch.randn(*batch.tokens.shape, task.vocab_size, generator=torch.Generator().manual_seed(0))
    induction_accuracy(logits, batch)
    batch.tokens.fill_(-5)
    with pytest.raises(ValueError, match="InductionBatch.tokens"):
        induction_accuracy(logits, batch)


def test_run_answer_refuses_limits_setrlimit_cannot_take():
    import pytest

    from course_utils.exercises import lesson02
    from course_utils.exercises.autograde import cases_of
    from course_utils.exercises.sandbox import run_answer

    code = "def softmax_rows(x):\n    return x\n"
    cases = [cases_of(lesson02.SOFTMAX_ROWS)]
    for name, value in (("memory", 10 ** 400), ("per_call", 2 ** 40), ("grace", 10 ** 30),
                        ("max_result_bytes", 10 ** 30)):
        with pytest.raises(ValueError, match=name):
            run_answer(code, "softmax_rows", "lesson02.check_softmax_rows", cases, sandbox=False,
                       **{"per_call": 30, name: value})


def test_place_in_in_deleted_current_folder_says_so():
    import os
    import tempfile

    import pytest

    from course_utils.cli import place_in

    here = os.getcwd()
    gone = tempfile.mkdtemp()
    os.chdir(gone)
    os.rmdir(gone)
    try:
        with pytest.raises(ValueError, match="current folder") as info:
            place_in("x", ".")
        assert "symbolic link" not in str(info.value)
    finally:
        os.chdir(here)
