"""Save and load trained models as safetensors plus a JSON metadata file; nothing is pickled.

A checkpoint called ``induction`` is two files in ``data/checkpoints/``:

* ``induction.safetensors``: the weights (plain tensors; loading runs no code), with the
  model config copied into the file's header;
* ``induction.json``: the config, the task, the metrics it scored on a fixed evaluation
  set, the sha256 and size of the safetensors file, and the exact command that made it.

Names and paths mean the same to :func:`save_checkpoint` and :func:`load_checkpoint`
(both go through :func:`checkpoint_paths`): a bare name given as a ``str`` (``"toy"``)
lives in ``data/checkpoints/``; anything with a folder in it (``"./toy"``,
``"runs/toy"``) or given as a ``Path`` is a path, relative to the working directory. A path
that is an existing folder names no checkpoint: both refuse it, naming the checkpoints in it.

:func:`load_checkpoint` refuses a missing, truncated, corrupted or mismatched file with
an error that says what it expected and what it found.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import os
import shutil
import signal
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from safetensors.torch import save as _tensors_to_bytes

from ..attention.validation import check_holds_values, finite, plain_str
from ..attention.validation import shown as shown_value
from ..env import pick_device
from ..paths import DATA_DIR, check_path
from ..paths import path_kind as _what_is_there  # None for a regular file, else what it is, in words
from .transformer import ModelConfig, TinyTransformer

try:
    import fcntl
except ImportError:  # Windows: no flock, so saves and loads of one checkpoint are not serialised
    fcntl = None

__all__ = [
    "CHECKPOINT_DIR",
    "CheckpointError",
    "COURSE_TASKS",
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
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")  # the sha256 in a sidecar: 64 of them


#: The checkpoints the course ships, each named after the task its model was trained on: a
#: checkpoint with one of these names must hold that task's model (see :func:`load_checkpoint`).
COURSE_TASKS = ("induction", "agreement", "mixture")


class CheckpointError(ValueError):
    """A checkpoint exists but cannot be trusted (truncated, corrupted, mismatched, of another
    task), or cannot be written where it was asked to go."""


def sha256_of(path: str | Path) -> str:
    """Hex sha256 of a file's bytes. A path that is not a regular file (a folder, a FIFO, which
    would block the read forever) is a ValueError naming it."""
    check_path(path, "path", "a file")
    if not Path(path).is_file():
        raise ValueError(f"path must be a regular file to hash, got {str(path)!r}, which is "
                         + ("missing" if not os.path.lexists(path) else "not a regular file"))
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def available_checkpoints(directory: str | Path = CHECKPOINT_DIR) -> list[str]:
    """Names of the checkpoints in ``directory``: each JSON sidecar with its ``.safetensors``
    weights beside it (a stray ``.json`` alone is no checkpoint and is not listed); a
    ``directory`` that is missing or not a folder is an error naming it (not an empty list)."""
    check_path(directory, "directory", "a folder")
    found = _what_is_there(Path(directory))
    if found != "a directory":
        raise NotADirectoryError(f"directory must be a folder of checkpoints, got {str(directory)!r}, "
                                 f"which is {found or 'a file'}")
    return sorted(p.stem for p in Path(directory).glob("*.json")
                  if p.is_file() and p.with_suffix(".safetensors").is_file())


def checkpoint_paths(name_or_path: str | Path, name: str = "name_or_path") -> tuple[Path, Path]:
    """``(weights .safetensors, metadata .json)`` for a bare ``str`` name (``"induction"``,
    in ``data/checkpoints/``), a path stem, or a path to either file. A ``Path`` is always
    taken as a path (``Path("toy")`` is ``./toy``). ``name`` is the argument the messages name
    (a caller passing its own ``checkpoint=`` on says ``"checkpoint"``).

    A stem (no ``.json`` or ``.safetensors``) that is an existing folder (``runs`` where
    ``runs/toy`` was meant) is an IsADirectoryError naming ``name``, the folder and the
    checkpoints in it, for a save (which would write the two files beside the folder) and a load
    alike; so is a path ending in a slash (a ValueError), a NUL character, or no name at all."""
    name = plain_str(name, "name", "the argument's name for the messages, such as 'checkpoint'")
    if not isinstance(name_or_path, str | Path):
        raise TypeError(f"{name} must be a str or Path, got {type(name_or_path).__name__}")
    if isinstance(name_or_path, str):  # a str subclass as the plain str it is (its str() may raise)
        name_or_path = plain_str(name_or_path, name)
    if not str(name_or_path).strip() or Path(name_or_path).name in ("", ".", ".."):
        raise ValueError(f"{name} must name a checkpoint, such as 'induction', got "
                         f"{str(name_or_path)!r}")
    if "\0" in str(name_or_path):  # no file system takes it: open() would fail later, unnamed
        raise ValueError(f"{name} must not hold a NUL character ('\\x00'), got {str(name_or_path)!r}")
    if str(name_or_path).endswith(("/", "\\")):  # Path() would drop the slash: x.safetensors beside x/
        raise ValueError(f"{name} ends in a slash, so it names a folder; give a path stem inside it, "
                         f"such as {str(name_or_path) + 'induction'!r}, got {str(name_or_path)!r}")
    path = Path(name_or_path)
    stem_given = path.suffix not in (".json", ".safetensors")
    if not stem_given:
        path = path.with_suffix("")
    if isinstance(name_or_path, str) and "/" not in name_or_path and "\\" not in name_or_path:
        path = CHECKPOINT_DIR / path  # a bare name such as "induction"; use "./x" for a local file
    if stem_given:
        _refuse_a_folder(path, name_or_path, name)
    return Path(f"{path}.safetensors"), Path(f"{path}.json")


def _refuse_a_folder(stem: Path, given: str | Path, name: str) -> None:
    """A path stem ``stem`` (``given`` as the caller wrote it) that is an existing folder is an
    IsADirectoryError naming the argument ``name``, the folder and the checkpoints in it: a save
    would write ``folder.safetensors`` and ``folder.json`` beside the folder, not in it, and a
    load would look for them there, so both refuse it, in these words."""
    if _what_is_there(stem) != "a directory":
        return
    inside = available_checkpoints(stem)
    where = "" if str(stem) == str(given) else f" ({stem})"
    raise IsADirectoryError(f"{name} must name a checkpoint, got the folder {str(given)!r}{where}; "
                            f"checkpoints in it: {inside or 'none'} (pass one as folder/name, such as "
                            f"{str(stem / (inside[0] if inside else 'induction'))!r})")


def _write_new(path: Path, data: str | bytes) -> None:
    """Write ``data`` (text, or bytes as they are) to a file created at ``path`` by this call
    (``O_EXCL``: an existing file, link or FIFO there is an error, never followed or written
    through), readable by all (``0o644``: checkpoints are shared files)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    if isinstance(data, bytes):
        with os.fdopen(fd, "wb") as out:
            out.write(data)
    else:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(data)


