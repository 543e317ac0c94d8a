"""Battery 16a (issue 38), fix46r: checkpoint saves that are interrupted, and the task/model
records and functions that took bad input silently or failed deep inside torch."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from course_utils.model import checkpoint as C
from course_utils.model.transformer import ModelConfig, TinyTransformer

CFG = ModelConfig(vocab_size=12, max_len=10, d_model=16, num_heads=4, num_layers=1)
REPO = Path(__file__).resolve().parents[1]


def _model(seed: int) -> TinyTransformer:
    torch.manual_seed(seed)
    return TinyTransformer(CFG)


# -- save_checkpoint stopped while writing (data loss) ---------------------------------------------
_CHILD = textwrap.dedent("""
    import os, signal, sys, torch
    from pathlib import Path
    from course_utils.model import checkpoint as C
    from course_utils.model.transformer import ModelConfig, TinyTransformer
    folder, sig = Path(sys.argv[1]), int(sys.argv[2])
    real = C._write_new

    def dies_midway(path, data):  # half the bytes written, then the signal
        if path.name.endswith(".safetensors.saving"):
            real(path, data[: len(data) // 2])
            os.kill(os.getpid(), sig)
        real(path, data)

    C._write_new = dies_midway
    torch.manual_seed(1)
    cfg = ModelConfig(vocab_size=12, max_len=10, d_model=16, num_heads=4, num_layers=1)
    C.save_checkpoint(TinyTransformer(cfg), folder / "toy", task="t", metrics={}, command="c")
    sys.exit(7)  # not reached once the weights go through _write_new
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_save_killed_while_writing_leaves_only_names_the_next_save_removes(tmp_path, sig):
    """Every temporary file is one of save_checkpoint's own names (safetensors' anonymous
    ``.tmpXXXX`` is gone); SIGTERM rolls the save back like Ctrl-C; the next save tidies up."""
    old = _model(0)
    C.save_checkpoint(old, tmp_path / "toy", task="t", metrics={}, command="c")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path), str(int(sig))], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -sig, done.stderr[-2000:]
    left = {p.name for p in tmp_path.iterdir()}
    if sig == signal.SIGTERM:  # rolled back: the old pair, byte for byte, and nothing else
        assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    else:
        assert left <= set(before) | {".toy.safetensors.saving", ".toy.json.saving"}, left
    loaded = C.load_checkpoint(tmp_path / "toy", task="t", device="cpu")[0]
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), old.state_dict().values(),
                                                 strict=True))
    C.save_checkpoint(_model(2), tmp_path / "toy", task="t", metrics={}, command="c")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["toy.json", "toy.safetensors"]


