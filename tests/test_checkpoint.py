"""Checkpoints: a round trip is exact; damaged or mismatched files are refused by name;
the shipped checkpoints still score what their sidecars record."""

import ast
import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

import course_utils
from course_utils.model.checkpoint import (
    CHECKPOINT_DIR,
    CheckpointError,
    available_checkpoints,
    checkpoint_paths,
    load_checkpoint,
    save_checkpoint,
    sha256_of,
)
from course_utils.model.train import evaluate_agreement, evaluate_induction
from course_utils.model.transformer import ModelConfig, TinyTransformer

SHIPPED = {"induction": (evaluate_induction, False), "agreement": (evaluate_agreement, True)}


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    model = TinyTransformer(ModelConfig(vocab_size=12, max_len=8, d_model=16, num_heads=2, mlp=True)).eval()
    meta_path = save_checkpoint(model, tmp_path / "toy", task="toy", metrics={"acc": 0.5},
                                command="python make_toy.py")
    return model, tmp_path / "toy", meta_path


def test_round_trip_gives_the_same_model(saved):
    model, stem, meta_path = saved
    loaded, meta = load_checkpoint(stem)
    tokens = torch.randint(0, 12, (2, 8))
    torch.testing.assert_close(loaded(tokens)[0], model(tokens)[0], rtol=0, atol=0)
    assert meta["config"] == model.config.to_dict() and meta["metrics"] == {"acc": 0.5}
    assert meta["command"] == "python make_toy.py"
    assert meta["sha256"] == sha256_of(stem.with_suffix(".safetensors"))
    assert not loaded.training
    # the same checkpoint by either file name
    for path in (meta_path, stem.with_suffix(".safetensors")):
        assert load_checkpoint(path)[1] == meta


def test_a_corrupted_byte_is_caught_by_the_checksum(saved):
    _, stem, _ = saved
    weights = stem.with_suffix(".safetensors")
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0xFF  # flip one byte inside the tensor data
    weights.write_bytes(bytes(data))
    expected = json.loads(stem.with_suffix(".json").read_text())["sha256"]
    with pytest.raises(CheckpointError, match=f"corrupted: expected sha256 {expected}, found [0-9a-f]{{64}}"):
        load_checkpoint(stem)