def save_file(tensors: dict[str, torch.Tensor], filename: str | Path, metadata: dict[str, str]) -> None:
    """safetensors' ``save_file``, but written by :func:`_write_new` to ``filename`` itself.

    safetensors' own ``save_file`` writes through an anonymous temporary file (``.tmpXXXXXX``)
    that a save killed outright leaves in the folder forever; serialised to bytes here, the
    only temporary file is save_checkpoint's own ``.name.safetensors.saving``, which the next
    save removes. ``tensors`` (a dict of str -> tensors holding values, not on the meta device),
    ``filename`` (a str or path) and ``metadata`` (a dict of str -> str) are checked first, each
    named: nothing is written for a bad one. It never overwrites: anything already at
    ``filename`` (a file, a folder, a FIFO, a link, even a broken one) is a FileExistsError naming
    ``filename`` and what is there, and is left as it was."""
    _check_save_file_arguments(tensors, filename, metadata)
    data = _tensors_to_bytes(tensors, metadata=metadata)
    try:
        _write_new(Path(filename), data)
    except FileExistsError:
        found = _what_is_there(filename) or "a regular file"
        raise FileExistsError(f"filename {str(filename)!r} is already taken ({found} is there): save_file "
                              f"never overwrites, it creates a new file; remove or rename what is there, "
                              f"or give another filename") from None


def _check_save_file_arguments(tensors: object, filename: object, metadata: object) -> None:
    """:func:`save_file`'s arguments, named, before safetensors or the file system sees them."""
    if not isinstance(tensors, dict):
        raise TypeError(f"tensors must be a dict of name (str) -> torch.Tensor, got {type(tensors).__name__} "
                        f"{shown_value(tensors, 60)}")
    for key, tensor in tensors.items():
        if not isinstance(key, str):
            raise TypeError(f"tensors' keys must be names (str), got {type(key).__name__} "
                            f"{shown_value(key, 60)}")
        check_holds_values(tensor, f"tensors[{shown_value(key)}]")  # a meta tensor has no bytes to write
    shared = _sharing_memory(tensors)
    if shared is not None:  # safetensors refuses them too, naming neither argument nor remedy
        first, second = (f"tensors[{shown_value(name)}]" for name in shared)
        raise ValueError(f"{first} and {second} share memory (one is the other, or a view overlapping it): "
                         f"a .safetensors file stores each tensor's bytes once, apart; pass "
                         f"{second}.clone() instead")
    check_path(filename, "filename", "the .safetensors file to write")
    if not (isinstance(metadata, dict) and all(isinstance(k, str) and isinstance(v, str)
                                               for k, v in metadata.items())):
        raise TypeError(f"metadata must be a dict of str -> str (the file's header), got "
                        f"{type(metadata).__name__} {shown_value(metadata, 60)}")


def _sharing_memory(tensors: dict[str, torch.Tensor]) -> tuple[str, str] | None:
    """The names of the first two of ``tensors`` whose bytes overlap (one tensor under two
    names, or views of one storage that overlap), else None; disjoint slices are fine."""
    spans = sorted((str(t.device), t.untyped_storage().data_ptr(), t.data_ptr(),
                    t.data_ptr() + t.numel() * t.element_size(), i, name)
                   for i, (name, t) in enumerate(tensors.items()) if t.numel() > 0)
    for before, after in zip(spans, spans[1:], strict=False):
        if before[:2] == after[:2] and after[2] < before[3]:
            return tuple(name for *_, name in sorted((before, after), key=lambda span: span[4]))
    return None


