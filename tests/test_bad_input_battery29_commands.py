"""Battery 29's command and grading findings (fix59d). Each test failed before its fix."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _course():
    spec = importlib.util.spec_from_file_location("_course_b29", ROOT / "course.py")
    course = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(course)
    return course


# --- course.py lab: --port and --ip values are checked before anything starts -----------------

@pytest.mark.parametrize(("arg", "shown"), [
    ("--port=-5", "--port=-5 is out of range"),
    ("--port=99999", "--port=99999 is out of range"),
    ("--ServerApp.port=-1", "--ServerApp.port=-1 is out of range"),
    ("--port=eighty", "--port='eighty' is not a port number"),
    ("--ip=no such host", "--ip='no such host' is not an address"),
])
def test_course_lab_refuses_a_bad_port_or_address_before_starting(monkeypatch, capsys, arg, shown):
    """b29 lab_port_negative_traceback, lab_port_out_of_range_starts, lab_bad_ip_traceback: a
    socket.gaierror traceback from jupyter_server, or JupyterLab started on port 99999."""
    course = _course()

    def never(*args, **kwargs):
        raise AssertionError("the environment was set up: the option was not refused first")

    monkeypatch.setattr(course, "ensure_environment", never)
    monkeypatch.setattr(course.cli, "call", never)
    assert course._main(["lab", "--no-browser", arg]) == 2
    err = capsys.readouterr().err
    assert shown in err and "JupyterLab was not started" in err and "Traceback" not in err, err


def test_course_lab_takes_good_ports_and_addresses():
    course = _course()
    assert course.lab_value_problems(["--port=0", "--port", "8888", "--ServerApp.port=65535", "--ip=*",
                                      "--ip", "127.0.0.1", "--ServerApp.ip=localhost", "--ip="]) == []


# --- student-tree: a second run at once, and an OUT stdout cannot encode --------------------

def _student_tree():
    spec = importlib.util.spec_from_file_location("_student_tree_b29", ROOT / "scripts" / "student_tree.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_student_tree_made_meanwhile_by_another_run_is_named_not_an_errno(tmp_path, monkeypatch):
    """b29 student_tree_two_runs_errno: the slower of two runs at once said "[Errno 39] Directory
    not empty: '.../.tree.xxxx' -> '.../tree'", naming a staging folder the user never chose."""
    tree = _student_tree()
    out = tmp_path / "tree"

    def the_other_run_finishes(folder):  # while this run copies, the other one renames its tree
        out.mkdir()
        (out / "README.md").write_text("the other run's tree")

    monkeypatch.setattr(tree, "_point_links_at_the_tree", the_other_run_finishes)
    with pytest.raises(FileExistsError, match="already exists") as caught:
        tree.build(out)
    assert "Errno" not in str(caught.value) and ".tree." not in str(caught.value)
    assert [p.name for p in tmp_path.iterdir()] == ["tree"]  # no staging folder left
    assert (out / "README.md").read_text() == "the other run's tree"


def test_student_tree_into_a_folder_stdout_cannot_encode_succeeds(tmp_path, monkeypatch):
    """b29 student_tree_ascii_out_fails_after_writing: with PYTHONIOENCODING=ascii and OUT 'trée',
    the tree was written, then printing "wrote N files into trée" failed: exit 2, tree left behind."""
    import io

    tree = _student_tree()
    out = tmp_path / "tr\u00e9e"

    def build(folder):
        folder.mkdir()
        return ["README.md"]

    monkeypatch.setattr(tree, "build", build)
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    monkeypatch.setattr(sys, "stdout", stdout)
    code = tree._main([str(out)])
    stdout.flush()
    written = stdout.buffer.getvalue().decode("ascii")
    monkeypatch.undo()
    assert code == 0 and out.is_dir(), written
    assert "wrote 1 files into" in written and "tr\\xe9e" in written


# --- the grader takes an exact nn.Parameter as its plain tensor -----------------------------

def test_grader_takes_a_parameter_output_as_a_plain_tensor():
    """b29 parameter_output_passes_check_scores_zero: 4.2 answered `return nn.Parameter(torch.cat(...))`
    got "correct" from the check but 0 points from the grader (sandbox.to_plain refused the type)."""
    import torch

    from course_utils.exercises import sandbox

    weight = torch.nn.Parameter(torch.arange(6.0).reshape(2, 3))
    back = sandbox.accept(sandbox.to_plain((weight, [weight])))
    assert type(back[0]) is torch.Tensor and type(back[1][0]) is torch.Tensor
    assert torch.equal(back[0], weight.detach()) and not back[0].requires_grad

    class Odd(torch.nn.Parameter):  # still exact: a subclass is refused, whatever it is
        pass

    with pytest.raises(sandbox.Refused, match="Odd"):
        sandbox.to_plain(Odd(torch.zeros(2)))


# --- four common slips are named, not "wrong values" -----------------------------------------

def _per_head_whole_layer(d_model, num_heads, bias=True):
    return num_heads * (4 * d_model * d_model + (4 * d_model if bias else 0))


