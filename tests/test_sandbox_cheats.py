"""The outside grader against the third instructor trial's findings (INSTRUCTORS.md, "Grading
outside the notebook"): an honest answer that uses an earlier cell's helper keeps its points,
and each cheat the trial found gets none."""

from __future__ import annotations

import ast

import pytest

from course_utils.exercises import autograde, sandbox

HEAD = "import math\nimport numpy as np\nimport torch\nimport torch.nn.functional as F\n"


def _grade(lesson, check, cells, name, **kwargs):
    code = sandbox.answer_source(cells, name, len(cells) - 1)
    return autograde.grade_answer(lesson, check, code, name, salt=None, solutions_dir=None, **kwargs)


# -- 1. an honest answer with a decorator from an earlier cell ---------------------------------
DECORATED = [HEAD, "def checked(fn):\n    return fn",
             "@checked\ndef repeat_kv(kv, num_heads):\n"
             "    return kv.repeat_interleave(num_heads // kv.shape[1], dim=1)"]


def test_the_answer_comes_after_the_helpers_of_earlier_cells_it_uses():
    code = sandbox.answer_source(DECORATED, "repeat_kv", answer_cell=2)
    names = [n.name for n in ast.parse(code).body if isinstance(n, ast.FunctionDef)]
    assert names == ["checked", "repeat_kv"], code


def test_an_honest_answer_decorated_by_an_earlier_cells_function_scores_in_full():
    feedback = _grade("lesson07", "check_repeat_kv", DECORATED, "repeat_kv")
    assert feedback.passed, feedback


# -- 2. N7: an answer nested too deep for the parser -------------------------------------------
def _notebook(answers):
    """An nbgrader notebook of lesson 07: imports, then per (check, name, code) a solution cell
    and its test cell."""
    import nbformat

    cells = [nbformat.v4.new_code_cell(HEAD)]
    for check, name, code in answers:
        grade_id = "lesson07_" + check.removeprefix("check_")
        cells.append(nbformat.v4.new_code_cell(code, metadata={"nbgrader": {
            "solution": True, "grade": False, "grade_id": grade_id}}))
        cells.append(nbformat.v4.new_code_cell(f"lesson07.{check}({name})", metadata={"nbgrader": {
            "solution": False, "grade": True, "grade_id": grade_id + "_test", "points": 1}}))
    return nbformat.v4.new_notebook(cells=cells)


DEEP = "def cache_bytes(num_layers, batch, num_heads, num_kv_heads, d_head, seq_len, bits):\n    return "


@pytest.mark.parametrize("depth", [30_000, 600])
def test_an_answer_too_deep_to_parse_scores_zero_and_the_rest_is_graded(depth):
    nb = _notebook([("check_cache_bytes", "cache_bytes", DEEP + "-" * depth + "1"),
                    ("check_repeat_kv", "repeat_kv", DECORATED[2].replace("@checked\n", ""))])
    results = autograde.grade_notebook(nb, salt=None, solutions_dir=None)
    deep, honest = results["lesson07_cache_bytes_test"], results["lesson07_repeat_kv_test"]
    assert not deep.passed and "nested too deep" in deep.message, deep
    assert honest.passed, honest