def test_a_weights_write_that_fails_midway_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    C.save_checkpoint(_model(0), tmp_path / "toy", task="t", metrics={}, command="c")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    real, seen = C._write_new, []

    def full_disk(path, data):
        seen.append(path.name)
        real(path, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(C, "_write_new", full_disk)
    with pytest.raises(C.CheckpointError, match=r"checkpoint toy in the folder .*No space left"):
        C.save_checkpoint(_model(1), tmp_path / "toy", task="t", metrics={}, command="c")
    assert seen == [".toy.safetensors.saving"]  # the weights go through the module's own writer
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


# -- batch records: meta tensors and value ranges (silent) ------------------------------------------
def _induction():
    from course_utils.tasks.synthetic import InductionTask

    task = InductionTask(vocab_size=20, seq_len=16, train_periods=(2, 3, 4))
    return task.sample(4, torch.Generator().manual_seed(0))


def _agreement():
    from course_utils.tasks.synthetic import AgreementTask

    return AgreementTask().sample(6, torch.Generator().manual_seed(0))


def _mixture():
    from course_utils.tasks.synthetic import MixtureTask

    return MixtureTask().sample(4, torch.Generator().manual_seed(0))


def _meta(t):
    return torch.empty(t.shape, dtype=t.dtype, device="meta")


def _set(t, value):
    t = t.clone()
    t.view(-1)[0] = value
    return t


@pytest.mark.parametrize("make, field, change, words", [
    (_induction, "periods", _meta, ["InductionBatch.periods", "meta"]),
    (_induction, "scored", _meta, ["InductionBatch.scored", "meta"]),
    (_induction, "periods", lambda t: _set(t, -1), ["InductionBatch.periods", "2..16", "-1"]),
    (_induction, "periods", lambda t: _set(t, 0), ["InductionBatch.periods", "2..16", "got 0"]),
    (_induction, "periods", lambda t: _set(t, 10**6), ["InductionBatch.periods", "1000000"]),
    (_agreement, "lengths", _meta, ["AgreementBatch.lengths", "meta"]),
    (_agreement, "subject_pos", _meta, ["AgreementBatch.subject_pos", "meta"]),
    (_agreement, "verb_pos", _meta, ["AgreementBatch.verb_pos", "meta"]),
    (_agreement, "plural", _meta, ["AgreementBatch.plural", "meta"]),
    (_agreement, "attractor", _meta, ["AgreementBatch.attractor", "meta"]),
    (_mixture, "targets", _meta, ["MixtureBatch.targets", "meta"]),
    (_mixture, "real", _meta, ["MixtureBatch.real", "meta"]),
    (_mixture, "targets", lambda t: _set(t, -1), ["MixtureBatch.targets", "next token", "got -1"]),
    (_mixture, "targets", lambda t: _set(t, 10**6), ["MixtureBatch.targets", "got 1000000"]),
])
def test_batch_records_refuse_meta_tensors_and_values_out_of_range(make, field, change, words):
    from dataclasses import replace

    batch = make()
    with pytest.raises(ValueError) as info:
        replace(batch, **{field: change(getattr(batch, field))})
    assert all(w in str(info.value) for w in words), str(info.value)


def test_agreement_batch_refuses_the_same_verb_as_correct_and_wrong():
    from dataclasses import replace

    batch = _agreement()
    with pytest.raises(ValueError, match=r"AgreementBatch.correct_id and AgreementBatch.wrong_id must"):
        replace(batch, wrong_id=batch.correct_id.clone())


def test_the_batches_the_tasks_make_still_pass():
    from course_utils.tasks.synthetic import MixtureTask

    for make in (_induction, _agreement, _mixture):
        make()
    MixtureTask().induction_eval(64)
    MixtureTask().agreement_eval(64)


# -- Quantized: a NamedTuple that checks its fields (silent) ----------------------------------------
def _codes(dtype=torch.int8, shape=(2, 3)):
    return torch.zeros(shape, dtype=dtype)


_SCALE = torch.ones(2, 1)


@pytest.mark.parametrize("codes, scale, zero, error, words", [
    (_codes().to("meta"), _SCALE, None, ValueError, ["Quantized.codes", "meta"]),
    (torch.zeros(2, 3), _SCALE, None, TypeError, ["Quantized.codes", "torch.int8", "float32"]),
    (_codes(torch.bool), _SCALE, None, TypeError, ["Quantized.codes", "torch.bool"]),
    (_codes(shape=(1, 2, 3)), _SCALE, None, ValueError, ["Quantized.scale", "fit the codes", "(1, 2, 3)"]),
    (_codes(shape=(3,)), _SCALE, None, ValueError, ["Quantized.codes", "2-D", "(3)"]),
    (None, _SCALE, None, TypeError, ["Quantized.codes", "NoneType"]),
    ("tensor", _SCALE, None, TypeError, ["Quantized.codes", "str"]),
    (torch.full((2, 3), -128, dtype=torch.int8), _SCALE, None, ValueError, ["Quantized.codes", "-128"]),
    (_codes(), torch.empty(2, 1, device="meta"), None, ValueError, ["Quantized.scale", "meta"]),
    (_codes(), torch.full((2, 1), float("nan")), None, ValueError, ["Quantized.scale", "nan"]),
    (_codes(), torch.tensor([[1.0], [float("inf")]]), None, ValueError, ["Quantized.scale", "inf"]),
    (_codes(), torch.ones(2, 1, dtype=torch.long), None, TypeError, ["Quantized.scale", "int64"]),
    (_codes(), _SCALE.numpy(), None, TypeError, ["Quantized.scale", "ndarray"]),
    (_codes(), torch.ones(1, 2, 1), None, ValueError, ["Quantized.scale", "(1, 2, 1)"]),
    (_codes(), torch.ones(1), None, ValueError, ["Quantized.scale", "(1)"]),
    (_codes(), None, None, TypeError, ["Quantized.scale", "NoneType"]),
    (_codes(), -_SCALE, None, ValueError, ["Quantized.scale", "above 0", "-1.0"]),
    (_codes(torch.uint8), _SCALE, object(), TypeError, ["Quantized.zero", "object"]),
    (_codes(torch.uint8), _SCALE, "x", TypeError, ["Quantized.zero", "'x'"]),
])
def test_quantized_checks_its_fields_when_built(codes, scale, zero, error, words):
    from course_utils.model.kv_cache import Quantized

    with pytest.raises(error) as info:
        Quantized(codes, scale, zero)
    assert all(w in str(info.value) for w in words), str(info.value)


def test_quantized_from_quantize_kv_still_round_trips():
    from course_utils.model.kv_cache import Quantized, dequantize_kv, quantize_kv

    x = torch.randn(2, 5, 4)
    for symmetric in (True, False):
        q = quantize_kv(x, "token", symmetric=symmetric)
        codes, scale, zero = q  # still a tuple
        assert isinstance(q, Quantized) and (zero is None) == symmetric
        assert torch.allclose(dequantize_kv(Quantized(codes, scale, zero)), x, atol=0.05)


# -- the two-key lookup: records, empty batches, labels, callbacks, meta models ---------------------
def _lookup_run():
    from course_utils.tasks.two_relations import RelationsConfig, TwoKeyTask, train_lookup

    return train_lookup(TwoKeyTask(), 2, seed=0, config=RelationsConfig(steps=4, eval_every=2, eval_size=64))


@pytest.fixture(scope="module")
def lookup_run():
    return _lookup_run()


@pytest.mark.parametrize("num_heads", [0, 10**13, 7])
def test_run_result_num_heads_must_be_the_models(lookup_run, num_heads):
    from dataclasses import replace

    with pytest.raises(ValueError) as info:
        replace(lookup_run, num_heads=num_heads)
    assert "RunResult.num_heads" in str(info.value) and str(num_heads) in str(info.value)


def test_evaluate_refuses_an_empty_batch(lookup_run):
    from course_utils.tasks.two_relations import LookupBatch, TwoKeyTask, evaluate

    empty = LookupBatch(*(t[:0] for t in TwoKeyTask().sample(4, seed=0)))  # take refuses an empty one
    with pytest.raises(ValueError, match=r"batch must hold at least one example.*0 examples"):
        evaluate(lookup_run.model, empty)


def test_lookup_batch_relation_must_follow_the_keys():
    from course_utils.tasks.two_relations import LookupBatch, TwoKeyTask

    batch = TwoKeyTask().sample(4, seed=0)
    relation = batch.relation.clone()
    relation[0, 0] = 5
    with pytest.raises(ValueError, match=r"LookupBatch.relation .*got 5"):
        LookupBatch(*batch[:4], relation, batch.target)


@pytest.mark.parametrize("title", [123, b"t", None])
@pytest.mark.parametrize("plot", ["plot_learning_curves", "plot_item_attention"])
def test_plot_titles_must_be_text(lookup_run, plot, title):
    import matplotlib

    matplotlib.use("Agg")
    from course_utils.tasks import two_relations as R

    args = (([lookup_run],) if plot == "plot_learning_curves"
            else (lookup_run.model, R.TwoKeyTask().sample(4, seed=0)))
    with pytest.raises(TypeError) as info:
        getattr(R, plot)(*args, title=title)
    assert "title must be a str" in str(info.value) and type(title).__name__ in str(info.value)


def test_train_lookup_checks_on_eval_arity_before_training():
    from course_utils.tasks.two_relations import RelationsConfig, TwoKeyTask, train_lookup

    with pytest.raises(TypeError, match=r"on_eval must be .*4 positional arguments.*<lambda>\(a\)"):
        train_lookup(TwoKeyTask(), 1, seed=0, config=RelationsConfig(steps=1, eval_every=1, eval_size=8),
                     on_eval=lambda a: a)


def test_train_model_checks_sample_batch_arity():
    from course_utils.model.train import TrainConfig, train_model

    with pytest.raises(TypeError, match=r"sample_batch must be .*1 positional argument.*<lambda>\(\)"):
        train_model(_model(0), lambda: None, TrainConfig(steps=1), seed=0)


def _meta_copy(model):
    import copy

    return copy.deepcopy(model).to("meta")


@pytest.mark.parametrize("call", ["attention_by_copies", "share_on_a", "weight_on_keys", "accuracy_by_share",
                                  "swap_fraction", "swap_chance", "plot_item_attention", "evaluate"])
def test_lookup_functions_refuse_a_meta_model(lookup_run, call):
    from course_utils.tasks import two_relations as R

    with pytest.raises(ValueError, match=r"model is on the meta device"):
        getattr(R, call)(_meta_copy(lookup_run.model), R.TwoKeyTask().sample(8, seed=0))


def test_tiny_transformer_and_train_model_refuse_a_meta_model():
    from course_utils.model.train import TrainConfig, train_model

    meta = _meta_copy(_model(0))
    with pytest.raises(ValueError, match=r"model is on the meta device"):
        meta(torch.zeros(1, 3, dtype=torch.long, device="meta"))

    def batch(generator):
        return torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, 4, dtype=torch.long)

    with pytest.raises(ValueError, match=r"model is on the meta device"):
        train_model(meta, batch, TrainConfig(steps=1), seed=0)