def _per_head_whole_layer_right_biases(d_model, num_heads, bias=True):
    return num_heads * 4 * d_model * d_model + (4 * d_model if bias else 0)


def _mask_hides_the_diagonal(q, k):
    import math

    import torch

    T = q.shape[-2]
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1) | (torch.arange(T)[:, None] == 0)
    return torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)


def _both_decoded_with_mod(logits, target, num_symbols):
    import torch

    p = logits.argmax(-1)
    a = (p % num_symbols == target % num_symbols).double().mean()
    b = (p % num_symbols == target % num_symbols).double().mean()
    return torch.stack([a, b])


def _sigmoid_for_softmax(scores, values):
    import torch

    return torch.sigmoid(scores) @ values


def _softmax_shifted_by_the_mean(scores):
    import numpy as np

    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(scores - scores.mean(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def _mask_hides_the_diagonal_but_for_token_0(q, k):
    import math

    import torch

    T = q.shape[-2]
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1)
    mask[0, 0] = True  # the NaN of row 0 patched
    return torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)


def _merge_sums_the_heads_then_tiles(heads):
    B, h, T, dk = heads.shape
    return heads.sum(1).repeat(1, 1, h)


def _every_bias_per_head(d_model, num_heads, bias=True):
    return 4 * d_model * d_model + (4 * d_model * num_heads if bias else 0)


def _head_weights_k_block_first(w_in, num_heads, head):
    d = w_in.shape[1]
    dk = d // num_heads
    wk, wq, wv = w_in.split(d, dim=0)
    r = slice(head * dk, (head + 1) * dk)
    return wq[r], wk[r], wv[r]


def _cache_at_least_a_byte_per_number(num_layers, batch, num_heads, num_kv_heads, d_head, seq_len,
                                      bits_per_element):
    return 2 * num_layers * batch * num_kv_heads * d_head * seq_len * max(1, bits_per_element // 8)


@pytest.mark.parametrize(("check", "answer", "key"), [
    ("lesson03.check_parameter_count", _per_head_whole_layer, "whole_layer_per_head"),
    ("lesson03.check_parameter_count", _per_head_whole_layer_right_biases, "whole_layer_per_head"),
    ("lesson02.check_causal_attention_weights", _mask_hides_the_diagonal, "diagonal_hidden"),
    ("lesson01.check_relation_accuracy", _both_decoded_with_mod, "both_with_mod"),
    ("lesson01.check_attend", _sigmoid_for_softmax, "sigmoid_weights"),
    # the slips battery 29 still met after the four above were named
    ("lesson02.check_softmax_rows", _softmax_shifted_by_the_mean, "mean_shift"),
    ("lesson02.check_causal_attention_weights", _mask_hides_the_diagonal_but_for_token_0,
     "diagonal_hidden_first_key_kept"),
    ("lesson03.check_merge_heads", _merge_sums_the_heads_then_tiles, "summed_then_tiled"),
    ("lesson03.check_parameter_count", _every_bias_per_head, "all_biases_per_head"),
    ("lesson04.check_head_weights", _head_weights_k_block_first, "q_and_k_blocks_swapped"),
    ("lesson07.check_cache_bytes", _cache_at_least_a_byte_per_number, "whole_byte_per_element"),
], ids=["3.3-per-head", "3.3-per-head-right-biases", "2.3-diagonal", "1.3-both-mod", "1.1-sigmoid",
        "2.1-mean-shift", "2.3-diagonal-first-key-kept", "3.2-summed-tiled", "3.3-all-biases-per-head",
        "4.1-q-and-k-swapped", "7.2-whole-byte-per-number"])
def test_common_slips_get_a_named_mistake(check, answer, key):
    """b29 common_slips_get_generic_feedback: these slips got only "wrong values ... the largest
    difference is X" (status 'wrong', no mistake named)."""
    import importlib

    module, name = check.split(".")
    feedback = getattr(importlib.import_module(f"course_utils.exercises.{module}"), name)(answer)
    assert feedback.status == "mistake" and feedback.mistake == key, feedback


# --- course.py test names a test id the file does not define ----------------------------------

def test_course_test_names_a_missing_test_id_before_running(monkeypatch, capsys):
    """b29 test_missing_nodeid_unnamed: `course.py test tests/test_attention.py::no_such_test` ran
    pytest for 40 s and ended in "no tests ran" (exit 5), naming nothing."""
    course = _course()

    def never(*args, **kwargs):
        raise AssertionError("pytest was run: the missing test was not named first")

    monkeypatch.setattr(course, "ensure_environment", never)
    monkeypatch.setattr(course.cli, "call", never)
    assert course._main(["test", "tests/test_attention.py::no_such_test"]) == 2
    err = capsys.readouterr().err
    assert "no such test: tests/test_attention.py::no_such_test" in err and "nothing was run" in err, err
    named = ["tests/test_attention.py", "tests/test_attention.py::test_mha_matches_torch",
             "tests/test_bad_input_battery29_commands.py::test_common_slips_get_a_named_mistake[1.1-sigmoid]"]
    assert course.missing_test_names(named) == []