def test_a_truncated_file_is_refused_with_both_sizes(saved):
    _, stem, _ = saved
    weights = stem.with_suffix(".safetensors")
    size = weights.stat().st_size
    weights.write_bytes(weights.read_bytes()[: size // 2])
    with pytest.raises(CheckpointError, match=f"truncated: expected {size} bytes, found {size // 2}"):
        load_checkpoint(stem)


def test_a_sidecar_whose_config_disagrees_with_the_weights_is_refused(saved):
    _, stem, meta_path = saved
    meta = json.loads(meta_path.read_text())
    meta["config"]["d_model"] = 32
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="disagree on the config: d_model: expected 16, found 32"):
        load_checkpoint(stem)


def test_an_unexpected_config_is_refused(saved):
    _, stem, _ = saved
    wanted = ModelConfig(vocab_size=12, max_len=8, d_model=16, num_heads=4, mlp=True)
    with pytest.raises(CheckpointError, match="num_heads: expected 4, found 2"):
        load_checkpoint(stem, expected_config=wanted)


def test_weights_that_do_not_fit_their_config_are_refused(tmp_path):
    """Consistent sidecar and header, but tensors of another shape (a hand-made file)."""
    from safetensors.torch import save_file

    config = ModelConfig(vocab_size=12, max_len=8, d_model=16, num_heads=2)
    model = TinyTransformer(config)
    tensors = {k: v.contiguous() for k, v in model.state_dict().items()}
    tensors["unembed.weight"] = torch.zeros(13, 16)
    weights = tmp_path / "odd.safetensors"
    save_file(tensors, str(weights), metadata={"format": "course_utils.checkpoint/1",
                                                "config": json.dumps(config.to_dict(), sort_keys=True)})
    meta = {"format": "course_utils.checkpoint/1", "task": "toy", "config": config.to_dict(), "metrics": {},
            "command": "", "size_bytes": weights.stat().st_size, "sha256": sha256_of(weights)}
    (tmp_path / "odd.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"unembed.weight: expected shape \(12, 16\), found \(13, 16\)"):
        load_checkpoint(tmp_path / "odd")


def test_missing_files_are_named(saved, tmp_path):
    _, stem, _ = saved
    message = r"no checkpoint sidecar nothing.json .*available there: \['toy'\]"
    with pytest.raises(FileNotFoundError, match=message):
        load_checkpoint(tmp_path / "nothing")
    with pytest.raises(FileNotFoundError, match="available there"):
        load_checkpoint("no_such_checkpoint")
    stem.with_suffix(".safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="weights .*toy.safetensors are missing"):
        load_checkpoint(stem)


def test_broken_sidecars_are_refused(saved):
    _, stem, meta_path = saved
    meta = json.loads(meta_path.read_text())
    meta_path.write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_checkpoint(stem)
    meta_path.write_text(json.dumps({k: v for k, v in meta.items() if k != "sha256"}))
    with pytest.raises(CheckpointError, match=r"lacks the keys \['sha256'\]"):
        load_checkpoint(stem)
    meta_path.write_text(json.dumps({**meta, "format": "pickle"}))
    with pytest.raises(CheckpointError, match="expected format"):
        load_checkpoint(stem)


def test_a_malformed_config_in_the_weights_header_is_refused(tmp_path):
    """Sidecar and checksum fine, but the header's config is not JSON (or not an object)."""
    from safetensors.torch import save_file

    config = ModelConfig(vocab_size=12, max_len=8, d_model=16, num_heads=2)
    tensors = {k: v.contiguous() for k, v in TinyTransformer(config).state_dict().items()}
    fmt = {"format": "course_utils.checkpoint/1"}
    for header, message in (({**fmt, "config": "{not json"}, "not valid JSON"),
                            ({**fmt, "config": "[1, 2]"}, "JSON object"),
                            (fmt, "no model config")):
        weights = tmp_path / "odd.safetensors"
        save_file(tensors, str(weights), metadata=header)
        meta = {**fmt, "task": "toy", "config": config.to_dict(), "metrics": {}, "command": "",
                "size_bytes": weights.stat().st_size, "sha256": sha256_of(weights)}
        (tmp_path / "odd.json").write_text(json.dumps(meta))
        with pytest.raises(CheckpointError, match=message):
            load_checkpoint(tmp_path / "odd")


def test_a_bare_name_means_the_same_folder_to_save_and_load(tmp_path, monkeypatch):
    import course_utils.model.checkpoint as checkpoint

    monkeypatch.setattr(checkpoint, "CHECKPOINT_DIR", tmp_path)
    monkeypatch.chdir(tmp_path.parent)
    model = TinyTransformer(ModelConfig(vocab_size=12, max_len=8, d_model=16, num_heads=2)).eval()
    meta_path = save_checkpoint(model, "bare", task="toy", metrics={}, command="c")
    assert meta_path == tmp_path / "bare.json" and not (tmp_path.parent / "bare.json").exists()
    loaded, _ = load_checkpoint("bare")
    tokens = torch.randint(0, 12, (1, 8))
    torch.testing.assert_close(loaded(tokens)[0], model(tokens)[0], rtol=0, atol=0)


def test_names_resolve_to_the_checkpoint_folder():
    weights, sidecar = checkpoint_paths("induction")
    assert weights == CHECKPOINT_DIR / "induction.safetensors"
    assert sidecar == CHECKPOINT_DIR / "induction.json"
    with pytest.raises(TypeError, match="str or Path"):
        checkpoint_paths(3)


def _unpickles_only_its_own_pipe(tree: ast.AST) -> bool:
    """parallel.py may use pickle for one thing: results its own forked worker wrote into a
    private pipe, read back as ``pickle.loads(<connection>.recv_bytes())``. No file, no load."""
    uses = [node for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and getattr(node.value, "id", "") == "pickle"]
    reads = [u for u in uses if u.attr not in ("dumps",)]
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Attribute) and node.func.attr == "loads"]
    # names bound straight from a connection's recv_bytes(): `payload = conn.recv_bytes()`
    received = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call) and getattr(node.value.func, "attr", "") == "recv_bytes"
                for t in node.targets if isinstance(t, ast.Name)}

    def from_pipe(arg: ast.AST) -> bool:
        return ((isinstance(arg, ast.Call) and getattr(arg.func, "attr", "") == "recv_bytes")
                or (isinstance(arg, ast.Name) and arg.id in received))

    return (bool(reads) and all(u.attr == "loads" for u in reads) and len(calls) == len(reads)
            and all(len(c.args) == 1 and from_pipe(c.args[0]) for c in calls))


