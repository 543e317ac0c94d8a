"""Odd values given to the library: int and str subclasses whose repr raises, lists whose len()
raises, a model holding a NaN weight, a replaced model config, copies of an explorer. Each is
refused by name, with the value shown by ``shown`` (never its own raising repr), or handled
(batteries 30 and 31)."""
from __future__ import annotations

import functools

import pytest
import torch

from tests.bad_input_cases import BadRepr, LyingLen, LyingStr, raises_naming


class Int(int):
    """A valid int whose repr and str raise: it must be accepted and work."""

    def __repr__(self) -> str:
        raise RuntimeError("repr exploded")

    __str__ = __repr__


def _tiny(**overrides):
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    torch.manual_seed(0)
    fields = dict(vocab_size=12, max_len=10, d_model=16, num_heads=4, num_layers=2)
    fields.update(overrides)
    return TinyTransformer(ModelConfig(**fields))


@pytest.mark.parametrize("kind", ["induction", "agreement", "mixture"])
def test_evaluate_names_the_models_nan_weight(kind: str) -> None:
    from course_utils.model import train

    config = {"induction": train.induction_model_config, "agreement": train.agreement_model_config,
              "mixture": train.mixture_model_config}[kind](num_layers=1)
    model = train._build_model(config, 0, torch.device("cpu"))
    with torch.no_grad():
        model.blocks[0].ln_attn.weight[0] = float("nan")
    evaluate = {"induction": lambda: train.evaluate_induction(model, batch_size=16),
                "agreement": lambda: train.evaluate_agreement(model, batch_size=16),
                "mixture": lambda: train.evaluate_mixture(model)}[kind]
    raises_naming(ValueError, ["model's weights", "blocks.0.ln_attn.weight", "nan"], evaluate)


class BadFloat(float):
    """A valid float whose repr and str raise."""

    def __repr__(self) -> str:
        raise RuntimeError("repr exploded")

    __str__ = __repr__


# -- a valid int (or float) subclass whose repr raises is accepted and works (battery 30, F10) ----------
def test_int_subclass_reaches_no_message_in_tasks_and_figures() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_utils.attention.split_figure import plot_split_merge
    from course_utils.tasks.synthetic import AgreementTask, InductionTask, MixtureTask

    task = InductionTask(vocab_size=Int(64), seq_len=Int(32))
    assert type(task.seq_len) is int and type(task.vocab_size) is int and task == InductionTask()
    assert type(AgreementTask(max_len=Int(16)).max_len) is int
    assert type(MixtureTask(induction_share=BadFloat(0.5)).induction_share) is float
    plot_split_merge(3, Int(8), Int(2))
    plt.close("all")


def test_int_subclass_reaches_no_message_in_bench_and_caches() -> None:
    from course_utils.bench.decode_step import check_decoder_fits, run_conditions
    from course_utils.model.kv_cache import CatCache, PreallocatedCache, QuantizedCache

    check_decoder_fits(Int(64), Int(4), Int(2), Int(1), context=Int(16), batch=Int(1))
    assert run_conditions(Int(1)).startswith("1 thread ")
    k = torch.randn(1, 2, 3, 32)
    QuantizedCache(2, 1, 2, 32, 64).append(Int(0), k, k.clone())
    raises_naming(ValueError, ["layer 1 cannot be appended before layer 0"],
                  lambda: CatCache(2).append(Int(1), k, k.clone()))
    PreallocatedCache(2, 1, 2, 32, 8).append(Int(0), k, k.clone())


def test_int_subclass_reaches_no_message_in_checks_and_records() -> None:
    from course_utils.attention.validation import check_heads_to_merge, check_kv_pair
    from course_utils.interp.scores import role_verdicts
    from course_utils.tasks.synthetic import MixtureBatch, MixtureTask

    raises_naming(ValueError, ["heads must be (B, h=4, T, dk=8)"],
                  lambda: check_heads_to_merge(torch.randn(1, 2, 3, 8), Int(4), Int(8)))
    weight = torch.randn(4, 4)
    raises_naming(ValueError, ["past k must be (B=2, g=1, T_past, dk=8)"],
                  lambda: check_kv_pair((torch.randn(1, 1, 3, 8),) * 2, "past", batch=Int(2),
                                        num_kv_heads=Int(1), d_k=Int(8), weight=weight))
    scores = {"previous token": torch.tensor([[0.9, 0.2]])}
    sentences = role_verdicts(scores, threshold=BadFloat(0.5), margin=BadFloat(0.05), decimals=Int(2))
    assert "0.90" in sentences[0] and "0.5 line" in sentences[0]
    batch = MixtureTask().sample(4, torch.Generator().manual_seed(0))
    again = MixtureBatch(batch.tokens, batch.targets, batch.real, Int(batch.num_induction))
    assert type(again.num_induction) is int and again.num_induction == batch.num_induction