# -- 3. N4/N5/N12: the sandbox shows an allow-list of folders -----------------------------------
@pytest.mark.skipif(sandbox.isolation() != "bubblewrap", reason="bubblewrap cannot make a sandbox here")
def test_the_sandbox_shows_only_the_interpreter_the_environment_and_the_package(tmp_path):
    import os
    from pathlib import Path

    from course_utils.exercises import lesson03

    root = Path(sandbox.__file__).resolve().parents[2]  # the clone around course_utils
    sibling = root.parent / f"planted-by-test-{os.getpid()}"  # another clone beside this one (N5)
    sibling.mkdir()
    try:
        (sibling / "solutions.py").write_text("SECRET = 1\n")
        course = tmp_path / "course"
        course.mkdir()
        probe = ("from pathlib import Path\n"
                 "def score_macs(*a):\n"
                 "    read = []\n"
                 f"    for path in ({str(sibling / 'solutions.py')!r},\n"
                 f"                 {str(root / 'solutions' / 'lesson03.py')!r},\n"
                 f"                 {str(root / 'pyproject.toml')!r}, {str(course)!r}):\n"
                 "        try:\n"
                 "            read.append(len(Path(path).read_bytes()))\n"
                 "        except OSError as exc:\n"
                 "            read.append(type(exc).__name__)\n"
                 "    return (read, sorted(p.name for p in Path('/').iterdir()),\n"
                 f"            sorted(p.name for p in Path({str(root)!r}).iterdir()))\n")
        run = sandbox.run_answer(probe, "score_macs", "lesson03.check_score_macs",
                                 [lesson03.SCORE_MACS.make_cases()[:1]], hide=[course], sandbox=True)
        assert run.lost is None and run.defined is None, run
        outcome = run.outcomes[0][0]
        assert outcome.kind == "value", outcome
        read, top, in_clone = outcome.value
        assert read == ["FileNotFoundError"] * 4, read
        shown = set(sandbox.visible_paths())
        allowed = {p.parts[1] for p in shown} | {"proc", "dev", "tmp"}
        allowed |= {d for d in sandbox.SYSTEM_DIRS if (Path("/") / d).exists()}
        assert set(top) <= allowed and {"proc", "usr"} <= set(top), top
        assert "solutions" in os.listdir(root) and "solutions" not in in_clone, in_clone
        assert set(in_clone) <= {p.parts[len(root.parts)] for p in shown if root in p.parents}, in_clone
    finally:
        for path in sibling.iterdir():
            path.unlink()
        sibling.rmdir()


