"""Save and load trained models as safetensors plus a JSON metadata file; nothing is pickled.

A checkpoint called ``induction`` is two files in ``data/checkpoints/``:

* ``induction.safetensors``: the weights (plain tensors; loading runs no code), with the
  model config copied into the file's header;
* ``induction.json``: the config, the task, the metrics it scored on a fixed evaluation
  set, the sha256 and size of the safetensors file, and the exact command that made it.

Names and paths mean the same to :func:`save_checkpoint` and :func:`load_checkpoint`
(both go through :func:`checkpoint_paths`): a bare name given as a ``str`` (``"toy"``)
lives in ``data/checkpoints/``; anything with a folder in it (``"./toy"``,
``"runs/toy"``) or given as a ``Path`` is a path, relative to the working directory.

:func:`load_checkpoint` refuses a missing, truncated, corrupted or mismatched file with
an error that says what it expected and what it found.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from ..env import pick_device
from ..paths import DATA_DIR
from .transformer import ModelConfig, TinyTransformer

__all__ = [
    "CHECKPOINT_DIR",
    "CheckpointError",
    "save_checkpoint",
    "load_checkpoint",
    "checkpoint_paths",
    "sha256_of",
    "available_checkpoints",
]

CHECKPOINT_DIR = DATA_DIR / "checkpoints"
FORMAT = "course_utils.checkpoint/1"
_REQUIRED_KEYS = ("format", "config", "sha256", "size_bytes", "metrics", "command", "task")
#: The JSON type of each sidecar field (``training`` and ``weights_file`` are optional).
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "format": (str,), "task": (str,), "config": (dict,), "metrics": (dict,), "command": (str,),
    "training": (dict,), "weights_file": (str,), "size_bytes": (int,), "sha256": (str,),
    "torch_version": (str,),
}
_JSON_NAMES = {str: "a string", dict: "an object", int: "an integer"}


class CheckpointError(ValueError):
    """A checkpoint exists but cannot be trusted (truncated, corrupted, mismatched)."""


def sha256_of(path: str | Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def available_checkpoints(directory: str | Path = CHECKPOINT_DIR) -> list[str]:
    """Names of the checkpoints (JSON sidecars) in ``directory``."""
    return sorted(p.stem for p in Path(directory).glob("*.json"))


def checkpoint_paths(name_or_path: str | Path) -> tuple[Path, Path]:
    """``(weights .safetensors, metadata .json)`` for a bare ``str`` name (``"induction"``,
    in ``data/checkpoints/``), a path stem, or a path to either file. A ``Path`` is always
    taken as a path (``Path("toy")`` is ``./toy``)."""
    if not isinstance(name_or_path, str | Path):
        raise TypeError(f"name_or_path must be a str or Path, got {type(name_or_path).__name__}")
    if not str(name_or_path).strip() or Path(name_or_path).name in ("", ".", ".."):
        raise ValueError(f"name_or_path must name a checkpoint, such as 'induction', got "
                         f"{str(name_or_path)!r}")
    path = Path(name_or_path)
    if path.suffix in (".json", ".safetensors"):
        path = path.with_suffix("")
    if isinstance(name_or_path, str) and "/" not in name_or_path and "\\" not in name_or_path:
        path = CHECKPOINT_DIR / path  # a bare name such as "induction"; use "./x" for a local file
    return Path(f"{path}.safetensors"), Path(f"{path}.json")


def save_checkpoint(
    model: TinyTransformer,
    path: str | Path,
    *,
    task: str,
    metrics: dict[str, float],
    command: str,
    training: dict | None = None,
) -> Path:
    """Write ``path.safetensors`` and ``path.json``; return the JSON path.

    ``path`` is resolved like :func:`load_checkpoint`'s argument: a bare ``str`` name goes
    to ``data/checkpoints/``, so ``load_checkpoint(name)`` finds what ``save_checkpoint(model,
    name)`` wrote. ``metrics`` are the scores the checkpoint must reproduce when evaluated again;
    ``command`` is the shell command that re-creates it; ``training`` holds anything else
    worth keeping (steps, seed, seconds, device).
    """
    if not isinstance(model, TinyTransformer):
        raise TypeError(f"model must be a TinyTransformer, got {type(model).__name__}")
    for name, value, kind in (("task", task, str), ("metrics", metrics, dict), ("command", command, str),
                              ("training", training or {}, dict)):
        if not isinstance(value, kind):
            raise TypeError(f"{name} must be a {kind.__name__}, got {type(value).__name__}")
    weights_path, meta_path = checkpoint_paths(path)
    weights_path.parent.mkdir(parents=True, exist_ok=True)
    config = model.config.to_dict()
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    # One header key only: safetensors writes several keys in no fixed order, which would
    # make the file's bytes (and so its sha256) differ between identical runs.
    header = {"config": json.dumps(config, sort_keys=True)}
    save_file(tensors, str(weights_path), metadata=header)
    weights_path.chmod(0o644)  # safetensors creates it owner-only; checkpoints are shared files
    meta = {
        "format": FORMAT,
        "task": task,
        "config": config,
        "metrics": metrics,
        "command": command,
        "training": training or {},
        "weights_file": weights_path.name,
        "size_bytes": weights_path.stat().st_size,
        "sha256": sha256_of(weights_path),
        "torch_version": torch.__version__.split("+")[0],
    }
    meta_path.write_text(json.dumps(meta, indent=2, sort_keys=False) + "\n")
    return meta_path


def _read_meta(meta_path: Path, weights_path: Path) -> dict:
    if not meta_path.is_file():
        known = available_checkpoints(meta_path.parent) if meta_path.parent.is_dir() else []
        raise FileNotFoundError(
            f"no checkpoint sidecar {meta_path.name} in {meta_path.parent} "
            f"(available there: {known or 'none'})"
        )
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{meta_path.name} is not valid JSON: {err}") from err
    if not isinstance(meta, dict):
        raise CheckpointError(f"{meta_path.name} should hold a JSON object, found {type(meta).__name__}")
    missing = [k for k in _REQUIRED_KEYS if k not in meta]
    if missing:
        raise CheckpointError(f"{meta_path.name} lacks the keys {missing}")
    for key, types in _FIELD_TYPES.items():
        value = meta.get(key)
        if key in meta and (isinstance(value, bool) or not isinstance(value, types)):
            raise CheckpointError(f"{meta_path.name}: {key!r} must be {_JSON_NAMES[types[0]]}, found "
                                  f"{type(value).__name__} {value!r:.60}")
    if meta["size_bytes"] < 0 or len(meta["sha256"]) != 64:
        raise CheckpointError(f"{meta_path.name}: expected size_bytes >= 0 and a 64-character sha256, "
                              f"found {meta['size_bytes']} and {meta['sha256']!r:.80}")
    bad_metrics = {k: v for k, v in meta["metrics"].items()
                   if isinstance(v, bool) or not isinstance(v, int | float)}
    if bad_metrics:
        raise CheckpointError(f"{meta_path.name}: every metric must be a number, found {bad_metrics}")
    if meta["format"] != FORMAT:
        raise CheckpointError(f"{meta_path.name}: expected format {FORMAT!r}, found {meta['format']!r}")
    if not weights_path.is_file():
        raise FileNotFoundError(f"{meta_path.name} is there but its weights {weights_path} are missing")
    return meta


def _verify_bytes(weights_path: Path, meta: dict) -> None:
    size = weights_path.stat().st_size
    if size != meta["size_bytes"]:
        kind = "truncated" if size < meta["size_bytes"] else "longer than recorded"
        raise CheckpointError(
            f"{weights_path.name} is {kind}: expected {meta['size_bytes']} bytes, found {size}"
        )
    digest = sha256_of(weights_path)
    if digest != meta["sha256"]:
        raise CheckpointError(
            f"{weights_path.name} is corrupted: expected sha256 {meta['sha256']}, found {digest}"
        )


def _config_diff(expected: dict, found: dict) -> str:
    keys = sorted(set(expected) | set(found))
    return ", ".join(f"{k}: expected {expected.get(k)!r}, found {found.get(k)!r}"
                     for k in keys if expected.get(k) != found.get(k))


def load_checkpoint(
    name_or_path: str | Path,
    *,
    expected_config: ModelConfig | None = None,
    device: str | torch.device = "cpu",
) -> tuple[TinyTransformer, dict]:
    """Load a checkpoint into a new :class:`TinyTransformer` (eval mode); return
    ``(model, meta)`` where ``meta`` is the JSON sidecar as a dict.

    Checks, in order: both files exist; the size and sha256 of the weights match the
    sidecar; the config in the sidecar matches the one in the weights' header (and
    ``expected_config`` when given); every tensor has the name and shape the config
    implies. Any failure raises with what was expected and what was found.
    """
    if expected_config is not None and not isinstance(expected_config, ModelConfig):
        raise TypeError(f"expected_config must be a ModelConfig or None (a dict converts with "
                        f"ModelConfig.from_dict(d)), got {type(expected_config).__name__}")
    device = pick_device(device)
    weights_path, meta_path = checkpoint_paths(name_or_path)
    meta = _read_meta(meta_path, weights_path)
    _verify_bytes(weights_path, meta)
    try:
        config = ModelConfig.from_dict(meta["config"])
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{meta_path.name} holds an invalid model config: {err}") from err
    if expected_config is not None and expected_config != config:
        raise CheckpointError(
            f"{meta_path.name} has a different model config: "
            f"{_config_diff(expected_config.to_dict(), config.to_dict())}"
        )
    try:
        with safe_open(str(weights_path), framework="pt") as f:
            header = f.metadata() or {}
        tensors = load_file(str(weights_path))
    except SafetensorError as err:
        raise CheckpointError(f"{weights_path.name} is not a readable safetensors file: {err}") from err
    if "config" not in header:
        raise CheckpointError(f"{weights_path.name} has no model config in its header "
                              f"(expected one written by save_checkpoint)")
    try:
        header_config = json.loads(header["config"])
    except json.JSONDecodeError as err:
        raise CheckpointError(
            f"{weights_path.name}: the config in its header is not valid JSON: {err}"
        ) from err
    if not isinstance(header_config, dict):
        raise CheckpointError(f"{weights_path.name}: expected a JSON object as the config in its header, "
                              f"found {type(header_config).__name__}")
    if header_config != config.to_dict():
        raise CheckpointError(
            f"{meta_path.name} and {weights_path.name} disagree on the config: "
            f"{_config_diff(header_config, config.to_dict())} "
            f"(expected = the weights' header, found = the sidecar)"
        )
    model = TinyTransformer(config)
    wanted = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    found = {k: tuple(v.shape) for k, v in tensors.items()}
    if wanted != found:
        problems = [f"missing {k} {wanted[k]}" for k in sorted(set(wanted) - set(found))]
        problems += [f"unexpected {k} {found[k]}" for k in sorted(set(found) - set(wanted))]
        problems += [f"{k}: expected shape {wanted[k]}, found {found[k]}"
                     for k in sorted(set(wanted) & set(found)) if wanted[k] != found[k]]
        raise CheckpointError(f"{weights_path.name} does not fit its config: " + "; ".join(problems))
    model.load_state_dict(tensors, strict=True)
    return model.to(device).eval(), meta