# -- the agreement grammar's helpers and task ---------------------------------------------------------
@pytest.mark.parametrize("bad", [-1, 10**6])
def test_subject_position_refuses_ids_outside_the_vocabulary(bad):
    from course_utils.tasks.synthetic import subject_position, tokenize

    tokens = tokenize("the keys on the table are")
    tokens[0] = bad
    with pytest.raises(ValueError) as info:
        subject_position(tokens)
    assert "tokens must hold" in str(info.value) and str(bad) in str(info.value)


def test_detokenize_refuses_a_meta_tensor():
    from course_utils.tasks.synthetic import detokenize

    with pytest.raises(ValueError, match=r"tokens is on the meta device"):
        detokenize(torch.zeros(4, dtype=torch.long, device="meta"))


def test_agreement_task_templates_must_be_names():
    from course_utils.tasks.synthetic import AgreementTask

    with pytest.raises(TypeError, match=r"AgreementTask.templates must hold template names .*got list"):
        AgreementTask(templates=(["simple", "prepositional"],))


# -- the worked example's written-out sum ------------------------------------------------------------
@pytest.mark.parametrize("field, value", [("total", -1.0), ("sum", -1.0), ("total", 104.001)])
def test_cheap_expansion_sums_must_agree_with_its_terms(field, value):
    from dataclasses import replace

    from course_utils.tasks.worked_example import load_worked_example

    cheap = load_worked_example().cheap
    with pytest.raises(ValueError) as info:
        replace(cheap, **{field: value})
    assert f"CheapExpansion.{field}" in str(info.value) and str(value) in str(info.value)


@pytest.mark.parametrize("after", ["weights", "sidecar"])
def test_an_interrupt_just_after_a_rename_leaves_a_consistent_pair(tmp_path, monkeypatch, after):
    """Ctrl-C (or SIGTERM, now handled alike) landing right after a rename returns, before the
    save notes it: found by interrupt.py (SIGINT at 0.03 s loaded a new sidecar on old weights)."""
    C.save_checkpoint(_model(0), tmp_path / "toy", task="t", metrics={}, command="c")
    real = Path.replace

    def interrupted(self, target):
        done = real(self, target)
        if str(target).endswith(".safetensors" if after == "weights" else ".json"):
            raise KeyboardInterrupt
        return done

    monkeypatch.setattr(Path, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        C.save_checkpoint(_model(1), tmp_path / "toy", task="t", metrics={}, command="c")
    monkeypatch.undo()
    C.load_checkpoint(tmp_path / "toy", task="t", device="cpu")  # sha256 of the weights matches the sidecar
    assert sorted(p.name for p in tmp_path.iterdir()) == ["toy.json", "toy.safetensors"]