# -- 4. N1-N5, N13, N14: names built at run time, C-level callers, a forged result -------------
POOL = "(lambda p: (p.submit(int).result(), p)[1])(concurrent.futures.ThreadPoolExecutor(1))"
CHEATS = {  # the trial's answers (its tools/new2.py, new3.py, n14.json), by finding: check, cells, found
    "N1": ("lesson02.check_softmax_rows", ["import pkgutil\ndef softmax_rows(scores, "
           "_f=pkgutil.resolve_name('torch:softmax')):\n"
           "    return next(map(_f, [torch.from_numpy(scores)], [-1])).numpy()"], "pkgutil"),
    "N1d": ("lesson02.check_softmax_rows", ["import operator\ndef softmax_rows(scores):\n"
            "    return operator.methodcaller('soft' + 'max', -1)(torch.from_numpy(scores)).numpy()"],
            "operator"),
    "N2": ("lesson02.check_causal_attention_weights", ["import operator, concurrent.futures\n"
           f"def causal_attention_weights(q, k, _p={POOL}, "
           "_f=operator.attrgetter('nn.functional.scaled_dot_product_attention')(torch)):\n"
           "    eye = torch.eye(k.shape[-2], dtype=q.dtype).expand(*k.shape[:-2], -1, -1).contiguous()\n"
           "    return _p.submit(_f, q, k, eye, is_causal=True).result()"], "concurrent.futures"),
    "N3": ("lesson02.check_single_head_attention", ["import typing",
           "def single_head_attention(x, w_q, w_k, w_v, _f=typing.get_type_hints(_hint)['x']):\n"
           "    return next(map(_f, [x @ w_q], [x @ w_k], [x @ w_v]))",
           ], "get_type_hints"),
    "N4": ("lesson02.check_attention_weights", ["import json, runpy, pathlib\n"
           "def attention_weights(q, k):\n"
           "    nb = json.loads(pathlib.Path('/srv/mate/02.ipynb').read_text())\n"
           "    cells = [''.join(c['source']) for c in nb['cells']]\n"
           "    code = [c for c in cells if 'def attention' in c][0]\n"
           "    pathlib.Path('mate.py').write_text(code)\n"
           "    return runpy.run_path('mate.py')['attention_weights'](q, k)"], "runpy"),
    "N5": ("lesson07.check_decode_step", ["import runpy\n"
           "def decode_step(q_new, k_new, v_new, k_cache, v_cache):\n"
           "    g = runpy.run_path('/work/main/solutions/lesson07.py')\n"
           "    return g['REF' + 'ERENCES']['DECODE_STEP'](q_new, k_new, v_new, k_cache, v_cache)"], "runpy"),
    "N13": ("lesson04.check_mha_forward", ["import pkgutil\n"
            "def mha_forward(x, w_in, b_in, w_out, b_out, num_heads, "
            "_f=pkgutil.resolve_name('torch:_native_multi_head_attention')):\n"
            "    return next(map(lambda a: _f(*a, need_weights=False)[0], "
            "[(x, x, x, x.shape[-1], num_heads, w_in, b_in, w_out, b_out)]))"], "pkgutil"),
    "N14": ("lesson07.check_cache_bytes", [
            "def cache_bytes(num_layers, batch, num_heads, num_kv_heads, d_head, seq_len, bits_per_element,\n"
            "                _save=torch.save, _st={'outs': []}):\n"
            "    out = num_layers * batch * num_kv_heads * d_head * seq_len * bits_per_element // 8\n"
            "    _st['outs'].append(out)\n"
            "    recs = [{'kind': 'value', 'value': o, 'after': [None] * 7, 'used': None, 'tampered': None}"
            " for o in _st['outs']]\n"
            "    _save({'results': [recs[:5], recs[5:]]}, 'result.pt')\n"
            "    torch.save = lambda *a, **k: None\n"
            "    return out"], "torch.save"),
    # the fifth trial: a `match` class pattern reads attributes by keyword or by __match_args__
    "a20": ("lesson04.check_mha_forward", [
            "def mha_forward(x, w_in, b_in, w_out, b_out, num_heads):\n"
            "    match torch:\n        case object(_native_multi_head_attention=fused):\n            pass\n"
            "    return fused(x, x, x, x.shape[-1], num_heads, w_in, b_in, w_out, b_out, None, False)[0]"],
            "`match`"),
    "a21": ("lesson02.check_softmax_rows", [
            "def softmax_rows(scores):\n"
            "    match softmax_rows:\n        case object(__globals__=g):\n            pass\n"
            "    run = g['__buil' + 'tins__']['ev' + 'al']\n"
            "    return run('tor' + 'ch.Tensor.soft' + 'max', g)(torch.from_numpy(scores), -1).numpy()"],
            "`match`"),
    "a22": ("lesson02.check_softmax_rows", [
            "class Anything(type):\n    def __instancecheck__(self, obj):\n        return True",
            "class Picker(metaclass=Anything):\n    __match_args__ = ('Ten' + 'sor',)\n\n\n"
            "class Picker2(metaclass=Anything):\n    __match_args__ = ('soft' + 'max',)",
            "def softmax_rows(scores):\n"
            "    match torch:\n        case Picker(tensor_class):\n            pass\n"
            "    match tensor_class:\n        case Picker2(method):\n            pass\n"
            "    return method(torch.from_numpy(scores), -1).numpy()"], "`__match_args__`"),
    # the fifth trial: numpy's .npy reader unpickles builtins.exec from bytes the answer builds
    "a04": ("lesson02.check_softmax_rows", [
            "class Feed:\n    def __init__(self, data):\n        self.data, self.pos = data, 0\n\n"
            "    def read(self, n=-1):\n        n = len(self.data) - self.pos if n is None or n < 0 else n\n"
            "        chunk = self.data[self.pos:self.pos + n]\n        self.pos += len(chunk)\n"
            "        return chunk",
            "def softmax_rows(scores):\n"
            "    head = b\"{'descr': '|O', 'fortran_order': False, 'shape': (1,), }\"\n"
            "    head = head + b' ' * (63 - (10 + len(head)) % 64) + b'\\n'\n"
            "    data = b'\\x93NUMPY\\x01\\x00' + bytes([len(head), 0]) + head + b'cbuiltins\\nexec\\n.'\n"
            "    run = np.lib.format.read_array(Feed(data), allow_pickle=True)\n"
            "    ns = {}\n    run('import torch; t = torch.softmax', ns)\n"
            "    return ns['t'](torch.from_numpy(scores), dim=-1).numpy()"], "`.read_array`"),
    "a10": ("lesson04.check_mha_forward", [
            "def mha_forward(x, w_in, b_in, w_out, b_out, num_heads, reader=np.lib.format):\n"
            "    run = reader.read_array(x, True)\n    return run"], "`.lib`"),
    # the fifth trial: torch's table of overridable functions, searched by a built name
    "a15": ("lesson02.check_softmax_rows", [
            "def softmax_rows(scores):\n    table = torch.overrides.get_overridable_functions()\n"
            "    fn = [f for group in table.values() for f in group\n"
            "          if f.__name__ == 'soft' + 'max' and f.__qualname__.startswith('Tensor')][0]\n"
            "    return fn(torch.from_numpy(scores), -1).numpy()"], "`.get_overridable_functions`"),
    "a15b": ("lesson02.check_softmax_rows", [
             "def softmax_rows(scores, t=torch.nn.modules):\n"
             "    return t.activation.Softmax(-1)(torch.from_numpy(scores)).numpy()"],
             "the module torch.nn.modules"),
    # the fifth trial: softmax's relatives, which give softmax back
    "a01": ("lesson02.check_softmax_rows", [
            "def softmax_rows(scores):\n    return F.softmin(torch.from_numpy(-scores), dim=-1).numpy()"],
            "`softmin`"),
    "a07": ("lesson02.check_softmax_rows", [
            "def softmax_rows(scores):\n"
            "    return torch.nn.LogSoftmax(-1)(torch.from_numpy(scores)).exp().numpy()"], "`LogSoftmax`"),
    # the fifth trial: the parameter count read off torch's own layers
    "a13": ("lesson03.check_parameter_count", [
            "def parameter_count(d_model, num_heads, bias=True):\n"
            "    layer = torch.nn.MultiheadAttention(d_model, num_heads, bias=bias)\n"
            "    return sum(p.numel() for p in layer.parameters())"], "`MultiheadAttention`"),
    "a13b": ("lesson03.check_parameter_count", [
             "def parameter_count(d_model, num_heads, bias=True):\n"
             "    layer = torch.nn.TransformerEncoderLayer(d_model, num_heads, bias=bias)\n"
             "    return sum(p.numel() for p in layer.self_attn.parameters())"], "`TransformerEncoderLayer`"),
    # the fifth trial: a module imported as `self`, whose attributes an answer may then set
    "a09": ("lesson02.check_softmax_rows", [
            "import torch.nn.functional as self\n"
            "def softmax_rows(scores):\n    self.pad = torch.softmax\n"
            "    return self.pad(torch.from_numpy(scores), -1).numpy()"], "importing as `self`"),
}
CHEATS["N3"][1].insert(
    1, "def _hint(x: \"__import__('torch').nn.functional.scaled_dot_product_attention\"): pass")


