"""The outside grader's reading of an answer's code against the cold trial's escapes (its notes
C1-C14, C19): each cheat is refused before any process starts and scores 0, and honest answers
that look alike break no rule."""

from __future__ import annotations

import pytest

from course_utils.exercises import autograde, sandbox

HEAD = "import math\nimport numpy as np\nimport torch\nimport torch.nn.functional as F\n"
TRANSFORMER = ("def mha_forward(x, w_in, b_in, w_out, b_out, num_heads):\n"
               "    layer = torch.nn.{cls}(x.shape[-1], num_heads, dropout=0.0, batch_first=True)\n"
               "    found = []\n    layer.apply(found.append)\n    return x\n")
CHEATS = {  # finding: (check, cells, what the refusal names)
    "C1": ("lesson02.check_softmax_rows", [
           "def softmax_rows(scores):\n    try:\n        raise KeyError\n    except KeyError as e:\n"
           "        b = e.__traceback__.tb_frame.f_builtins\n"
           "    return b['get' + 'attr'](np.exp(scores), 'cop' + 'y')()"], "`.__traceback__`"),
    "C4": ("lesson02.check_softmax_rows", [
           "def _gen():\n    yield 1", "def softmax_rows(scores):\n    b = _gen().gi_frame.f_builtins\n"
           "    return b['get' + 'attr'](np.exp(scores), 'cop' + 'y')()"], "`.gi_frame`"),
    "C3": ("lesson02.check_softmax_rows", [
           "def softmax_rows(scores):\n    box = []\n"
           "    np.__getattr__('f2py').crackfortran.myeval('box.append(1)', {'box': box})\n    return box"],
           "`.__getattr__`"),
    "C5": ("lesson04.check_mha_forward", [
           "import typing\ndef mha_forward(x, w_in, b_in, w_out, b_out, num_heads):\n"
           "    return typing.operator.attrgetter('multi_head_attention_for' + 'ward')(F)(x)"],
           "the module typing.operator"),
    "C5b": ("lesson04.check_mha_forward", [
            "from typing import operator\ndef mha_forward(x, w_in, b_in, w_out, b_out, num_heads):\n"
            "    return operator.attrgetter('multi_head_attention_for' + 'ward')(F)(x)"],
            "`from typing import operator`"),
    "C5c": ("lesson04.check_mha_forward", [
            "def mha_forward(x, w_in, b_in, w_out, b_out, num_heads):\n"
            "    return torch.platform.system()"], "the module torch.platform"),
    "C6": ("lesson02.check_single_head_attention", [
           "def single_head_attention(x, w_q, w_k, w_v):\n"
           "    attn = next(torch.nn.TransformerEncoderLayer(4, 1, dropout=0.0).children())\n"
           "    return attn(x, x, x)[0]"], "`TransformerEncoderLayer`"),
    "C6c": ("lesson04.check_mha_forward", [TRANSFORMER.format(cls="TransformerDecoderLayer")],
            "`TransformerDecoderLayer`"),
    "C14": ("lesson04.check_mha_forward", [TRANSFORMER.format(cls="Transformer")], "`Transformer`"),
    "C7b": ("lesson04.check_mha_forward", [
            "def put(self, f):\n    self.clone = f",
            "def mha_forward(x, w_in, b_in, w_out, b_out, num_heads):\n"
            "    put(torch.Tensor, lambda t: t)\n    return x"], "assigning `self.clone`"),
    "C9": ("lesson02.check_softmax_rows", [
           "def softmax_rows(scores):\n    object.__setattr__(np, 'ascontiguous' + 'array', list)\n"
           "    return scores"], "`.__setattr__`"),
    "C12": ("lesson02.check_softmax_rows", [
            "def softmax_rows(scores):\n    t = torch.from_numpy(scores)\n"
            "    return torch.exp(-F.cross_entropy(t, torch.zeros(t.shape[0], dtype=torch.long),"
            " reduction='none')).numpy()"], "`import torch`"),
    "C12b": ("lesson02.check_softmax_rows", [
             "def softmax_rows(scores):\n"
             "    t = torch.from_numpy(scores)\n"
             "    return torch.distributions.Categorical(logits=t).logits.exp().numpy()"],
             "`import torch`"),
    "C13": ("lesson02.check_attention_weights", [
            "import functools\nclass Grab:\n    got = []\n",
            "def attention_weights(q, k):\n    g = Grab()\n"
            "    functools.update_wrapper(g, torch, assigned=('soft' + 'max',), updated=())\n"
            "    return Grab.got[0](q @ k.transpose(-2, -1), -1)"], "`.update_wrapper`"),
    "C19": ("lesson02.check_attention_weights", [
            "import functools\n",
            "def attention_weights(q, k):\n"
            "    return functools.wraps(torch)(q)"], "`.wraps`"),
    # C22: a module held by an allowed one, reached from a call's result (no chain to follow)
    "C22": ("lesson02.check_attention_weights", [
            "import typing\ndef mods():\n    return typing",
            "def fetch():\n    return mods().operator.attrgetter('scaled_dot_product_' + 'attention')(F)",
            "def attention_weights(q, k, sdpa=fetch()):\n    return sdpa(q, k, q)"], "`.operator`"),
    "C22b": ("lesson04.check_mha_forward", [
             "import dataclasses\ndef mha_forward(x, w_in, b_in, w_out, b_out, num_heads):\n"
             "    return [dataclasses][0].types.FunctionType"], "`.types`"),
    "5.3-core": ("lesson05.check_find_induction_head", [
                 "from course_utils.exercises import core\n"
                 "def find_induction_head(attn, period):\n    return core.LIBRARY_TWINS"],
                 "`from course_utils.exercises import`"),
}