# -- a list whose len() raises is refused naming the argument (battery 30, F11) ----------------------------
@functools.cache
def _len_cases():  # (label, argument named, call with a LyingLen list)
    import dataclasses

    import matplotlib

    matplotlib.use("Agg")
    from course_utils.attention.kv_figure import plot_kv_sharing
    from course_utils.attention.shapes import TraceStep
    from course_utils.bench.timing import check_function_name, timings_from_samples
    from course_utils.bench.train_speed import format_training_table
    from course_utils.interp import ablation, circuits, heatmaps, scores
    from course_utils.model import kv_cache
    from course_utils.model.transformer import KVCache
    from course_utils.tasks import two_relations, worked_example
    from course_utils.tasks.synthetic import AgreementTask

    step = TraceStep("x", "x = 1", ("B", "T"), (2, 8), 0, True)
    timing = timings_from_samples({"a": [1.0, 1.1], "b": [2.0, 2.1]}, "a")[0]
    pair = (torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8))
    attention = [torch.full((1, 2, 4, 4), 0.25)]
    model = _tiny()
    torch.manual_seed(0)
    lookup = two_relations.LookupModel(two_relations.TwoKeyTask(), 16, 2)
    result = two_relations.RunResult(2, 0, (0, 2), (0.1, 0.2), (0.3, 0.4), lookup)
    worked = worked_example.load_worked_example()
    trace = circuits.trace_heads(model, torch.randint(0, 12, (2, 6)))
    row = {"seed": 0, "induction_steps": 10, "induction_s": 1.0, "agreement_s": 1.0}
    return [
        ("TraceStep.symbolic", "TraceStep.symbolic",
         lambda: dataclasses.replace(step, symbolic=LyingLen(["B", "T"]))),
        ("TraceStep.shape", "TraceStep.shape", lambda: dataclasses.replace(step, shape=LyingLen([2, 8]))),
        ("Timing.samples_s", "samples_s",
         lambda: dataclasses.replace(timing, samples_s=LyingLen([1.0, 1.1]))),
        ("RunResult.steps", "RunResult.steps", lambda: dataclasses.replace(result, steps=LyingLen([0, 2]))),
        ("HeadTrace.attention", "HeadTrace.attention",
         lambda: dataclasses.replace(trace, attention=LyingLen(trace.attention))),
        ("CheapExpansion.positions", "CheapExpansion.positions",
         lambda: dataclasses.replace(worked.cheap, positions=LyingLen(worked.cheap.positions))),
        ("WorkedExample.people", "WorkedExample.people",
         lambda: dataclasses.replace(worked, people=LyingLen(worked.people))),
        ("plot_kv_sharing", "kv_heads", lambda: plot_kv_sharing(8, LyingLen([8, 2, 1]))),
        ("check_function_name", "among", lambda: check_function_name("a", "baseline", LyingLen(["a", "b"]))),
        ("format_training_table", "rows", lambda: format_training_table(LyingLen([row]))),
        ("CatCache.from_layers", "layers", lambda: kv_cache.CatCache.from_layers(LyingLen([pair]))),
        ("QuantizedCache.from_layers", "layers",
         lambda: kv_cache.QuantizedCache.from_layers(LyingLen([pair]), 8)),
        ("KVCache", "KVCache.layers", lambda: KVCache(LyingLen([pair]))),
        ("AgreementTask.templates", "AgreementTask.templates",
         lambda: AgreementTask(templates=LyingLen(["simple"]))),
        ("accuracy_table", "results", lambda: two_relations.accuracy_table(LyingLen([result]))),
        ("pruning_curve", "counts", lambda: ablation._check_counts(LyingLen([0, 1]), 4)),
        ("ov_copying_score", "token_ids", lambda: circuits.ov_copying_score(model, 0, LyingLen([1, 2, 3]))),
        ("plot_head", "tokens", lambda: heatmaps.plot_head(attention[0][0, 0], LyingLen(list("abcd")))),
        ("plot_all_heads", "attention", lambda: heatmaps.plot_all_heads(LyingLen(attention), list("abcd"))),
        ("AttentionExplorer", "sentences",
         lambda: heatmaps.AttentionExplorer(lambda text: (list("abcd"), attention), LyingLen(["a b"]), 1, 2)),
        ("previous_token_score", "weights", lambda: scores.previous_token_score(LyingLen(attention))),
    ]