@pytest.mark.parametrize("finding", sorted(CHEATS))
def test_each_cheat_of_the_third_trial_scores_zero_and_is_named(finding):
    check_key, cells, named = CHEATS[finding]
    lesson, check = check_key.split(".")
    name = cells[-1].split("def ", 1)[1].split("(", 1)[0]
    code = sandbox.answer_source([HEAD, *cells], name, len(cells))
    broken = sandbox.rules_broken(code, check_key)
    assert any(named in b for b in broken), broken
    feedback = autograde.grade_answer(lesson, check, code, name, salt=None, solutions_dir=None)
    assert not feedback.passed and named in feedback.message, feedback
    preview = sandbox.grading_preview([HEAD, *cells], name, check_key)  # the learner is warned too
    assert any(named in p for p in preview), preview


@pytest.mark.parametrize(("body", "named"), [
    ("np.load('x.npy')", "`.load`"), ("np.fromfile('x')", "`.fromfile`"), ("torch.load('x.pt')", "`.load`"),
    ("torch.from_file('x', size=3)", "`.from_file`"), ("open('x').read()", "`open`"),
    ("np.memmap('x')", "`.memmap`"),
])
def test_file_readers_of_allowed_modules_are_refused(body, named):
    code = f"import numpy as np\nimport torch\ndef score_macs(*a):\n    return {body}\n"
    assert any(named in b for b in sandbox.rules_broken(code, "lesson03.check_score_macs"))


