"""Battery 23 (issue 38), what fix53 left: path_patched_logits's ``outputs`` of other tokens,
a check held by an answer's slow ``__str__`` / ``__repr__``, an answer's own trace function left
installed, exercise_answers.py's traceback for a solutions module that raises at import, and
check_distinct's list of tensors."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch
from bad_input_cases import import_script, raises_naming

from course_utils.exercises import lesson07
from course_utils.interp.ablation import head_outputs
from course_utils.interp.patching import path_patched_logits
from course_utils.model.transformer import ModelConfig, TinyTransformer

ROOT = Path(__file__).resolve().parents[1]


# -- path_patched_logits compares the senders' outputs in `outputs` with its own run --------------
def _model_and_tokens():
    torch.manual_seed(0)
    model = TinyTransformer(ModelConfig(vocab_size=16, max_len=8, d_model=8, num_heads=2, num_layers=3))
    tokens = torch.randint(0, 16, (2, 6), generator=torch.Generator().manual_seed(2))
    return model, tokens


@pytest.mark.parametrize("other", [lambda t: t.flip(1), lambda t: t.flip(0), lambda t: (t + 1) % 16],
                         ids=["positions reversed", "batch reversed", "other ids"])
def test_path_patching_refuses_outputs_of_other_tokens(other):
    """Battery 23: head outputs of other tokens were used silently (logits off by up to 0.047)."""
    model, tokens = _model_and_tokens()
    source = head_outputs(model, tokens.flip(0))
    raises_naming(ValueError, ["outputs", "L0H1", "other tokens"],
                  lambda: path_patched_logits(model, tokens, source, [(0, 1)], [(1, 0), (2, 1)],
                                              outputs=head_outputs(model, other(tokens))))


def test_path_patching_takes_outputs_of_these_tokens_and_gives_the_same_logits():
    model, tokens = _model_and_tokens()
    source = head_outputs(model, tokens.flip(0))
    senders, receivers = [(0, 1), (1, 0)], [(2, 0), (2, 1)]
    given = path_patched_logits(model, tokens, source, senders, receivers,
                                outputs=head_outputs(model, tokens))
    computed = path_patched_logits(model, tokens, source, senders, receivers)
    torch.testing.assert_close(given, computed)


def test_path_patching_names_outputs_not_source_outputs_for_a_misshaped_outputs():
    model, tokens = _model_and_tokens()
    raises_naming(ValueError, ["outputs must be head_outputs(model, tokens)", "(3, 2, 2, 6, 4)"],
                  lambda: path_patched_logits(model, tokens, head_outputs(model, tokens), [(0, 1)], [(1, 0)],
                                              outputs=torch.zeros(3, 2, 2, 5, 4)))


