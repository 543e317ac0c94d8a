"""Battery 28, fix pass 58: each bad input its development run found refused by name."""
from __future__ import annotations

import pytest
import torch

from tests.bad_input_cases import raises_naming


class OddIndex:
    def __index__(self) -> int:
        return 3

    def __repr__(self) -> str:
        return "OddIndex()"


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr raises")

    __str__ = __repr__


def test_check_kv_pair_names_its_own_sizes() -> None:
    from course_utils.attention.validation import check_kv_pair

    pair, weight = (torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)), torch.nn.Linear(8, 8).weight
    raises_naming(TypeError, ["check_kv_pair's num_kv_heads", "OddIndex()"],
                  lambda: check_kv_pair(pair, "past", batch=1, num_kv_heads=OddIndex(), d_k=4, weight=weight))
    raises_naming(TypeError, ["check_kv_pair's d_k", "bool True"],
                  lambda: check_kv_pair(pair, "past", batch=1, num_kv_heads=2, d_k=True, weight=weight))


def test_check_linear_layer_names_a_size_that_is_no_int() -> None:
    from course_utils.attention.validation import check_linear_layer

    raises_naming(TypeError, ["check_linear_layer's d_in", "str '3'"],
                  lambda: check_linear_layer(torch.nn.Linear(8, 4), "l", "3", 4))


@pytest.mark.parametrize("flag", [torch.tensor([True, False]), 1])
def test_check_not_inference_checks_its_flag(flag) -> None:
    from course_utils.attention.validation import check_not_inference

    raises_naming(TypeError, ["check_not_inference's tracked", "True or False"],
                  lambda: check_not_inference(torch.randn(2), "x", tracked=flag))


@pytest.mark.parametrize("device", ["cpu", None, 3])
def test_check_not_meta_device_wants_a_parsed_device(device) -> None:
    from course_utils.attention.validation import check_not_meta_device

    raises_naming(TypeError, ["device", "torch.device", type(device).__name__],
                  lambda: check_not_meta_device(device))


def test_the_message_helpers_answer_odd_arguments() -> None:
    from course_utils.attention.validation import finite, shown

    raises_naming(TypeError, ["shown's width", "float 2.5"], lambda: shown([1, 2], 2.5))
    assert finite("0.1") is False and finite(None) is False and finite(10**400) is False
    assert finite(0.1) is True


def test_compare_on_device_names_a_dtype_that_is_no_dtype() -> None:
    from course_utils.bench.mha_speed import compare_on_device

    raises_naming(ValueError, ["dtype must be one of", "got []"],
                  lambda: compare_on_device("cpu", batch=1, seq_len=4, d_model=8, num_heads=2, dtype=[],
                                            repeats=2))


def test_a_generator_of_groups_is_read_once() -> None:
    from course_utils.bench.gqa_speed import make_kv_caches, stage_times

    _, caches = make_kv_caches(2, 4, 8, 1, (g for g in (2, 1)))
    assert sorted(caches) == [1, 2]
    times = stage_times(groups=(g for g in (2, 1)), num_heads=2, d_head=4, context=16, num_layers=1,
                        repeats=1, flush_mib=1)
    assert all(sorted(stage) == [1, 2] for stage in times.values())


def test_a_lookup_batch_names_both_fields_that_disagree() -> None:
    import dataclasses

    from course_utils.tasks.two_relations import LookupBatch, TwoKeyTask

    batch = TwoKeyTask(num_items=4, num_keys=8, num_symbols=4, max_repeats=2).sample(6, seed=0)
    fields = ({f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
              if dataclasses.is_dataclass(batch) else batch._asdict())
    fields["item_symbols"] = fields["item_symbols"] + 10**6
    raises_naming(ValueError, ["LookupBatch.answer_symbols", "LookupBatch.item_symbols", "one of the two"],
                  lambda: LookupBatch(**fields))


def test_a_value_whose_repr_raises_keeps_the_librarys_message() -> None:
    from course_utils.attention.mha import MultiHeadAttention
    from course_utils.attention.shapes import trace_shapes
    from course_utils.model.paged_cache import PagedCache

    trace = trace_shapes(MultiHeadAttention(8, 2), torch.randn(1, 3, 8))
    for call in (lambda: trace.shape(BadRepr()), lambda: PagedCache(4, 2, 1, 4).free_sequence(BadRepr())):
        with pytest.raises(Exception) as info:
            call()
        assert "BadRepr whose repr raised RuntimeError" in str(info.value), info.value