@pytest.mark.parametrize("statement", ["torch.save = print", "np.sum = max", "F.softmax = max",
                                       "torch.Tensor.softmax = max", "del torch.softmax",
                                       "t = torch.Tensor\n    t.softmax = max"])
def test_assigning_an_attribute_of_a_module_or_a_library_object_is_refused(statement):
    code = (f"import numpy as np\nimport torch\nimport torch.nn.functional as F\n"
            f"def score_macs(*a):\n    {statement}\n    return 0\n")
    assert any("assigning" in b for b in sandbox.rules_broken(code, "lesson03.check_score_macs"))


@pytest.mark.parametrize("imports", ["import torch.hub", "from torch import hub", "from torch import *",
                                     "import torch.utils.cpp_extension", "from . import x",
                                     "from functools import singledispatch", "import types"])
def test_imports_outside_the_allow_list_are_refused(imports):
    code = f"{imports}\ndef score_macs(*a):\n    return 0\n"
    assert sandbox.rules_broken(code, "lesson03.check_score_macs"), imports


def test_an_honest_answer_with_allowed_imports_and_its_own_class_breaks_no_rule():
    code = ("from __future__ import annotations\nimport math\nimport itertools\nimport functools\n"
            "from collections import defaultdict\nfrom dataclasses import dataclass\nfrom typing import Any\n"
            "import numpy as np\nimport torch\nfrom torch import nn\nimport torch.nn.functional as F\n"
            "class Box:\n    def __init__(self, v: Any):\n        self.v = v\n"
            "def score_macs(seq_len, d_model, num_heads):\n    b = Box(seq_len * seq_len * d_model)\n"
            "    return functools.reduce(lambda x, y: x * y, [b.v], 1)\n")
    assert sandbox.rules_broken(code, "lesson03.check_score_macs") == []


# -- 5. N8: outputs far larger than the right ones; the result channel ---------------------------
def test_outputs_far_larger_than_the_right_ones_are_refused_unread():
    cells = [HEAD, "def repeat_kv(kv, num_heads):\n    return torch.zeros(2_000_000)"]
    feedback = _grade("lesson07", "check_repeat_kv", cells, "repeat_kv")
    assert not feedback.passed and "MiB the grader reads" in feedback.message, feedback
    exercise = autograde.exercise_of("lesson07", "check_repeat_kv")
    cap = autograde.result_cap(exercise, autograde.cases_of(exercise))
    assert 2**20 < cap < 8 * 2_000_000 * 4, cap  # one such output alone is over it


def test_the_result_comes_from_the_harness_not_a_file_the_answer_can_name():
    """An answer that writes a forged result where the harness used to write, then makes
    torch.save do nothing (N14), gets no forged value recorded: the changed torch.save is named
    as tampering (run without the static rules, which refuse it before any process starts)."""
    from course_utils.exercises import lesson03

    code = ("import torch\n"
            "def score_macs(seq_len, d_model, num_heads):\n"
            "    torch.save({'results': [[{'kind': 'value', 'value': 42}]]}, 'result.pt')\n"
            "    torch.save = lambda *a, **k: None\n"
            "    return -1\n")
    run = sandbox.run_answer(code, "score_macs", "lesson03.check_score_macs",
                             [lesson03.SCORE_MACS.make_cases()[:1]])
    outcome = run.outcomes[0][0]
    assert run.lost is None and outcome.value is None and "torch.save" in outcome.tampered, run