@pytest.mark.parametrize("finding", sorted(CHEATS))
def test_each_escape_of_the_cold_trial_is_refused_and_scores_zero(finding):
    check_key, cells, named = CHEATS[finding]
    lesson, check = check_key.split(".")
    name = cells[-1].split("def ", 1)[1].split("(", 1)[0]
    code = sandbox.answer_source([HEAD, *cells], name, len(cells))
    broken = sandbox.rules_broken(code, check_key)
    assert any(named in b for b in broken), broken
    feedback = autograde.grade_answer(lesson, check, code, name, salt=None, solutions_dir=None)
    assert not feedback.passed and named in feedback.message, feedback
    if check_key == "lesson02.check_softmax_rows" and named == "`import torch`":  # 2.1 is numpy only
        assert "imports only collections, dataclasses, itertools, math, numpy, typing)" in feedback.message


HONEST_CLASS = ("class Scorer:\n    def __init__(self, scale):\n        self.scale = scale\n\n"
                "    @classmethod\n    def make(cls, scale):\n        cls.made = True\n"
                "        return cls(scale)\n\n"
                "    def score(self, d_model):\n        self.last = d_model\n"
                "        return self.scale * d_model\n")


def test_an_answer_sets_attributes_through_a_methods_first_parameter_only():
    ok = HONEST_CLASS + ("def score_macs(seq_len, d_model, num_heads):\n"
                         "    return Scorer.make(seq_len).score(d_model)\n")
    assert sandbox.rules_broken(ok, "lesson03.check_score_macs") == []
    for bad in ("class H:\n    def put(this, self, f):\n        self.clone = f\n",  # self, not first
                "class H:\n    def put(self, f):\n        self = f\n        self.clone = f\n",  # rebound
                "class H:\n    def put(self, f):\n        def inner(self):\n            self.clone = f\n",
                "def put(cls, f):\n    cls.clone = f\n"):  # a plain function
        code = bad + "def score_macs(*a):\n    return 0\n"
        assert any("assigning" in b for b in sandbox.rules_broken(code, "lesson03.check_score_macs")), bad


def test_lesson_5_3_may_import_the_scores_module_and_nothing_else_of_the_course():
    ok = ("from course_utils.interp.scores import best_head\nimport torch\n"
          "def find_induction_head(attn, period):\n    return best_head(attn.sum(-1).sum(-1))\n")
    assert sandbox.rules_broken(ok, "lesson05.check_find_induction_head") == []
    for bad in ("import course_utils.attention.gqa", "from course_utils.exercises import sandbox",
                "from course_utils import paths"):
        code = bad + "\ndef find_induction_head(attn, period):\n    return 0\n"
        assert sandbox.rules_broken(code, "lesson05.check_find_induction_head"), bad


def test_refusing_a_module_name_imports_nothing_in_the_grader():
    import subprocess
    import sys

    script = ("import sys\nfrom course_utils.exercises import sandbox\n"
              "before = set(sys.modules)\n"
              "sandbox.rules_broken('import torch\\ndef f(x, t=torch._dynamo.config):\\n    return x\\n',"
              " 'lesson03.check_score_macs')\n"
              "print(sorted(m for m in set(sys.modules) - before if m.startswith('torch._dynamo')))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         timeout=300).stdout.strip().splitlines()[-1]
    assert out == "[]", out
