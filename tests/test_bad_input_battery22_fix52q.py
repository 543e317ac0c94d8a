"""Battery 22a's model cases (issue 38): empty labels in History and save_checkpoint, a float64
model narrowed by save_checkpoint, repeatable_step rewinding a cache stepped elsewhere, and
concurrent saves and loads of one checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from course_utils.model import checkpoint as C
from course_utils.model.train import History
from course_utils.model.transformer import ModelConfig, TinyTransformer
from tests.bad_input_cases import raises_naming

CFG = ModelConfig(vocab_size=12, max_len=10, d_model=16, num_heads=4, num_layers=1)


# -- 9: an empty label is refused where it is printed or recorded ---------------------------------
@pytest.mark.parametrize("label", [""])
def test_history_refuses_an_empty_task(label: str) -> None:
    raises_naming(ValueError, ["History.task", repr(label)], lambda: History(label))


@pytest.mark.parametrize("command", ["", "   "])
def test_save_checkpoint_refuses_an_empty_command(tmp_path: Path, command: str) -> None:
    raises_naming(ValueError, ["command", repr(command)],
                  lambda: C.save_checkpoint(TinyTransformer(CFG), tmp_path / "m", task="toy", metrics={},
                                            command=command))
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


# -- 7: save_checkpoint refuses a float64 weight instead of narrowing it to float32 ---------------
def _with_float64(which: str) -> tuple[TinyTransformer, str]:
    """A model with float64 weights (all, or one parameter), and the name the error must give."""
    torch.manual_seed(0)
    model = TinyTransformer(CFG)
    if which == "all":
        return model.double(), "token_embedding.weight"
    name, parameter = next((n, p) for n, p in model.named_parameters() if n.endswith("bias"))
    parameter.data = parameter.data.double()
    return model, name


@pytest.mark.parametrize("which", ["all", "one"])
def test_save_checkpoint_refuses_float64_weights(tmp_path: Path, which: str) -> None:
    model, name = _with_float64(which)
    raises_naming(TypeError, [name, "torch.float64", "float32", "model.float()"],
                  lambda: C.save_checkpoint(model, tmp_path / "m", task="toy", metrics={}, command="c"))
    assert list(tmp_path.iterdir()) == []  # refused before anything was written
    C.save_checkpoint(model.float(), tmp_path / "m", task="toy", metrics={}, command="c")  # the way out
    assert next(C.load_checkpoint(tmp_path / "m")[0].parameters()).dtype == torch.float32


# -- 6: repeatable_step refuses to rewind a cache stepped elsewhere -------------------------------
@pytest.mark.parametrize("kind", ["cat", "preallocated", "window", "quantized"])
def test_repeatable_step_refuses_a_cache_stepped_elsewhere(kind: str) -> None:
    from course_utils.model import kv_cache as K

    torch.manual_seed(0)
    model = TinyTransformer(CFG).eval()
    token = torch.zeros(2, 1, dtype=torch.long)
    with torch.no_grad():
        _, prefix = model.forward_with_cache(torch.zeros(2, 3, dtype=torch.long))
    layers = list(prefix.layers)
    cache = {"cat": lambda: K.CatCache.from_layers(layers),
             "preallocated": lambda: K.PreallocatedCache.from_layers(layers, max_len=8),
             "window": lambda: K.SlidingWindowCache.from_layers(layers, window=4),
             "quantized": lambda: K.QuantizedCache.from_layers(layers, max_len=8, group=4)}[kind]()
    step = K.repeatable_step(model, cache, token)
    step()  # its own steps leave the cache as it was: no refusal
    with torch.no_grad():
        K.decode_step(model, token, cache)  # a step of someone else's
    raises_naming(ValueError, ["cache", "length 3 then, 4 now"], step)
    assert cache.length == 4  # the other step's token was kept, not rewound


# -- 2, 3: saves and loads of one checkpoint from several processes take turns --------------------
_WRITER = r"""
import json, pathlib, sys, time
sys.path.insert(0, sys.argv[1])
import torch
from course_utils.model import checkpoint as C
from course_utils.model.transformer import ModelConfig, TinyTransformer
torch.manual_seed(int(sys.argv[3]))
model = TinyTransformer(ModelConfig(50, 32, d_model=64, num_heads=4, num_layers=2))
pathlib.Path(sys.argv[2]).with_name("ready" + sys.argv[3]).touch()
go = pathlib.Path(sys.argv[2]).with_name("go")
while not go.exists():
    time.sleep(0.01)
saves, errors, start = 0, [], time.monotonic()
while time.monotonic() - start < 2:
    try:
        C.save_checkpoint(model, pathlib.Path(sys.argv[2]), task="toy", metrics={}, command="w" + sys.argv[3])
        saves += 1
    except Exception as error:
        errors.append(f"{type(error).__name__}: {error}"[:200])
print(json.dumps([saves, errors[:3]]))
"""


def test_concurrent_saves_and_loads_of_one_checkpoint_take_turns(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys
    import time
    import warnings

    path = tmp_path / "race"
    C.save_checkpoint(TinyTransformer(CFG), path, task="toy", metrics={}, command="start")
    repo = str(Path(__file__).resolve().parents[1])
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, repo, str(path), str(i)], text=True,
                                stdout=subprocess.PIPE, env=dict(os.environ, OMP_NUM_THREADS="1"))
               for i in (1, 2)]
    deadline = time.monotonic() + 120  # both writers imported torch: their 2 s of saving overlap
    while not all((tmp_path / f"ready{i}").exists() for i in (1, 2)) and time.monotonic() < deadline:
        if any(w.poll() is not None for w in writers):
            break
        time.sleep(0.05)
    (tmp_path / "go").touch()
    loaded, failed = set(), []
    while any(w.poll() is None for w in writers):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                loaded.add(C.load_checkpoint(path)[1]["command"])
            except Exception as error:  # collected, shown by the assert
                failed.append(f"{type(error).__name__}: {error}"[:200])
        failed += [str(w.message)[:200] for w in caught]  # e.g. 'half replaced by an interrupted save'
    results = [json.loads(w.communicate()[0]) for w in writers]
    assert [errors for _, errors in results] == [[], []] and all(saves > 0 for saves, _ in results)
    assert failed == [] and loaded <= {"start", "w1", "w2"}
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["go", "race.json", "race.safetensors", "ready1", "ready2"]  # no temporary file
    assert C.load_checkpoint(path)[1]["command"] in ("w1", "w2")