def test_folders_shown_under_tmp_are_bound_after_the_empty_tmp(monkeypatch, tmp_path):
    """A clone or environment under /tmp (CI's fresh clone) must stay visible: bubblewrap mounts
    in order, so the empty /tmp must come before the read-only binds, not hide them."""
    from pathlib import Path

    from course_utils.exercises import sandbox

    inside = Path("/tmp/some-clone/.venv")
    monkeypatch.setattr(sandbox, "visible_paths", lambda: (inside,))
    argv = sandbox._bwrap_argv(tmp_path, [])
    empty_tmp = max(i for i, a in enumerate(argv[:-1]) if a == "--tmpfs" and argv[i + 1] == "/tmp")
    bound = argv.index(str(inside))
    assert argv[bound - 1] == "--ro-bind" and empty_tmp < bound - 1


# -- the fifth trial: definitions of one cell keep their order under any hash seed -------------
ORDER_CELLS = ["import torch", "class Base:\n    scale = 2.0\n\n\nclass Scaled(Base):\n    pass\n\n\n"
               "def repeat_kv(kv, num_heads):\n"
               "    return kv.repeat_interleave(num_heads // kv.shape[1], dim=1) * Scaled.scale / 2"]
ORDER_SCRIPT = f"""
import ast
from course_utils.exercises import sandbox
code = sandbox.answer_source({ORDER_CELLS!r}, "repeat_kv", 1)
print(" ".join(n.name for n in ast.parse(code).body if isinstance(n, (ast.ClassDef, ast.FunctionDef))))
"""


def test_a_base_class_comes_before_its_subclass_of_the_same_cell_under_any_hash_seed():
    """Two hash seeds: this process's own (0 under `python3 course.py test`, which sets
    PYTHONHASHSEED) and another in one fresh process (3, or 0 where this process runs under 3)."""
    import os
    import subprocess
    import sys

    code = sandbox.answer_source(ORDER_CELLS, "repeat_kv", 1)
    here = [n.name for n in ast.parse(code).body if isinstance(n, (ast.ClassDef, ast.FunctionDef))]
    assert here == ["Base", "Scaled", "repeat_kv"], (os.environ.get("PYTHONHASHSEED"), here)
    seed = "0" if os.environ.get("PYTHONHASHSEED") == "3" else "3"
    env = {**os.environ, "PYTHONHASHSEED": seed}
    out = subprocess.run([sys.executable, "-c", ORDER_SCRIPT], env=env, capture_output=True,
                         text=True, check=True, timeout=120).stdout.split()
    assert out == ["Base", "Scaled", "repeat_kv"], (seed, out)


# -- the cold trial's C16: HTML in a student's markdown runs in the instructor's Formgrader -------
def test_the_students_markdown_and_raw_cells_keep_no_live_html_after_autograde():
    import nbformat

    payload = '<img src="x" onerror="fetch(\'/formgrader/api/grade/1\', {method: \'PUT\'})">'
    nb = _notebook([("check_repeat_kv", "repeat_kv", DECORATED[2].replace("@checked\n", ""))])
    locked = nbformat.v4.new_markdown_cell("<b>the lesson's own text</b>",
                                           metadata={"nbgrader": {"locked": True, "grade_id": "intro"}})
    raw = nbformat.v4.new_raw_cell(payload, metadata={"format": "text/html"})
    nb.cells[:0] = [locked, nbformat.v4.new_markdown_cell("Thanks! " + payload), raw]
    results = autograde.grade_notebook(nb, salt=None, solutions_dir=None)
    assert results["lesson07_repeat_kv_test"].passed
    assert nb.cells[0].source == "<b>the lesson's own text</b>"  # nbgrader put it back from the source
    for cell in nb.cells[1:3]:
        assert "<img" not in cell.source and "&lt;img" in cell.source, cell.source
    assert "format" not in nb.cells[2].metadata
