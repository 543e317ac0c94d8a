"""Battery 17 (b17a) fixes of helper fix47r: groups S6, S8, O2 and O6.

S6: an unknown top-level key of the worked-example JSON was ignored; S8: History took steps that
go backwards; O2: compare_heads checked task/config only inside its worker processes (a
RuntimeError wrapping a child traceback); O6: the caches' memory refusals blamed max_len (or
num_blocks) whatever argument was too large, without its value."""

from __future__ import annotations

import json

import pytest

HUGE = 10**12


# -- S6: the worked example's top-level keys --------------------------------------------------------
@pytest.mark.parametrize("key", ["zz_bogus", "w_o", "Heads"])
def test_worked_example_refuses_an_unknown_top_level_key(key):
    from course_utils.tasks.worked_example import (
        WORKED_EXAMPLE_PATH,
        WorkedExampleError,
        parse_worked_example,
    )

    data = json.loads(WORKED_EXAMPLE_PATH.read_text(encoding="utf-8"))
    data[key] = 1
    with pytest.raises(WorkedExampleError) as err:
        parse_worked_example(data)
    assert "unknown keys" in str(err.value) and repr(key) in str(err.value)
    assert "'people'" in str(err.value)  # what was expected


def test_shipped_worked_example_still_loads():
    from course_utils.tasks.worked_example import load_worked_example

    assert load_worked_example().people  # its optional "description" key is a known one


# -- S8: History's steps go forward -----------------------------------------------------------------
@pytest.mark.parametrize("fields, name, shown", [
    ({"steps": [2, 1], "loss": [1.0, 0.5]}, "History.steps", "= 2 then"),
    ({"steps": [1, 1], "loss": [1.0, 0.5]}, "History.steps", "= 1 then"),
    ({"eval_steps": [4, 2], "eval_metrics": [{"acc": 0.1}, {"acc": 0.2}]}, "History.eval_steps", "= 4 then"),
])
def test_history_refuses_steps_out_of_order(fields, name, shown):
    from course_utils.model.train import History

    with pytest.raises(ValueError) as err:
        History(task="t", **fields)
    assert name in str(err.value) and "strictly increase" in str(err.value) and shown in str(err.value)


def test_history_to_dict_checks_steps_appended_out_of_order():
    from course_utils.model.train import History

    history = History(task="t", steps=[1, 2], loss=[1.0, 0.5])
    history.steps.append(2)
    history.loss.append(0.4)
    with pytest.raises(ValueError, match=r"History\.steps must strictly increase"):
        history.to_dict()


# -- O2: compare_heads checks its shared arguments in the parent ------------------------------------
def _config():
    from course_utils.tasks.two_relations import RelationsConfig

    return RelationsConfig(steps=2, batch_size=8, eval_every=1, eval_size=16)


@pytest.mark.parametrize("argument, value, error, shown", [
    ("task", None, TypeError, "NoneType"),
    ("task", "abc", TypeError, "'abc'"),
    ("task", 7, TypeError, "int 7"),
    ("config", True, TypeError, "bool True"),
    ("config", [], TypeError, "list []"),
    ("on_eval", 7, TypeError, "int"),
    ("heads", (1, 3), ValueError, "heads = 3"),
])
def test_compare_heads_checks_before_the_workers_start(argument, value, error, shown):
    from course_utils.tasks.two_relations import TwoKeyTask, compare_heads

    kwargs = {"task": TwoKeyTask(), "heads": (1, 2), "seeds": range(1), "config": _config(), "workers": 2}
    kwargs[argument] = value
    with pytest.raises(error) as err:  # not a RuntimeError carrying a worker's traceback
        compare_heads(**kwargs)
    assert argument in str(err.value) and shown in str(err.value)
    assert "worker" not in str(err.value)


# -- O6: the caches' memory refusals name the argument that is too large -----------------------------
def _caches():
    from course_utils.model.kv_cache import PreallocatedCache, QuantizedCache
    from course_utils.model.paged_cache import PagedCache

    sizes = {"num_layers": 2, "batch": 1, "num_kv_heads": 2, "d_head": 32}
    return {
        "QuantizedCache": (lambda **kw: QuantizedCache(**{**sizes, "max_len": 8, **kw}),
                           ["batch", "num_kv_heads", "d_head", "group", "max_len"]),
        "PreallocatedCache": (lambda **kw: PreallocatedCache(**{**sizes, "max_len": 8, **kw}),
                              ["batch", "num_kv_heads", "d_head", "max_len"]),
        "PagedCache": (lambda **kw: PagedCache(**{"num_blocks": 4, "block_size": 16, "num_kv_heads": 2,
                                                  "d_head": 32, **kw}),
                       ["num_blocks", "block_size", "num_kv_heads", "d_head"]),
    }


@pytest.mark.parametrize("cache, argument", [(c, a) for c, (_, args) in _caches().items() for a in args])
def test_cache_memory_refusal_names_the_argument_too_large(cache, argument):
    make, _ = _caches()[cache]
    with pytest.raises(ValueError) as err:
        make(**{argument: HUGE})
    message = str(err.value)
    assert message.startswith(f"{argument} asks for") and f"{argument}={HUGE:,}" in message
    assert "GiB" in message