@pytest.mark.parametrize("index", range(21))
def test_a_list_whose_len_raises_is_named(index: int) -> None:
    import matplotlib.pyplot as plt

    label, name, call = _len_cases()[index]
    message = raises_naming(TypeError, [name, "LyingLen", "len() or iteration raised"], call)
    assert "len lies" not in message, label
    plt.close("all")


# -- the rest of battery 30's library cases -------------------------------------------------------------
class EqAll(str):
    """A str subclass equal to anything."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


def test_accuracy_table_refuses_a_which_equal_to_anything() -> None:
    from course_utils.tasks import two_relations

    torch.manual_seed(0)
    lookup = two_relations.LookupModel(two_relations.TwoKeyTask(), 16, 2)
    result = two_relations.RunResult(2, 0, (0, 2), (0.1, 0.2), (0.3, 0.4), lookup)
    raises_naming(ValueError, ["which must be one of 'final', 'a' or 'b'", "'zzz'"],
                  lambda: two_relations.accuracy_table([result], which=EqAll("zzz")))


def test_direct_logit_attribution_names_the_models_nan_weight() -> None:
    from course_utils.interp.patching import direct_logit_attribution

    model = _tiny().eval()
    with torch.no_grad():
        model.blocks[1].ln_attn.weight[3] = float("nan")
    message = raises_naming(ValueError, ["model's weights (blocks.1.ln_attn.weight)", "nan"],
                            lambda: direct_logit_attribution(model, torch.randint(0, 12, (2, 5)),
                                                             torch.tensor([4, 3]), torch.randn(12)))
    assert "stream" not in message


@pytest.mark.parametrize("how", ["setattr", "object.__setattr__"])
def test_a_models_config_cannot_be_replaced(how: str) -> None:
    import copy
    import pickle

    from course_utils.model.transformer import ModelConfig

    model = _tiny()
    other = ModelConfig(vocab_size=10, max_len=8, d_model=64, num_heads=4, num_layers=2)
    setter = setattr if how == "setattr" else object.__setattr__
    raises_naming(AttributeError, ["TinyTransformer.config is read-only", "max_len=10",
                                   "TinyTransformer(config)"], lambda: setter(model, "config", other))
    assert model.config.max_len == 10
    assert copy.deepcopy(model).config == model.config == pickle.loads(pickle.dumps(model)).config


def test_an_explorer_refuses_deepcopy_and_pickle_by_name() -> None:
    import copy
    import pickle

    import ipywidgets

    from course_utils.interp.widgets import Explorer

    explorer = Explorer(lambda n: str(n), {"n": ipywidgets.IntSlider(value=1)})
    raises_naming(TypeError, ["an Explorer cannot be copied with copy.deepcopy", "build a new one"],
                  lambda: copy.deepcopy(explorer))
    raises_naming(TypeError, ["an Explorer cannot be pickled", "build a new one"],
                  lambda: pickle.dumps(explorer))
    assert copy.copy(explorer).values() == {"n": 1}  # a shallow copy still works, as before


# -- messages show a user's value with shown(), not its own raising repr (the !r sweep) -------------------
class StrBadRepr(str):
    """A valid str whose repr raises."""

    def __repr__(self) -> str:
        raise RuntimeError("repr exploded")


def test_messages_show_user_values_with_shown() -> None:
    from course_utils.bench.train_speed import format_training_table
    from course_utils.interp.heatmaps import AttentionExplorer

    def cannot(text: str):
        raise ValueError("unknown word")

    # (the explorer reads a str subclass by its plain value: the text shows as it is)
    raises_naming(ValueError, ["cannot draw the first example 'a b'"],
                  lambda: AttentionExplorer(cannot, [StrBadRepr("a b")], 1, 2))
    raises_naming(ValueError, ["rows[0]['induction_s'] must be a finite number >= 0",
                               "got -1.0"],  # (read by its plain value, as every number is)
                  lambda: format_training_table([{"seed": 0, "induction_s": BadFloat(-1.0)}]))
    raises_naming(ValueError, ["rows[0]['induction_s' (a StrBadRepr whose", "must be a finite number >= 0"],
                  lambda: format_training_table([{"seed": 0, StrBadRepr("induction_s"): -1.0}]))


# -- battery 31's library repros ---------------------------------------------------------------------------
def test_battery31_bad_values_are_named_or_used_as_plain_str() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_utils.attention.mla import MultiHeadLatentAttention
    from course_utils.bench.decode_step import check_decoder_fits
    from course_utils.bench.gqa_speed import bench_decode
    from course_utils.bench.timing import Timing, format_spread_table
    from course_utils.bench.train_speed import format_training_table
    from course_utils.interp.heatmaps import plot_head
    from course_utils.model.checkpoint import checkpoint_paths
    from course_utils.model.paged_cache import PagedCache
    from course_utils.tasks.synthetic import detokenize

    raises_naming(TypeError, ["d_head must be an int"], lambda: bench_decode(
        num_heads=2, d_head=BadRepr(), context=8, num_layers=1, groups=(2, 1), repeats=1, warmup=0,
        copy_mib=0, progress=False))
    raises_naming(TypeError, ["names", "len() or iteration raised"],
                  lambda: check_decoder_fits(64, 4, 2, 1, context=8, batch=1, names=LyingLen(["--a", "--b"])))
    assert checkpoint_paths(LyingStr("induction")) == checkpoint_paths("induction")
    timings = [Timing("a", 1.0, 1.0, (1.0, 1.1, 0.9)), Timing("b", 2.0, 2.0, (2.0, 2.1, 1.9))]
    assert "ratio to base" in format_spread_table("T", timings, "a", label=LyingStr("base"))
    raises_naming(ValueError, ["rows[0] must start with 'seed'", "list whose repr raised"],
                  lambda: format_training_table([{BadRepr(): 1.0}]))
    raises_naming(TypeError, ["tokens must be integer ids", "list whose repr raised"],
                  lambda: detokenize([BadRepr()]))
    cache = PagedCache(8, 4, 2, 4)
    cache.add_sequence(BadRepr())
    raises_naming(KeyError, ["no sequence 'nope'", "list whose repr raised"], lambda: cache.gather("nope"))
    raises_naming(TypeError, ["title must be a str or None", "LyingStr whose str() raised"],
                  lambda: plot_head(torch.softmax(torch.randn(4, 4), -1), list("abcd"), title=LyingStr("t")))
    plt.close("all")
    torch.manual_seed(0)
    mla = MultiHeadLatentAttention(16, 4, 8, 8, 4)
    past = mla.decode(torch.randn(2, 1, 16))[1]
    raises_naming(TypeError, ["cache", "len() or iteration raised"],
                  lambda: mla.decode(torch.randn(2, 1, 16), LyingLen(list(past))))


def test_fused_decode_names_the_tensor_that_requires_grad() -> None:
    from course_utils.attention.fused_decode import fused_decode_attention

    q, k, v = torch.randn(1, 2, 1, 64), torch.randn(1, 2, 5, 64), torch.randn(1, 2, 5, 64)
    raises_naming(ValueError, ["v requires grad", "computes no gradients"],
                  lambda: fused_decode_attention(q, k, v.requires_grad_()))


def test_config_text_fields_are_kept_as_plain_str() -> None:
    from course_utils.attention.gqa import PublishedConfig
    from course_utils.attention.mla import MLAConfig

    published = PublishedConfig(LyingStr("m"), 32, 32, 8, 128, LyingStr("src"))
    mla = MLAConfig(LyingStr("m"), 2, 4, 8, 16, 4, LyingStr("src"))
    assert "name='m'" in repr(published) and "source='src'" in repr(mla)


def test_bench_arguments_are_checked_before_a_message_prints_them() -> None:
    # battery 31: num_heads and dtype went into a message (or a dtype comparison) before their check
    from course_utils.bench.decode_step import bench_whole_step
    from course_utils.bench.gqa_speed import bench_decode

    with pytest.raises(TypeError, match=r"^num_heads must be an int, got BadRepr"):
        bench_whole_step(num_heads=BadRepr(), progress=False)
    with pytest.raises(TypeError, match=r"dtype"):
        bench_decode(num_heads=2, d_head=64, context=8, num_layers=1, groups=(2, 1), repeats=1, warmup=0,
                     copy_mib=0, progress=False, dtype=BadRepr())


def test_a_plot_title_must_be_a_plain_str() -> None:
    # battery 31: a str subclass whose str() raises reached matplotlib as the title
    from course_utils.tasks import two_relations

    with pytest.raises(TypeError, match=r"^title must be a str"):
        two_relations._check_title(LyingStr("t"))
    two_relations._check_title("a title")


def test_plot_head_names_a_label_axes_whose_len_raises() -> None:
    # battery 31: label_axes' len() was called bare
    from course_utils.interp.heatmaps import plot_head

    with pytest.raises(TypeError, match=r"^label_axes must be a pair of bools"):
        plot_head(torch.full((2, 2), 0.5), ["a", "b"], label_axes=LyingLen([True, True]))