def _unshared(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``tensors``, each one that shares memory with another cloned (tied weights are stored as
    two copies of their values, which is what :func:`load_checkpoint` builds)."""
    tensors = dict(tensors)
    while (shared := _sharing_memory(tensors)) is not None:
        tensors[shared[1]] = tensors[shared[1]].clone()
    return tensors


class _Terminated(BaseException):
    """SIGTERM arrived while a checkpoint was being written (see :func:`_sigterm_rolls_back`)."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated


@contextmanager
def _sigterm_rolls_back() -> Iterator[None]:
    """While the block runs, SIGTERM is handled like Ctrl-C: it raises, so the save's clean-up
    removes its temporary files, and the process then ends by SIGTERM as it would have.

    Only where SIGTERM has its default action (the process dying at once, no clean-up) and in
    the main thread (the only one Python lets set a handler); a handler of the caller's own is
    left alone."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    except _Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)  # the default action, now that the files are tidy
        raise SystemExit(128 + signal.SIGTERM) from None  # not reached where the signal ends us
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def _folder_locked(folder: Path, *, exclusive: bool) -> Iterator[None]:
    """Hold an ``flock`` on ``folder`` itself (its own file descriptor: no lock file is made or
    left behind) while the block runs: ``exclusive`` for a save, temporary files included, shared
    for a load. So two saves in one folder run one after the other, and a load never reads a
    pair a save is replacing. Where that is not possible the block runs unlocked: without
    ``fcntl`` (Windows), a folder that cannot be opened (a missing one: the load then says what is
    missing), or a file system that refuses locks (some network mounts)."""
    fd = None
    if fcntl is not None:
        try:
            fd = os.open(folder, os.O_RDONLY)
        except OSError:
            fd = None
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            except OSError:  # no locks on this file system: as without fcntl
                pass
        yield
    finally:
        if fd is not None:
            os.close(fd)  # releases the lock


def save_checkpoint(
    model: TinyTransformer,
    path: str | Path,
    *,
    task: str,
    metrics: dict[str, float],
    command: str,
    training: dict | None = None,
    replace_task: bool = False,
) -> Path:
    """Write ``path.safetensors`` and ``path.json``; return the JSON path.

    ``path`` is resolved like :func:`load_checkpoint`'s argument: a bare ``str`` name goes
    to ``data/checkpoints/``, so ``load_checkpoint(name)`` finds what ``save_checkpoint(model,
    name)`` wrote, and a ``path`` that is an existing folder is refused by both (an
    IsADirectoryError naming ``path`` and the checkpoints in it: the files would land beside the
    folder, not in it). ``metrics`` are the scores the checkpoint must reproduce when evaluated again
    (an empty dict is accepted and records that there is nothing to reproduce: the tests' toy
    models save so; ``python -m course_utils.model.train --out`` always passes the scores of the
    last step's evaluation, which every training run makes);
    ``command`` is the shell command that re-creates it (not empty: it is the sidecar's only
    record of how the weights were made); ``training`` holds anything else
    worth keeping (steps, seed, seconds, device), as a dict of plain JSON, or None for nothing
    (recorded as ``{}``); anything else (``0``, ``False``, ``''``, a list) is a TypeError naming it.

    The weights are stored as float32, what :func:`load_checkpoint` builds: a float16 or bfloat16
    model is widened (exactly); a float64 one is a TypeError naming the first such tensor and
    its dtype (narrowing would round every weight silently): call ``model.float()`` first.

    ``task`` (a non-empty name such as ``"induction"``) is recorded in the sidecar. Any name is
    taken, not only :data:`COURSE_TASKS`: a model trained on a task of one's own (a learner's
    experiment, the tests' ``"toy"`` models) is saved under that task's name, and
    ``load_checkpoint(path, task=name)`` then asks for the same name and refuses any other, so an
    unknown or misspelt name cannot hand back a model of another task. A checkpoint
    holds the task it is named after: saving over a sidecar that records another task, or
    under the name of another of the course's tasks (:data:`COURSE_TASKS`, e.g. an agreement
    model as ``induction``), is a :class:`CheckpointError` unless ``replace_task=True``; so is
    saving over a ``.json`` that is no checkpoint's sidecar (empty, binary, other JSON).

    A save that fails (a read-only or full disk) is a :class:`CheckpointError` naming the folder,
    and leaves the files as they were; so does one stopped by Ctrl-C (SIGINT) or by SIGTERM
    (while it writes, SIGTERM is handled like Ctrl-C: the save is rolled back, then the process
    ends by SIGTERM as it would have; a SIGTERM handler of the caller's own is left in charge).
    One killed outright (SIGKILL, power cut) cannot clean up. Killed while writing, it leaves
    only its own temporary files, ``.name.safetensors.saving`` and ``.name.json.saving`` (every
    byte goes through them: no other temporary name is ever made), beside the untouched old pair.
    Killed between its two renames, it leaves the new weights beside the old sidecar, plus the
    old weights as ``.name.safetensors.previous`` and a ``.name.json.saving``. Loading then
    reads the old pair (and warns) without touching the files; the next save under the same
    name removes all these leftovers.

    Saves and loads of checkpoints in one folder may run at once, from several processes: each
    save holds an exclusive lock on the folder while it writes (so a second save waits for the
    first, and the last one to finish is what stays) and each load a shared one (so it reads the
    pair before or after a save, never half of one). Where ``fcntl`` is missing (Windows) there is
    no such lock: concurrent saves of one checkpoint, or a load during a save, are not supported.
    """
    if not isinstance(model, TinyTransformer):
        raise TypeError(f"model must be a TinyTransformer, got {type(model).__name__}")
    for name, value, kind in (("task", task, str), ("metrics", metrics, dict), ("command", command, str)):
        if not isinstance(value, kind):
            raise TypeError(f"{name} must be a {kind.__name__}, got {type(value).__name__}")
    if training is not None and not isinstance(training, dict):  # 0, False, '' are not "nothing to record"
        raise TypeError(f"training must be a dict or None, got {type(training).__name__} "
                        f"{shown_value(training, 60)}")
    training = {} if training is None else training
    if not task.strip():
        raise ValueError(f"task must name the task the model was trained on, such as 'induction', got "
                         f"{shown_value(task)}")
    if not command.strip():  # the sidecar's only record of how to re-create the checkpoint
        raise ValueError(f"command must be the shell command that re-creates the checkpoint, such as "
                         f"'python -m course_utils.model.train induction --out data/checkpoints/induction',"
                         f" got {shown_value(command)}")
    if not isinstance(replace_task, bool):
        raise TypeError(f"replace_task must be True or False, got {type(replace_task).__name__} "
                        f"{shown_value(replace_task, 60)}")
    for key, value in metrics.items():
        if not isinstance(key, str):
            raise TypeError(f"metrics must be keyed by names (str), got {type(key).__name__} "
                            f"{shown_value(key)}")
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not finite(value):
            raise ValueError(f"metrics[{shown_value(key)}] must be a finite number (the score "
                             f"load_checkpoint's user "
                             f"must reproduce; NaN and infinity are not JSON), got "
                             f"{type(value).__name__} {shown_value(value, 60)}")
    _check_json_field("training", training)
    # NumPy numbers become Python ones (JSON has no np.float32); ints stay ints
    metrics = {k: int(v) if isinstance(v, numbers.Integral) else v if isinstance(v, int | float) else float(v)
               for k, v in metrics.items()}
    weights_path, meta_path = checkpoint_paths(path, "path")
    _check_weights_to_save(model)
    _check_save_targets(weights_path, meta_path)
    if not replace_task:
        _check_task_of_target(meta_path, task)
    made = [p for p in (weights_path.parent, *weights_path.parent.parents) if not p.exists()]
    # The temporary files sit beside their targets and are renamed into place only when both are
    # complete: a save that fails leaves whatever was there before untouched. The old weights stay
    # reachable (a hard link, ``.name.safetensors.previous``) until the new sidecar is in place: a
    # save stopped between the two renames is rolled back, and one killed there still loads, as
    # the old pair (see _previous_weights).
    weights_tmp = weights_path.with_name(f".{weights_path.name}.saving")
    meta_tmp = meta_path.with_name(f".{meta_path.name}.saving")
    previous = _previous_weights(weights_path)
    kept_old = renaming = swapped = committed = False
    locked = False  # the temporary names are this save's own only while it holds the folder's lock
    # SIGTERM, like Ctrl-C, rolls the save back before ending us; the lock is released after that
    with _sigterm_rolls_back(), ExitStack() as lock:
        try:
            # from the first folder made on, every failure (Ctrl-C too) reaches the clean-up below,
            # which removes the folders this save made
            try:
                weights_path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:  # a read-only or virtual file system: the folder named, not a raw OSError
                raise CheckpointError(f"cannot make the folder {weights_path.parent} for the checkpoint "
                                      f"path {str(path)!r}: {err.strerror or err}") from err
            lock.enter_context(_folder_locked(weights_path.parent, exclusive=True))
            locked = True
            config = model.config.to_dict()
            # float32, what load_checkpoint builds and checks (a float16 model is widened: no loss)
            tensors = {k: v.detach().to("cpu", torch.float32 if v.is_floating_point() else v.dtype)
                       .contiguous() for k, v in model.state_dict().items()}
            tensors = _unshared(tensors)  # tied weights (one tensor under two names) written twice
            # One header key only: safetensors writes several keys in no fixed order, which would
            # make the file's bytes (and so its sha256) differ between identical runs.
            header = {"config": json.dumps(config, sort_keys=True)}
            # the temporary names are the save's own: whatever is there (a killed save's leftover, or a
            # link or FIFO someone placed) is removed, never written through, and each file is created new
            for tmp in (weights_tmp, meta_tmp):
                tmp.unlink(missing_ok=True)
            save_file(tensors, weights_tmp, metadata=header)
            sidecar = _sidecar(task, config, metrics, command, training, weights_path.name, weights_tmp)
            _write_new(meta_tmp, json.dumps(sidecar, indent=2, sort_keys=False) + "\n")
            previous.unlink(missing_ok=True)
            if weights_path.exists():
                try:
                    os.link(weights_path, previous)
                except OSError:  # a file system without hard links: a copy does the same here
                    shutil.copyfile(weights_path, previous)
                kept_old = True
            renaming = True  # from here on, a temporary file that is gone was renamed into place
            weights_tmp.replace(weights_path)
            swapped = True
            meta_tmp.replace(meta_path)
            committed = True
            previous.unlink(missing_ok=True)
        except BaseException as exc:
            # Ctrl-C or SIGTERM may land just after a rename, before its flag was set: the files say
            # which renames happened (else a new sidecar would be rolled back onto the old weights)
            swapped = swapped or (renaming and not weights_tmp.exists())
            committed = committed or (swapped and not meta_tmp.exists())
            if swapped and not committed:  # the new weights went in, the new sidecar did not: undo
                if kept_old:
                    os.replace(previous, weights_path)
                else:
                    weights_path.unlink(missing_ok=True)
            for tmp in (weights_tmp, meta_tmp, previous) if locked else ():  # committed or rolled back
                try:  # (unlocked, they may be another save's, still being written)
                    tmp.unlink(missing_ok=True)
                except OSError:  # a read-only file system refuses even this: there is nothing to remove
                    pass
            _remove_empty(made)
            if isinstance(exc, SafetensorError | OSError):  # the folder named, not a temporary file
                reason = (exc.strerror if isinstance(exc, OSError) and exc.strerror
                          else str(exc).split(" at path ")[0])  # safetensors names its own temporary file
                raise CheckpointError(f"cannot write the checkpoint {weights_path.stem} in the folder "
                                      f"{weights_path.parent} ({reason}; is it read-only, or the disk "
                                      "full?); the files already there were left as they were") from exc
            raise
    return meta_path


def _check_task_of_target(meta_path: Path, task: str) -> None:
    """A model of ``task`` may be saved as ``meta_path``: the sidecar there (if any) records the
    same task, and the name is not that of another of the course's tasks. Else a CheckpointError
    saying what is there and how to save anyway (``replace_task=True``, ``--replace-task``)."""
    name = meta_path.stem
    recorded = None
    if _what_is_there(meta_path) is None:
        try:
            data = json.loads(meta_path.read_bytes().decode("utf-8"))
        except (OSError, ValueError, RecursionError):
            data = None
        if not (isinstance(data, dict) and "config" in data):  # empty, binary, another JSON: not ours
            raise CheckpointError(f"{meta_path} exists and is not a checkpoint's sidecar (no JSON object "
                                  f"with a 'config'); saving would replace it. Save under another name, or "
                                  f"pass replace_task=True (--replace-task) to replace it")
        recorded = data.get("task")
    if isinstance(recorded, str) and recorded != task:
        raise CheckpointError(f"{meta_path} holds a model of the task {shown_value(recorded)}; saving a "
                              f"model of the "
                              f"task {shown_value(task)} there would replace it, and loading "
                              f"{shown_value(name)} would hand back "
                              f"a model of another task. Save under another name, or pass "
                              f"replace_task=True (--replace-task) to replace it")
    if name in COURSE_TASKS and name != task:
        raise CheckpointError(f"{shown_value(name)} is the name of the course's {name} checkpoint, and "
                              f"a checkpoint so "
                              f"named must hold the {name} model (load_checkpoint checks it); got a model of "
                              f"the task {shown_value(task)} for {meta_path.with_suffix('')}. Save "
                              f"under another "
                              f"name, or pass replace_task=True (--replace-task)")


def _remove_empty(made: list[Path]) -> None:
    """Remove the folders a failed save made (innermost first), as long as they are empty.

    One not there is skipped: a save stopped inside ``mkdir(parents=True)`` made only the outer
    ones."""
    for folder in made:
        try:
            folder.rmdir()
        except FileNotFoundError:
            continue
        except OSError:  # not empty (or not ours to remove): neither it nor its parents go
            break


def _check_json_field(name: str, value: object, where: str = "") -> None:
    """``value`` is plain JSON (str, finite numbers, bool, None, lists, str-keyed dicts); else a
    TypeError or ValueError naming ``name`` and the entry that is not."""
    where = where or name
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{name} must be keyed by str (it is saved as JSON), got "
                                f"{type(key).__name__} {shown_value(key)} in {where}")
            _check_json_field(name, item, f"{where}[{shown_value(key)}]")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_json_field(name, item, f"{where}[{i}]")
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where} must be a finite number (it is saved as JSON, which has no NaN or "
                         f"infinity), got {shown_value(value)}")
    elif not (value is None or isinstance(value, str | bool | int | float)):
        raise TypeError(f"{where} must be plain JSON (str, int, float, bool, None, list, dict), got "
                        f"{type(value).__name__}; convert it first, e.g. float(t) for a 0-d tensor")


def _previous_weights(weights_path: Path) -> Path:
    """Where save_checkpoint keeps the old weights while it switches to new ones."""
    return weights_path.with_name(f".{weights_path.name}.previous")


def _sidecar(task: str, config: dict, metrics: dict, command: str, training: dict, weights_name: str,
             weights_file: Path) -> dict:
    """The JSON sidecar's fields for the weights written to ``weights_file`` (named
    ``weights_name`` once in place)."""
    return {
        "format": FORMAT,
        "task": task,
        "config": config,
        "metrics": metrics,
        "command": command,
        "training": training,
        "weights_file": weights_name,
        "size_bytes": weights_file.stat().st_size,
        "sha256": sha256_of(weights_file),
        "torch_version": torch.__version__.split("+")[0],
    }


def _check_weights_to_save(model: TinyTransformer) -> None:
    """Every tensor of ``model`` holds values (not the meta device) and, if floating, finite
    ones: a checkpoint of NaN weights would load and then predict nothing. A floating tensor
    wider than float32 (float64) is refused too: the checkpoint holds float32, and narrowing
    would round every weight without a word (float16 and bfloat16 widen to float32 exactly)."""
    for name, tensor in model.state_dict().items():
        if tensor.is_meta:
            raise ValueError(f"model's {name} is on the meta device (a shape without values, e.g. built "
                             f"under torch.device('meta')): load or initialise the weights before saving")
        if tensor.is_complex() or (tensor.is_floating_point() and torch.finfo(tensor.dtype).bits > 32):
            raise TypeError(f"model's {name} has dtype {tensor.dtype}, but a checkpoint holds float32 "
                            "(what load_checkpoint builds): saving would round it without a word; call "
                            "model.float() first if float32 is what you want to keep")
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            count = int((~torch.isfinite(tensor)).sum())
            raise ValueError(f"model's {name} holds {count} NaN or infinite number(s) of {tensor.numel()}: "
                             "a checkpoint must hold finite weights (training diverged? lower the "
                             "learning rate or clip gradients)")


def _check_save_targets(weights_path: Path, meta_path: Path) -> None:
    """Both files can be written: the nearest existing folder above them is a folder (not a file),
    and each target is missing or a regular file (not a directory, FIFO, ...). Checked before
    anything is written, so a refused save leaves no file behind."""
    folder = weights_path.parent
    while not folder.exists() and not folder.is_symlink() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise CheckpointError(f"cannot save {weights_path.name} in {weights_path.parent}: {folder} is "
                              f"{_what_is_there(folder) or 'a file'}, not a folder")
    for target, role in ((weights_path, "the checkpoint's weights"),
                         (meta_path, "the checkpoint's JSON sidecar")):
        found = _what_is_there(target)
        if found not in (None, "missing"):
            raise CheckpointError(f"cannot save over {target} ({role}): it is {found}, not a regular file; "
                                  "remove or rename it, or save under another name")


def _check_regular(path: Path, role: str) -> None:
    """``path`` exists as a regular file; otherwise a CheckpointError saying what it is."""
    found = _what_is_there(path)
    if found is not None:
        raise CheckpointError(f"{path} ({role}) is {found}, not a regular file; remove or rename it")


def _read_meta(meta_path: Path, weights_path: Path) -> dict:
    found = _what_is_there(meta_path)
    if found == "missing":
        known = available_checkpoints(meta_path.parent) if meta_path.parent.is_dir() else []
        raise FileNotFoundError(
            f"no checkpoint sidecar {meta_path.name} in {meta_path.parent} "
            f"(available there: {known or 'none'})"
        )
    _check_regular(meta_path, "the checkpoint's JSON sidecar")
    try:
        text = meta_path.read_bytes().decode("utf-8")
        meta = json.loads(text)
    except OSError as err:
        raise CheckpointError(f"{meta_path} (the checkpoint's JSON sidecar) cannot be read: "
                              f"{err.strerror or err}") from err
    except UnicodeDecodeError as err:
        raise CheckpointError(f"{meta_path.name} (the checkpoint's JSON sidecar) is not UTF-8 text: byte "
                              f"{err.object[err.start:err.start + 1]!r} at offset {err.start}") from None
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{meta_path.name} is not valid JSON: {err}") from err
    except RecursionError:
        raise CheckpointError(f"{meta_path.name} (the checkpoint's JSON sidecar) nests its JSON too "
                              "deeply to read (a sidecar save_checkpoint wrote is 3 levels deep)") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{meta_path.name} should hold a JSON object, found {type(meta).__name__}")
    missing = [k for k in _REQUIRED_KEYS if k not in meta]
    if missing:
        raise CheckpointError(f"{meta_path.name} lacks the keys {missing}")
    for key, types in _FIELD_TYPES.items():
        value = meta.get(key)
        if key in meta and (isinstance(value, bool) or not isinstance(value, types)):
            raise CheckpointError(f"{meta_path.name}: {shown_value(key)} must be "
                                  f"{_JSON_NAMES[types[0]]}, found "
                                  f"{type(value).__name__} {shown_value(value, 60)}")
    if meta["size_bytes"] < 0:
        raise CheckpointError(f"{meta_path.name}: expected size_bytes >= 0, found "
                              f"{shown_value(meta['size_bytes'], 40)}")
    if len(meta["sha256"]) != 64 or not set(meta["sha256"]) <= _HEX_DIGITS:
        raise CheckpointError(f"{meta_path.name}: 'sha256' must be 64 hex digits (0-9, a-f, either case), "
                              f"found {len(meta['sha256'])} characters {shown_value(meta['sha256'], 80)}")
    bad_metrics = {k: v for k, v in meta["metrics"].items()
                   if isinstance(v, bool) or not isinstance(v, int | float) or not finite(v)}
    if bad_metrics:
        raise CheckpointError(f"{meta_path.name}: every metric must be a finite number (save_checkpoint "
                              f"writes no NaN or infinity), found {bad_metrics}")
    if meta["format"] != FORMAT:
        raise CheckpointError(f"{meta_path.name}: expected format {shown_value(FORMAT)}, found "
                              f"{shown_value(meta['format'], 80)}")
    if _what_is_there(weights_path) == "missing":
        raise FileNotFoundError(f"{meta_path.name} is there but its weights {weights_path} are missing")
    _check_regular(weights_path, "the checkpoint's weights")
    return meta


def _verify_bytes(weights_path: Path, meta: dict) -> None:
    try:
        size = weights_path.stat().st_size
        digest = sha256_of(weights_path)
    except OSError as err:
        raise CheckpointError(f"{weights_path} (the checkpoint's weights) cannot be read: "
                              f"{err.strerror or err}") from err
    if size != meta["size_bytes"]:
        kind = "truncated" if size < meta["size_bytes"] else "longer than recorded"
        raise CheckpointError(
            f"{weights_path.name} is {kind}: expected {meta['size_bytes']} bytes, found {size}"
        )
    if digest != meta["sha256"].lower():  # hex is hex in either case: an upper-case digest is the same one
        raise CheckpointError(
            f"{weights_path.name} is corrupted: expected sha256 {meta['sha256']}, found {digest}"
        )


def _config_diff(expected: dict, found: dict) -> str:
    keys = sorted(set(expected) | set(found))
    return ", ".join(f"{k}: expected {shown_value(expected.get(k), 60)}, "
                     f"found {shown_value(found.get(k), 60)}"
                     for k in keys if expected.get(k) != found.get(k))


def load_checkpoint(
    name_or_path: str | Path,
    *,
    task: str | None = None,
    expected_config: ModelConfig | None = None,
    device: str | torch.device = "cpu",
) -> tuple[TinyTransformer, dict]:
    """Load a checkpoint into a new :class:`TinyTransformer` (eval mode); return
    ``(model, meta)`` where ``meta`` is the JSON sidecar as a dict.

    Checks, in order: both files exist; the size and sha256 of the weights match the
    sidecar (its ``sha256`` is 64 hex digits, in either case: anything else is a
    :class:`CheckpointError` naming that field, not a corrupted file); the config in the
    sidecar matches the one in the weights' header (and
    ``expected_config`` when given); every tensor has the name and shape the config
    implies, and the dtype save_checkpoint wrote (float32); the sidecar's task is ``task``
    when given, and otherwise, for a checkpoint named after one of the course's tasks
    (:data:`COURSE_TASKS`: ``"induction"`` and so on), that task: ``load_checkpoint("induction")``
    never hands back a model trained on another task. Any failure raises with what was
    expected and what was found: a file that exists but cannot be read as a checkpoint (not
    UTF-8, nested too deeply, a directory, a FIFO, a symlink loop) is a :class:`CheckpointError`
    naming the file and what it is; only a file that is not there at all is a
    ``FileNotFoundError``, and a ``name_or_path`` that is a folder an ``IsADirectoryError`` naming the
    checkpoints in it (see :func:`checkpoint_paths`). A load while another process saves in the
    same folder waits for that save (or the save for it) and reads a whole pair: see
    :func:`save_checkpoint`, also for Windows.
    """
    if expected_config is not None and not isinstance(expected_config, ModelConfig):
        raise TypeError(f"expected_config must be a ModelConfig or None (a dict converts with "
                        f"ModelConfig.from_dict(d)), got {type(expected_config).__name__}")
    if task is not None and not isinstance(task, str):
        raise TypeError(f"task must be the name of the task the model was trained on (such as "
                        f"'induction') or None, got {type(task).__name__} {shown_value(task, 60)}")
    if task is not None:  # the plain str: it reaches the messages (a subclass's str() may raise)
        task = plain_str(task, "task")
    if task is not None and not task.strip():
        raise ValueError(f"task must name a task, such as 'induction', or be None, got {shown_value(task)}")
    device = pick_device(device, "device")
    weights_path, meta_path = checkpoint_paths(name_or_path)  # a folder refused, as by save_checkpoint
    with _folder_locked(weights_path.parent, exclusive=False):  # a save in the folder waits, or is waited for
        return _load_pair(weights_path, meta_path, task, expected_config, device)


def _load_pair(weights_path: Path, meta_path: Path, task: str | None, expected_config: ModelConfig | None,
               device: torch.device) -> tuple[TinyTransformer, dict]:
    """:func:`load_checkpoint` once its arguments are checked and the folder is locked: read the
    pair, check it, build the model."""
    meta = _read_meta(meta_path, weights_path)
    _check_task_of_meta(meta, meta_path, task)
    try:
        _verify_bytes(weights_path, meta)
    except CheckpointError:
        # a save killed between its two renames: the new weights are in place, the sidecar is
        # still the old one, and the old weights are kept beside them; load that old pair
        previous = _previous_weights(weights_path)
        if _what_is_there(previous) is not None:
            raise
        try:
            _verify_bytes(previous, meta)
        except CheckpointError:
            raise CheckpointError(f"{weights_path.name} does not match {meta_path.name}, and neither does "
                                  f"{previous.name} (left by an interrupted save_checkpoint)") from None
        import warnings

        warnings.warn(f"{weights_path.name} was half replaced by an interrupted save_checkpoint; loading "
                      f"the previous weights {previous.name}, which match {meta_path.name}. Saving "
                      "under this name again removes the leftovers; to keep the old checkpoint "
                      f"instead, rename {previous.name} to {weights_path.name}.", stacklevel=3)
        weights_path = previous
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
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{weights_path.name} is not a readable safetensors file: {err}") from err
    if "config" not in header:
        raise CheckpointError(f"{weights_path.name} has no model config in its header "
                              f"(expected one written by save_checkpoint)")
    try:
        header_config = json.loads(header["config"])
    except (json.JSONDecodeError, RecursionError) as err:
        raise CheckpointError(
            f"{weights_path.name}: the config in its header is not valid JSON: "
            f"{err if isinstance(err, json.JSONDecodeError) else 'nested too deeply to read'}"
        ) from None
    if not isinstance(header_config, dict):
        raise CheckpointError(f"{weights_path.name}: expected a JSON object as the config in its header, "
                              f"found {type(header_config).__name__}")
    if header_config != config.to_dict():
        raise CheckpointError(
            f"{meta_path.name} and {weights_path.name} disagree on the config: "
            f"{_config_diff(header_config, config.to_dict())} "
            f"(expected = the weights' header, found = the sidecar)"
        )
    # built in the checkpoint's dtype, float32, whatever torch's default dtype is: under
    # torch.set_default_dtype(torch.float64) every weight was refused as re-saved (battery 29)
    model = TinyTransformer(config).float()
    wanted = {k: (tuple(v.shape), v.dtype) for k, v in model.state_dict().items()}
    found = {k: (tuple(v.shape), v.dtype) for k, v in tensors.items()}
    if wanted != found:
        problems = [f"missing {k} {wanted[k][0]}" for k in sorted(set(wanted) - set(found))]
        problems += [f"unexpected {k} {found[k][0]}" for k in sorted(set(found) - set(wanted))]
        problems += [f"{k}: expected shape {wanted[k][0]}, found {found[k][0]}"
                     for k in sorted(set(wanted) & set(found)) if wanted[k][0] != found[k][0]]
        retyped = sorted(k for k in set(wanted) & set(found)
                         if wanted[k][0] == found[k][0] and wanted[k][1] != found[k][1])
        for dtypes in sorted({(wanted[k][1], found[k][1]) for k in retyped}, key=str):
            names = [k for k in retyped if (wanted[k][1], found[k][1]) == dtypes]
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            problems.append(f"expected dtype {dtypes[0]}, found {dtypes[1]} in {shown} (weights re-saved "
                            f"in another dtype; save_checkpoint writes {dtypes[0]})")
        raise CheckpointError(f"{weights_path.name} does not fit its config: " + "; ".join(problems))
    _check_finite_weights(tensors, weights_path)
    model.load_state_dict(tensors, strict=True)
    return model.to(device).eval(), meta


def _check_task_of_meta(meta: dict, meta_path: Path, task: str | None) -> None:
    """The sidecar records ``task`` (when given), or, for a checkpoint named after a course task,
    that task; else a CheckpointError naming both."""
    name = meta_path.stem
    wanted = task if task is not None else name if name in COURSE_TASKS else None
    if wanted is None or meta["task"] == wanted:
        return
    why = "" if task is not None else f" (a checkpoint named {shown_value(name)} must hold the {name} model)"
    raise CheckpointError(f"{meta_path} holds a model of the task {shown_value(meta['task'], 60)}, expected "
                          f"{shown_value(wanted)}"
                          f"{why}; to load it anyway, pass task={shown_value(meta['task'], 60)}")


def _check_finite_weights(tensors: dict[str, torch.Tensor], weights_path: Path) -> None:
    """Every floating tensor read from ``weights_path`` is finite (save_checkpoint refuses NaN and
    infinity, so a file holding them was written some other way and would predict nothing)."""
    for name, tensor in sorted(tensors.items()):
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            count = int((~torch.isfinite(tensor)).sum())
            raise CheckpointError(f"{weights_path.name}: tensor {name} holds {count} NaN or infinite "
                                  f"number(s) of {tensor.numel()}; expected finite weights (save_checkpoint "
                                  "refuses them, so this file was written some other way)")