def test_nothing_in_the_package_unpickles():
    package = Path(course_utils.__file__).parent
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text())
        own_rule = None  # the two files allowed one use of pickle: a rule on the whole file
        if path.name == "parallel.py" and path.parent == package:
            own_rule = _unpickles_only_its_own_pipe, "parallel.py unpickles more than its pipe"
        elif path.name == "sandbox.py" and path.parent == package / "exercises":
            own_rule = (_unpickles_only_in_the_answers_process,
                        "sandbox.py unpickles outside the answer's process")
        own_rule_checked = False  # it depends on the tree alone: once per file, not per import
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and getattr(node.func.value, "id", "") == "torch" and node.func.attr == "load"):
                safe = any(k.arg == "weights_only" and getattr(k.value, "value", None) is True
                           for k in node.keywords)  # torch's restricted unpickler: data only
                assert safe, f"{path.name} calls torch.load without weights_only=True"
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if own_rule is not None:
                    if not own_rule_checked:
                        rule, message = own_rule
                        assert rule(tree), message
                        own_rule_checked = True
                    continue
                assert "pickle" not in names, f"{path.name} imports pickle"


def _unpickles_only_in_the_answers_process(tree: ast.Module) -> bool:
    """The outside grader pickles the cases (6.2's holds a function) for the answer's process; that
    process, ``sandbox._child``, is the one place that unpickles, before the answer's code runs.
    The grader itself reads results back with torch.load(weights_only=True)."""
    loads = []
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(fn):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and getattr(node.func.value, "id", "") == "pickle"
                        and node.func.attr in ("load", "loads")):
                    loads.append(fn.name)
    every = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and getattr(n.func.value, "id", "") == "pickle" and n.func.attr in ("load", "loads")]
    return len(every) == 1 and loads == ["_child"]


def test_the_sandbox_rule_would_catch_an_unpickle_in_the_grader():
    bad = ast.parse("import pickle\ndef _child(p):\n    pickle.load(p)\ndef grade(r):\n    pickle.loads(r)\n")
    assert not _unpickles_only_in_the_answers_process(bad)
    good = ast.parse("import pickle\ndef _child(p):\n    pickle.load(p)\ndef run(c):\n    pickle.dumps(c)\n")
    assert _unpickles_only_in_the_answers_process(good)


def test_the_pipe_rule_would_catch_a_file_load():
    bad = ast.parse("import pickle\nvalue = pickle.load(open('x', 'rb'))\n")
    assert not _unpickles_only_its_own_pipe(bad)
    bad = ast.parse("import pickle\nvalue = pickle.loads(data)\n")
    assert not _unpickles_only_its_own_pipe(bad)
    good = ast.parse("import pickle\nvalue = pickle.loads(conn.recv_bytes())\nb = pickle.dumps(1)\n")
    assert _unpickles_only_its_own_pipe(good)


# -- the shipped checkpoints ----------------------------------------------------------
def test_both_checkpoints_are_shipped_small():
    assert {"induction", "agreement"} <= set(available_checkpoints())
    for name in SHIPPED:
        weights, _ = checkpoint_paths(name)
        assert weights.stat().st_size < 1_000_000


@pytest.mark.parametrize("name", list(SHIPPED))
def test_shipped_checkpoint_scores_its_recorded_metrics(name):
    evaluate, has_mlp = SHIPPED[name]
    model, meta = load_checkpoint(name)
    assert meta["task"] == name and model.config.mlp is has_mlp
    assert meta["command"].startswith(f"python -m course_utils.model.train {name} --seed ")
    assert f"--out data/checkpoints/{name}" in meta["command"]
    metrics = evaluate(model)  # fixed evaluation set from a fixed seed
    assert set(metrics) == set(meta["metrics"])
    for key, recorded in meta["metrics"].items():
        assert metrics[key] == pytest.approx(recorded, abs=1e-3), key
    headline = "heldout" if name == "induction" else "attractor"
    assert metrics[headline] >= 0.99


def test_a_copied_checkpoint_loads_from_any_folder(tmp_path):
    for suffix in (".safetensors", ".json"):
        shutil.copy(CHECKPOINT_DIR / f"induction{suffix}", tmp_path / f"copy{suffix}")
    model, _ = load_checkpoint(tmp_path / "copy")
    assert model.config.num_layers == 2


def test_saving_the_same_model_gives_the_same_bytes(tmp_path):
    from course_utils.model.checkpoint import save_checkpoint
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    torch.manual_seed(0)
    model = TinyTransformer(ModelConfig(vocab_size=11, max_len=8, d_model=16, num_heads=2, num_layers=1))
    digests = set()
    for i in range(4):
        save_checkpoint(model, tmp_path / f"m{i}", task="toy", metrics={}, command="test")
        digests.add(hashlib.sha256((tmp_path / f"m{i}.safetensors").read_bytes()).hexdigest())
    assert len(digests) == 1
