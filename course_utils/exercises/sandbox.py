"""Run one answer of a student outside the notebook, in a fresh and isolated Python process.

The outside grader (:mod:`.autograde`) never runs a student's code in its own process. For
each autograded answer it

1. takes the answer's code from the submitted notebook, by its syntax tree
   (:func:`answer_source`): the answer's function, the functions and classes it calls, and
   the imports they name. No other top-level statement of the notebook is run;
2. runs that code in a new ``python -I`` process (:func:`run_answer`) under bubblewrap
   (``bwrap``): its own empty temporary folder as the only writable place, no network, its
   own process tree that dies with it, a time limit per call and a memory limit. Its file
   system is an allow-list (:func:`visible_paths`), read-only: the interpreter, its standard
   library, the environment and its ``sys.path``, the ``course_utils`` package folder itself
   and its data folder (not the clone around them), the system's /usr and the loader's files,
   /proc, a minimal /dev and an empty /tmp. The nbgrader course folder, any clone's solutions/ and notebooks/,
   classmates' work and the homes do not exist in there. Without bubblewrap the process
   still runs apart, with the same limits, but sees the file system: :func:`isolation` says
   which, and the grader warns loudly;
3. hands the process the test inputs (never the expected outputs, the salt or any path of
   the course) and reads back its outputs as plain data (:func:`accept`): an exact
   ``torch.Tensor`` (or exact ``torch.nn.Parameter``, read back as its plain tensor) or
   ``numpy.ndarray`` of a real dtype on the CPU, Python numbers, str, None, and tuples, lists
   and str-keyed dicts of those. A subclass, a complex number, an object of any other type is
   refused, whatever its methods say.

What the answer returns is compared in the grader's process, which the answer never touched.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import marshal
import math
import os
import pickle
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from ..attention.validation import check_int, check_record, plain_str, shown
from ..paths import check_path
from .cases import listed

PACKAGE = Path(__file__).resolve().parent.parent  # course_utils/: the one folder of the clone shown
CLONE = PACKAGE.parent  # the instructor's clone (solutions/, notebooks/): hidden from answers

# -- 1. the answer's code ------------------------------------------------------------------
# Names an answer has no business writing: ways to reach code or data by a computed name (which
# a reading of the code cannot follow), the interpreter's internals, and processes. A hit is
# named in the feedback and the answer gets no points.
NOT_IN_AN_ANSWER = {
    "getattr", "setattr", "delattr", "__import__", "eval", "exec", "compile", "globals", "locals",
    "vars", "breakpoint", "importlib", "__dict__", "__getattribute__", "__builtins__", "__code__",
    "__globals__", "__closure__", "__subclasses__", "__class__", "__bases__", "__mro__",
    "_getframe", "f_back", "f_globals", "f_locals", "gc", "inspect", "ctypes", "sys", "os",
    "subprocess", "shutil", "pickle", "marshal", "builtins", "sqlite3", "signal", "socket",
    "atexit", "threading", "multiprocessing", "posix", "nt", "_posixsubprocess", "resource", "mmap",
    "solutions", "REFERENCES", "ops", "aten",
    "_C", "NBGRADER_EXECUTION", "__instancecheck__", "__subclasshook__", "__match_args__",
}
# What reads the course's stored answers (course_utils/exercises/answers/*.pt): the module that
# reads them, its readers, its folder and its files. An answer that names one is refused
# (:func:`rules_broken`), and a kernel whose cells name one gets no "correct" from a check
# (:func:`store_reads`, read by core's checks: battery 10, finding 2).
# A learner's own variable called `answers` is not a read: in a notebook's cells only the module
# itself (imported, or reached as `exercises.answers`), its readers and its files count; the
# answer's own code (rules_broken) may not name `answers` at all.
STORE_NAMES = frozenset({"_answers", "read_store", "decode_case", "ANSWERS_DIR"})
STORE_FILES = re.compile(r"exercises[/\\.]answers\b|\blesson\d\d\.pt\b")
# Hooks that make ``isinstance`` or a ``match`` class pattern read attributes by a built name.
NOT_DEFINED_IN_AN_ANSWER = {"__instancecheck__", "__subclasshook__", "__match_args__"}
# Ready-made twins of an exercise, by check, besides the last part of each name in
# core.LIBRARY_TWINS: the ones the instructor trial called (issue 34) and their relatives.
ATTENTION_TWINS = ("scaled_dot_product_attention", "_scaled_dot_product_attention_math",
                   "_native_multi_head_attention", "multi_head_attention_forward",
                   "MultiheadAttention", "MultiHeadAttention", "naive_mha", "worked_example",
                   "grouped_query_attention", "naive_from_batched",
                   # torch's layers that hold a MultiheadAttention (reached by `children()`) or run
                   # the fused encoder kernel (cold trial C6, C14)
                   "TransformerEncoderLayer", "TransformerDecoderLayer", "TransformerEncoder",
                   "TransformerDecoder", "Transformer", "_transformer_encoder_layer_fwd")
EXTRA_TWINS: dict[str, tuple[str, ...]] = {
    "lesson01.check_attend": ATTENTION_TWINS,
    "lesson01.check_head_scores": ATTENTION_TWINS,
    "lesson02.check_softmax_rows": ("softmax", "_softmax", "log_softmax", "special", "_softmax_rows",
                                    "worked_example", "scipy"),
    "lesson02.check_attention_weights": ATTENTION_TWINS + ("_softmax_rows",),
    "lesson02.check_causal_attention_weights": ATTENTION_TWINS + ("_softmax_rows", "causal_mask"),
    "lesson02.check_single_head_attention": ATTENTION_TWINS + ("_softmax_rows",),
    "lesson03.check_parameter_count": ("MultiheadAttention", "MultiHeadAttention",
                                        "TransformerEncoderLayer", "TransformerDecoderLayer",
                                        "Transformer", "TransformerEncoder", "TransformerDecoder",
                                        "self_attn", "multihead_attn"),
    "lesson03.check_merge_heads": ("merge_heads", "MultiHeadAttention"),
    "lesson03.check_split_heads": ("split_heads", "MultiHeadAttention"),
    "lesson04.check_stack_head_weights": ("naive_mha", "naive_from_batched", "stack_head_weights"),
    "lesson04.check_mha_forward": ATTENTION_TWINS + ("causal_mask",),
    "lesson07.check_repeat_kv": ("repeat_kv", "enable_gqa", "grouped_query_attention"),
    "lesson07.check_decode_step": ("grouped_query_attention", "naive_mha", "worked_example",
                                   "_native_multi_head_attention", "MultiHeadAttention",
                                   "MultiheadAttention", "TransformerEncoderLayer",
                                   "TransformerDecoderLayer", "TransformerEncoder", "TransformerDecoder",
                                   "Transformer", "_transformer_encoder_layer_fwd"),
}
# Parts of a name (any case) that mark a ready-made twin of an exercise wherever they appear in
# a name the answer does not define itself: softmin, Softmax, LogSoftmax, gumbel_softmax (fifth
# trial a01, a07).
TWIN_PARTS: dict[str, tuple[str, ...]] = {"lesson02.check_softmax_rows": ("softm",)}
# Exercises whose Library use line allows part of course_utils, and the only course_utils modules
# they may import; every other exercise rules course_utils out. 5.3 may use `best_head` from the
# scores module (INSTRUCTORS.md, threat model); the library's `induction_score` stays forbidden by
# the call watch, which the audit hook of the answer's process keeps out of the answer's reach.
COURSE_UTILS_ALLOWED: dict[str, frozenset[str]] = {
    "lesson05.check_find_induction_head": frozenset({"course_utils", "course_utils.interp",
                                                     "course_utils.interp.scores"}),
}
# Exercises whose Library use line allows a module beyond IMPORTS_ALLOWED: 6.2 computes gradients
# ("torch autograd yes"), so `torch.autograd.grad` is as good as `.backward()` there (learner
# trial l12). The module alone: its submodules (profiler, graph) stay refused.
MODULES_ALSO_ALLOWED: dict[str, frozenset[str]] = {
    "lesson06.check_gate_importance": frozenset({"torch.autograd"}),
}
# Exercises whose Library use line allows fewer modules than IMPORTS_ALLOWED: 2.1 is numpy only
# (cold trial C12: torch's cross_entropy computes a log-softmax).
IMPORTS_ONLY: dict[str, frozenset[str]] = {
    "lesson02.check_softmax_rows": frozenset({"__future__", "math", "typing", "collections",
                                              "collections.abc", "itertools", "dataclasses",
                                              "numpy", "numpy.linalg", "numpy.typing"}),
}
# Attributes that hand over a frame (and from it the builtins, the caller's locals: cold trial
# C1, C2, C4) or a code object. The audit hook of the answer's process refuses most of them at
# run time too.
FRAME_ATTRIBUTES = {
    "__traceback__", "tb_frame", "tb_next", "tb_lasti", "tb_lineno", "f_back", "f_builtins",
    "f_code", "f_globals", "f_locals", "f_trace", "f_lasti", "f_lineno", "gi_frame", "gi_code",
    "gi_yieldfrom", "gi_running", "cr_frame", "cr_code", "cr_await", "cr_origin", "ag_frame",
    "ag_code", "ag_await", "co_code", "co_consts", "co_names",
}
# The only dunder attributes an answer may name (`super().__init__()` in its own module class);
# any other (`__getattr__`, `__setattr__`, `__dict__`, ...) reaches attributes by a built name
# (cold trial C3, C9).
DUNDERS_ALLOWED = {"__init__", "__call__", "__len__", "__getitem__", "__iter__", "__name__",
                   "__doc__", "__repr__", "__str__", "__eq__", "__hash__"}
# The only modules an answer may import (a name here allows its submodules only where listed):
# the maths libraries and a few plain helpers of the standard library. Anything else (pkgutil,
# operator, runpy, pathlib, json, concurrent, types, pydoc, ...) reaches code or files by a
# name built at run time, or runs code apart from the call watch (trial 3: N1-N5, N13, N14).
IMPORTS_ALLOWED = {"__future__", "math", "typing", "collections", "collections.abc", "itertools",
                   "functools", "dataclasses", "numpy", "numpy.linalg", "numpy.random", "numpy.fft",
                   "numpy.typing", "torch", "torch.nn", "torch.nn.functional", "torch.nn.init",
                   "torch.linalg", "torch.fft", "torch.special", "torch.distributions", "einops"}
# Names of allowed modules that read or write files, load compiled code, or evaluate a string
# as code (typing.get_type_hints and functools.singledispatch evaluate string annotations).
NOT_FROM_ALLOWED_MODULES = {
    "open", "input", "load", "loads", "loadtxt", "fromfile", "genfromtxt", "fromregex", "memmap",
    "open_memmap", "DataSource", "from_file", "save", "savez", "savez_compressed", "savetxt", "tofile",
    "hub", "package", "serialization", "cpp_extension", "load_inline", "load_library", "ctypeslib",
    "library", "jit", "get_type_hints", "ForwardRef", "singledispatch", "singledispatchmethod",
    "__loader__", "__spec__", "__file__",
    # numpy's .npy reader unpickles any object (builtins.exec) when asked to (fifth trial a04, a10)
    "lib", "read_array", "allow_pickle", "NpzFile", "pickle", "Unpickler",
    # tables of every torch function, to pick one by a name built at run time (fifth trial a15)
    "overrides", "get_overridable_functions", "get_testing_overrides", "get_ignored_functions",
    # getattr and setattr by names given as data (cold trial C13)
    "update_wrapper", "wraps",
}


class AnswerProblem(Exception):
    """The answer's code could not be taken from the notebook; the message says why."""


def _parsed(source: str) -> ast.Module | None:
    """A cell's syntax tree, IPython's ``%magic`` and ``!shell`` lines read as blank; None when
    the cell is not Python."""
    lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()]
    try:
        return ast.parse("\n".join(lines))
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        # ValueError: a null byte; MemoryError, RecursionError: an expression nested so deep that
        # the parser gives up (`return ------...1`). Not Python the grader can read, like a typo.
        return None


def _syntax_error(source: str) -> str:
    """Why ``source`` is not Python, in a few words (as :func:`_parsed` reads it)."""
    lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()]
    try:
        ast.parse("\n".join(lines))
    except SyntaxError as exc:
        return f"SyntaxError: {exc.msg}, line {exc.lineno}"
    except (ValueError, MemoryError, RecursionError) as exc:
        return f"{type(exc).__name__}: {str(exc)[:80] or 'too deeply nested'}"
    return "it could not be parsed"


def _names_in(node: ast.AST, own: frozenset[str] = frozenset()) -> set[str]:
    """Every name and attribute an AST node mentions, but a plain name of ``own`` (a function or
    class the code defines itself, called by its name: a recursion, a helper of the same name)."""
    found: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            if sub.id not in own:
                found.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            found.add(sub.attr)
        elif isinstance(sub, ast.alias):
            found.update(sub.name.split("."))
            if sub.asname:
                found.add(sub.asname)
        elif isinstance(sub, ast.ImportFrom) and sub.module:
            found.update(sub.module.split("."))
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value.isidentifier():
            found.add(sub.value)  # a name spelled as a string: getattr(torch, "softmax")
    return found


def _names_the_store_module(node: ast.AST) -> bool:
    """``node`` imports ``course_utils.exercises.answers`` or reaches it as ``exercises.answers``."""
    if isinstance(node, ast.ImportFrom) and node.module:
        return node.module.endswith("exercises.answers") or (
            node.module.split(".")[-1] == "exercises" and any(a.name == "answers" for a in node.names))
    if isinstance(node, ast.Import):
        return any(a.name.endswith("exercises.answers") for a in node.names)
    if isinstance(node, ast.Attribute) and node.attr == "answers":
        return getattr(node.value, "id", getattr(node.value, "attr", None)) == "exercises"
    return False


def _store_reads(tree: ast.AST, *, any_answers_name: bool = False) -> set[str]:
    """What in ``tree`` reads the course's stored answers: the module (imported or reached as
    ``exercises.answers``), its readers (:data:`STORE_NAMES`), a string naming one of its files
    (:data:`STORE_FILES`) and, with ``any_answers_name`` (an answer's own code), any name
    ``answers``."""
    names = _names_in(tree)
    found = {f"`{n}` (the course's stored answers)" for n in names & STORE_NAMES}
    if (any_answers_name and "answers" in names) or any(map(_names_the_store_module, ast.walk(tree))):
        found.add("`answers` (the course's stored answers)")
    found |= {f"{node.value!r:.60} (a file of the course's stored answers)" for node in ast.walk(tree)
              if isinstance(node, ast.Constant) and isinstance(node.value, str)
              and STORE_FILES.search(node.value)}
    return found


def store_reads(cells: Sequence[str]) -> list[str]:
    """What in ``cells`` (code cells of a notebook or the kernel's history) reads the course's
    stored answers, by the grader's own rule (:func:`_store_reads`); sorted, empty when nothing
    does. A cell that is not valid Python is skipped."""
    cells = listed(cells, "cells", "a list of code cells (str)")
    if isinstance(cells, (str, bytes)) or not isinstance(cells, Sequence) \
            or not all(isinstance(c, str) for c in cells):
        raise TypeError(f"cells must be a list of code cells (str), got {type(cells).__name__} "
                        f"{shown(cells, 60)}")
    found: set[str] = set()
    for source in cells:
        found |= _cell_store_reads(source)
    return sorted(found)


@functools.lru_cache(maxsize=4096)
def _cell_store_reads(source: str) -> frozenset[str]:
    """:func:`_store_reads` of one cell, remembered: a kernel's history is read again at every
    check, and only its newest cells are new (a notebook's 50 cells cost 20 ms to parse)."""
    tree = _parsed(source)
    return frozenset(_store_reads(tree)) if tree is not None else frozenset()


def answer_source(cells: Sequence[str], name: str, answer_cell: int | None = None) -> str:
    """The code of answer ``name`` from a notebook's code cells (those before its test cell):
    the last top-level ``def name`` (in ``cells[answer_cell]`` when that cell defines it), the
    functions and classes it names, transitively, and the imports that bind a name they use.
    No other statement is kept. Raises :class:`AnswerProblem`."""
    cells = listed(cells, "cells", "a list of code cells (str)")
    if isinstance(cells, (str, bytes)) or not isinstance(cells, Sequence) \
            or not all(isinstance(c, str) for c in cells):
        raise TypeError(f"cells must be a list of the notebook's code cells (str), got {type(cells).__name__}"
                        + (" (one string: wrap it in a list)" if isinstance(cells, str) else ""))
    _need_identifier("name", name, "the answer's function name")
    name = plain_str(name, "name")  # (a str subclass: the plain str it holds, printed below)
    if answer_cell is not None and (isinstance(answer_cell, bool) or not isinstance(answer_cell, int)
                                    or not 0 <= answer_cell < len(cells)):
        raise ValueError(f"answer_cell must be None or an index into the {len(cells)} cells "
                         f"(0..{len(cells) - 1}), got {shown(answer_cell)}")
    definitions: dict[str, ast.AST] = {}
    imports: list[ast.AST] = []
    order: dict[int, int] = {}
    unreadable: list[int] = []
    for index, source in enumerate(cells):
        tree = _parsed(source)
        if tree is None:
            unreadable.append(index)
            if index == answer_cell:
                raise AnswerProblem("the answer's cell is not valid Python the grader can read (a "
                                    "SyntaxError, or an expression nested too deeply for Python's parser)")
            continue
        for node in tree.body:
            order[id(node)] = index
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                definitions[node.name] = node
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                imports.append(node)
    if answer_cell is not None:  # the answer cell's own definition wins over any other
        tree = _parsed(cells[answer_cell])
        own = [n for n in (tree.body if tree else []) if isinstance(n, ast.FunctionDef) and n.name == name]
        if own:
            definitions[name] = own[-1]
            order[id(own[-1])] = answer_cell  # after the helpers of earlier cells it may use
    if not isinstance(definitions.get(name), (ast.FunctionDef, ast.AsyncFunctionDef)):
        named = [i for i in unreadable if re.search(rf"\bdef\s+{re.escape(name)}\b", cells[i])]
        if named:  # the def is there, in a cell that is not Python: say so, not "missing"
            raise AnswerProblem(f"`{name}` is defined in code cell {named[-1] + 1} before the test cell, "
                                f"but that cell is not valid Python ({_syntax_error(cells[named[-1]])}): "
                                "the grader cannot read it. Fix the cell and run it again.")
        raise AnswerProblem(f"no function `{name}` is defined before the test cell"
                            + (f" (code cell{'s' if len(unreadable) > 1 else ''} "
                               f"{', '.join(str(i + 1) for i in unreadable[:5])} "
                               "could not be read: not valid Python)" if unreadable else ""))
    keep, todo = {name}, [name]
    while todo:
        for used in _names_in(definitions[todo.pop()]):
            if used in definitions and used not in keep:
                keep.add(used)
                todo.append(used)
    needed: set[str] = set()
    for kept in keep:
        needed |= _names_in(definitions[kept])
    chosen = []
    for node in imports:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            chosen.append(node)
            continue
        bound = {(a.asname or a.name).split(".")[0] for a in node.names}
        if bound & needed:
            chosen.append(node)
    chosen.sort(key=lambda n: (not (isinstance(n, ast.ImportFrom) and n.module == "__future__"),
                               order.get(id(n), 0)))
    # by cell, then by line: a set's order (hash randomisation) put a subclass before its base
    body = chosen + sorted((definitions[k] for k in keep), key=lambda n: (order.get(id(n), 0), n.lineno))
    try:
        return ast.unparse(ast.Module(body=body, type_ignores=[]))
    except (RecursionError, MemoryError, ValueError):
        raise AnswerProblem("the answer's code is nested too deeply for the grader to read it back "
                            "(an expression of hundreds of levels)") from None


def _need_text(label: str, value: Any, what: str) -> None:
    """``value`` (the argument ``label``) must be a str: else a TypeError naming it."""
    if not isinstance(value, str):
        raise TypeError(f"{label}: expected {what} (a str), got {type(value).__name__} {shown(value, 60)}")


def _need_identifier(label: str, value: Any, what: str) -> None:
    """``value`` (the argument ``label``) must be a str that is a Python identifier: else a
    TypeError or ValueError naming it (no function could be found under another name)."""
    _need_text(label, value, what)
    if not value.isidentifier():
        raise ValueError(f"{label}: expected {what} (a Python identifier), got {shown(value, 60)}")


def is_stub(code: str, name: str) -> bool:
    """True when function ``name`` in ``code`` is still the release's stub: its body (after a
    docstring) only ``raise NotImplementedError`` (bare, or with the stub's message), no
    decorator. Such an answer needs no process: it is not attempted. ``name`` must be a Python
    identifier: no function is named ``''`` (it answered False, "not a stub": battery 22's re-run)."""
    _need_text("code", code, "the answer's source text")
    _need_identifier("name", name, "the answer function's name")
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    if len(defs) != 1 or defs[0].decorator_list:
        return False
    body = defs[0].body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].cause is not None:
        return False
    exc = body[0].exc
    if isinstance(exc, ast.Name):
        return exc.id == "NotImplementedError"
    if not (isinstance(exc, ast.Call) and isinstance(exc.func, ast.Name)
            and exc.func.id == "NotImplementedError" and not exc.keywords):
        return False
    return not exc.args or (len(exc.args) == 1 and isinstance(exc.args[0], ast.Constant)
                            and exc.args[0].value in ("", "your code here"))


def _module_allowed(module: str, check_key: str) -> bool:
    if check_key in IMPORTS_ONLY:
        return module in IMPORTS_ONLY[check_key]
    return (module in IMPORTS_ALLOWED or module in COURSE_UTILS_ALLOWED.get(check_key, ())
            or module in MODULES_ALSO_ALLOWED.get(check_key, ()))


def _bound_module(dotted: str) -> str | None:
    """The name of the module that ``dotted`` (``typing.operator``) is bound to, read from the
    modules the grader has loaded, without importing anything or calling a module's
    ``__getattr__``; None when it is not a module (or not loaded here)."""
    parts = dotted.split(".")
    obj: Any = sys.modules.get(parts[0])
    for part in parts[1:]:
        if not isinstance(obj, types.ModuleType):
            return None
        obj = vars(obj).get(part, sys.modules.get(f"{obj.__name__}.{part}"))
    name = getattr(obj, "__name__", None) if isinstance(obj, types.ModuleType) else None
    return name if isinstance(name, str) else None


# torch's and NumPy's own submodules that load, save or compile code, or list every function:
# refused as attributes of anything. Their other submodules (`attention`, `distributions.normal`)
# are harmless, and their names are common names of an answer's own attributes.
RISKY_SUBMODULES = {"hub", "package", "serialization", "jit", "fx", "library", "ops", "overrides",
                    "testing", "utils", "compiler", "export", "cpp", "backends", "lib", "ctypeslib",
                    "f2py", "distributed", "multiprocessing", "func", "classes", "_dynamo", "onnx"}


@functools.cache
def _module_attribute_names(check_key: str) -> frozenset[str]:
    """Names under which an allowed module holds a module the exercise may not use
    (``typing.operator``, ``torch.platform``, ``dataclasses.types``): refused as an attribute
    whatever it is read from, since ``mods().operator`` (a call returning ``typing``) is no
    chain the grader can follow (cold trial C22). A name that an allowed module also binds to
    something else (``np.random.normal``, ``np.copy``), that ends an allowed module's name
    (``functional``, ``random``) or that a tensor or an array has (``grad``) stays allowed."""
    allowed = (IMPORTS_ONLY.get(check_key, IMPORTS_ALLOWED) | COURSE_UTILS_ALLOWED.get(check_key, set())
               | MODULES_ALSO_ALLOWED.get(check_key, set()))
    fine = set(dir(torch.Tensor)) | set(dir(np.ndarray)) | {m.rsplit(".", 1)[-1] for m in allowed}
    held = set()
    for module_name in allowed:
        module = sys.modules.get(module_name)
        for name, value in (vars(module).items() if isinstance(module, types.ModuleType) else ()):
            if not isinstance(value, types.ModuleType):
                fine.add(name)
            elif not _module_allowed(str(value.__name__), check_key) and (
                    str(value.__name__).split(".")[0] not in ("torch", "numpy") or name in RISKY_SUBMODULES):
                held.add(name)
    return frozenset(n for n in held - fine if not n.startswith("_"))  # private names: refused anyway


def _module_refused(dotted: str, check_key: str) -> bool:
    """True when ``dotted`` names a module outside the exercise's allow-list: a submodule
    (``torch.hub``) or a module bound as an attribute of an allowed one (``typing.operator``,
    ``torch.platform``: cold trial C5). Imports nothing."""
    if _module_allowed(dotted, check_key):
        return False
    bound = _bound_module(dotted)
    if bound is not None:
        return True  # a module under a name that is not itself allowed
    return _is_module(dotted)


def _is_module(dotted: str) -> bool:
    """True when ``dotted`` names a module (``torch.hub``), not a function or class; asked only
    for a name inside an allowed module, which the grader has imported already."""
    import importlib.util

    if dotted.rpartition(".")[0] not in sys.modules:  # finding it would import its package here
        return False
    try:
        return importlib.util.find_spec(dotted) is not None
    except (ImportError, ValueError, AttributeError):
        return False


def _own_parameters(tree: ast.AST) -> dict[int, str]:
    """For each attribute store or delete (by id) in the body of a method (a function defined
    directly in a class), the name of that method's first parameter, unless the method binds
    that name again (``self = torch.Tensor``). A plain function's ``self`` parameter and a nested
    function's get nothing (hardening item 4, cold trial C7b)."""
    found: dict[int, str] = {}
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        for method in cls.body:
            if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            params = [*method.args.posonlyargs, *method.args.args]
            if not params:
                continue
            first = params[0].arg
            nested = {id(n) for sub in ast.walk(method) if sub is not method
                      and isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef))
                      for n in ast.walk(sub)}
            rebound = any(isinstance(n, ast.Name) and n.id == first and not isinstance(n.ctx, ast.Load)
                          or isinstance(n, (ast.Global, ast.Nonlocal)) and first in n.names
                          or isinstance(n, ast.arg) and n.arg == first and n is not params[0]
                          for n in ast.walk(method))
            if rebound:
                continue
            for node in ast.walk(method):
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)) \
                        and id(node) not in nested:
                    found[id(node)] = first
    return found


def _policy_broken(tree: ast.AST, check_key: str) -> set[str]:
    """What breaks the import allow-list (:data:`IMPORTS_ALLOWED`), names a file reader or a
    string evaluator (:data:`NOT_FROM_ALLOWED_MODULES`), or assigns an attribute of anything
    but the answer's own object (``self``, ``cls``): ``torch.save = ...``, ``np.x = ...``."""
    found: set[str] = set()
    imported: dict[str, str] = {}  # a name the answer binds by import -> the module or object
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    imported[alias.asname] = alias.name
                else:
                    imported[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    own_names = {"self", "cls"}  # an answer sets attributes only through these: never bind a module to them
    methods_own = _own_parameters(tree)  # id of each attribute store -> its method's first parameter
    for name in sorted(own_names & set(imported)):
        found.add(f"importing as `{name}` (the name of an object's own first parameter)")
    for top in getattr(tree, "body", []):
        targets = [t for t in ast.walk(top) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)] \
            if not isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else []
        for target in targets:
            if target.id in own_names:
                found.add(f"binding `{target.id}` outside a method (the name of an object's own "
                          "first parameter)")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):  # a module reached as an attribute: torch.fx, np.lib
            parts, root = [], node
            while isinstance(root, ast.Attribute):
                parts.append(root.attr)
                root = root.value
            if isinstance(root, ast.Name) and root.id in imported:
                dotted = ".".join([imported[root.id], *reversed(parts)])
                if _module_refused(dotted, check_key):
                    found.add(f"`{ast.unparse(node)}` (the module {dotted}, which answers may not use)")
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not _module_allowed(alias.name, check_key):
                    found.add(f"`import {alias.name}` (an answer imports only {_allowed_tops(check_key)})")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level or not _module_allowed(module, check_key):
                found.add(f"`from {'.' * node.level}{module} import` (an answer imports only "
                          f"{_allowed_tops(check_key)})")
                continue
            for alias in node.names:
                if alias.name == "*":
                    found.add(f"`from {module} import *` (import the names you use)")
                elif alias.name in NOT_FROM_ALLOWED_MODULES:
                    found.add(f"`{alias.name}` (reads or writes files, or runs a string as code)")
                elif module != "__future__" and _module_refused(f"{module}.{alias.name}", check_key):
                    found.add(f"`from {module} import {alias.name}` (a module answers may not import)")
        elif isinstance(node, ast.Attribute) and node.attr in NOT_FROM_ALLOWED_MODULES:
            found.add(f"`.{node.attr}` (reads or writes files, or runs a string as code)")
        elif isinstance(node, ast.Name) and node.id in NOT_FROM_ALLOWED_MODULES:
            found.add(f"`{node.id}` (reads or writes files, or runs a string as code)")
        elif isinstance(node, ast.keyword) and node.arg in NOT_FROM_ALLOWED_MODULES:
            found.add(f"`{node.arg}=` (reads or writes files, or runs a string as code)")
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            root = node.value
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            if not (isinstance(root, ast.Name) and methods_own.get(id(node)) == root.id in own_names):
                found.add(f"assigning `{ast.unparse(node)}` (an answer sets attributes only of its own "
                          "objects, through `self` or `cls` as the first parameter of a method of its "
                          "own class; never of a module or a library's object)")
    return found


def _allowed_tops(check_key: str) -> str:
    """The top-level modules exercise ``check_key`` may import, for a refusal's message."""
    allowed = IMPORTS_ONLY.get(check_key, IMPORTS_ALLOWED) | COURSE_UTILS_ALLOWED.get(check_key, set())
    return ", ".join(sorted({m.split(".")[0] for m in allowed} - {"__future__"}))


def _check_key_known(check_key: Any) -> None:
    """``check_key`` is "lessonNN.check_xxx" of a check that exists (an unknown one would be read
    with no twins at all, so every answer would pass the rules)."""
    import importlib

    match = re.fullmatch(r"(lesson\d\d)\.(check_\w+)", check_key) if isinstance(check_key, str) else None
    try:
        module = importlib.import_module(f"course_utils.exercises.{match.group(1)}") if match else None
    except ImportError:
        module = None
    if module is None or not callable(getattr(module, match.group(2), None)):
        raise ValueError(f"check_key must name an exercise check, 'lessonNN.check_xxx' such as "
                         f"'lesson02.check_softmax_rows', got {shown(check_key)}")


def twin_names(check_key: str) -> frozenset[str]:
    """The names of the ready-made twins of the exercise ``check_key`` ("lessonNN.check_xxx"):
    the last part of each name in core.LIBRARY_TWINS and :data:`EXTRA_TWINS`; the code rule
    below reads them in an answer's code, and the kernel's checks watch for builtins and torch
    operators of these names (core._CallWatch). A key that names no check is refused (ValueError
    naming ``check_key``): read as one with no twins, it would let every answer through the rule."""
    _check_key_known(check_key)
    return _twins_of(check_key)


def _twins_of(check_key: str) -> frozenset[str]:
    """:func:`twin_names` of a key known to name a check (a check's own, core.TWIN_NAMES)."""
    from .core import LIBRARY_TWINS

    return frozenset({dotted.rsplit(".", 1)[-1] for dotted in LIBRARY_TWINS.get(check_key, ())}
                     | set(EXTRA_TWINS.get(check_key, ())))


def rules_broken(code: str, check_key: str) -> list[str]:
    """What in the answer's ``code`` no answer may hold: ways around a reading of the code
    (:data:`NOT_IN_AN_ANSWER`), a private name of another module (``module._helper``), the
    exercise's ready-made twins (``check_key`` is "lessonNN.check_xxx"), an import outside
    :data:`IMPORTS_ALLOWED`, a file reader or string evaluator of an allowed module
    (:data:`NOT_FROM_ALLOWED_MODULES`), and an assignment to an attribute of a module or a
    library's object. Sorted."""
    _need_text("code", code, "the answer's source text")
    _check_key_known(check_key)
    twins = set(_twins_of(check_key))
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return ["code the grader cannot read back (a SyntaxError, or nested too deeply)"]
    found = set()
    mentioned = _names_in(tree)
    found |= {f"`{n}`" for n in mentioned & NOT_IN_AN_ANSWER}
    # a function of the answer's own that calls itself by its name (`split_heads` recursing over
    # the leading axes) is no twin: only the library's, reached by an import, an attribute or a
    # string, is one
    defined = frozenset(n.name for n in ast.walk(tree)
                        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))
    found |= {f"`{n}` (a ready-made twin of this exercise)" for n in _names_in(tree, defined) & twins}
    if TWIN_PARTS.get(check_key):
        own = {n.name for n in ast.walk(tree)
               if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        own |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        own |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
        found |= {f"`{n}` (a ready-made twin of this exercise)" for n in mentioned - own
                  if any(part in n.lower() for part in TWIN_PARTS[check_key])}
    found |= {f"`.{n}` (reaches a frame or a code object)" for n in mentioned & FRAME_ATTRIBUTES}
    modules_held = _module_attribute_names(check_key)
    found |= {f"`.{n.attr}` (a module that answers may not use, held by an allowed one)"
              for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in modules_held}
    if check_key not in COURSE_UTILS_ALLOWED and "course_utils" in mentioned:
        found.add("`course_utils` (this exercise asks for your own code, not the course's)")
    found |= _policy_broken(tree, check_key)
    found |= _store_reads(tree, any_answers_name=True)
    for node in ast.walk(tree):
        if isinstance(node, ast.Match):  # `case object(__globals__=g)` reads any attribute
            found.add("`match` (a class pattern reads attributes apart from the code's names; "
                      "use `if`)")
        if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and node.name in NOT_DEFINED_IN_AN_ANSWER):
            found.add(f"`{node.name}`")
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not (node.attr.startswith("__") and node.attr.endswith("__"))):
            found.add(f"`.{node.attr}` (another module's private name)")
        if (isinstance(node, ast.Attribute) and node.attr.startswith("__") and node.attr.endswith("__")
                and node.attr not in DUNDERS_ALLOWED):
            found.add(f"`.{node.attr}` (reaches attributes by a name built at run time)")
        if isinstance(node, ast.ImportFrom):
            found |= {f"`{a.name}` (another module's private name)" for a in node.names
                      if a.name.startswith("_") and node.module != "__future__"}
    return sorted(found)


def _globals_read(code: types.CodeType) -> set[str]:
    """The global names a compiled module's functions (and its decorators and defaults) read."""
    import dis

    found: set[str] = set()
    todo = [code]
    while todo:
        current = todo.pop()
        for instruction in dis.get_instructions(current):
            if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                found.add(str(instruction.argval))
        todo.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
    return found


# A test cell's check call, e.g. ``lesson02.check_softmax_rows(softmax_rows).assert_passed()``.
CHECK_CALL = re.compile(r"^(?:print\()?(?P<module>lesson\d\d)\.(?P<check>check_\w+)\((?P<arg>\w+)\)"
                        r"(?:\)|\.assert_passed\(\))?\s*$")


def check_call(source: str) -> re.Match | None:
    """The check call of a test cell (its only statement besides comments), or None."""
    _need_text("source", source, "a test cell's source text")
    lines = [line.strip() for line in source.splitlines()
             if line.strip() and not line.strip().startswith("#")]
    return CHECK_CALL.match(lines[0]) if len(lines) == 1 else None


def _check_note_inputs(cells: object, check_key: object) -> list[str]:
    """What :func:`grading_note` reads: the code cells as a list (or tuple) of str, and the key
    of a check that exists. Returns the cells as a plain list, read once."""
    cells = listed(cells, "cells", "a list of code cells (str)")
    if isinstance(cells, (str, bytes)) or not isinstance(cells, Sequence):
        raise TypeError(f"cells must be the notebook's code cells so far, a list of str (the test "
                        f"cell last), got {type(cells).__name__} {shown(cells, 60)}")
    wrong = next((i for i, c in enumerate(cells) if not isinstance(c, str)), None)
    if wrong is not None:
        raise TypeError(f"cells[{wrong}] must be a cell's source text (a str), got "
                        f"{type(cells[wrong]).__name__} {shown(cells[wrong], 60)}")
    _check_key_known(check_key)
    return cells


def grading_note(cells: Sequence[str], check_key: str) -> str | None:
    """For a correct answer checked in a kernel: a warning when the outside grader would not run
    it as the kernel did (:func:`grading_preview`). ``cells`` are the code cells run so far, the
    test cell last; None when that last cell is not ``check_key``'s check call (the history is
    then not the notebook's) or when nothing is wrong. A ``cells`` that is not a list of str,
    or a ``check_key`` that names no check, is a TypeError or ValueError (a None there would
    read as "nothing to note")."""
    cells = _check_note_inputs(cells, check_key)
    call = check_call(cells[-1]) if cells else None
    if call is None or f"{call['module']}.{call['check']}" != check_key:
        return None
    problems = grading_preview(cells[:-1], call["arg"], check_key)
    if not problems:
        return None
    return ("⚠️ But at grading this answer would score 0: " + "; ".join(problems)
            + ". Keep everything the function needs inside it, or pass it as an argument.")


def grading_preview(cells: Sequence[str], name: str, check_key: str) -> list[str]:
    """What would keep answer ``name`` from running at autograde as it ran in the notebook, read
    from the notebook's code cells so far (``cells``; the kernel's input history): the answer
    cannot be found, it uses what :func:`rules_broken` refuses, or it reads a name that only a
    top-level statement binds (a variable or a lambda from another cell), which the grader does
    not run. Empty when none. Never raises: a bad ``cells``, ``name`` or ``check_key`` (one that
    names no exercise check) is answered with a message naming it."""
    import builtins

    try:
        cells = listed(cells, "cells", "the notebook's code cells so far (a list of str)")
    except TypeError as err:
        return [str(err)]
    if isinstance(cells, (str, bytes)) or not isinstance(cells, Sequence) \
            or not all(isinstance(c, str) for c in cells):
        return [f"cells: expected the notebook's code cells so far (a list of str), got "
                f"{type(cells).__name__} {shown(cells, 60)}"]
    if type(name) is not str or not name.isidentifier():  # no answer can be found under it
        return [f"name: expected the answer's function name (a str such as 'softmax_rows'), got "
                f"{type(name).__name__} {shown(name, 60)}"]
    try:  # an unknown check_key would be read as a check with no rules at all
        _check_key_known(check_key)
    except ValueError as err:
        return [str(err)]
    try:
        code = answer_source(cells, name)
    except AnswerProblem as problem:
        return [str(problem)]
    except Exception:  # noqa: BLE001 - a preview only; the grader gives its own verdict
        return []
    try:
        problems = []
        broken = rules_broken(code, check_key)
        if broken:
            problems.append("the grader refuses answers whose code uses " + ", ".join(broken))
        tree = ast.parse(code)
        defined = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        bound = {n.name for n in tree.body if isinstance(n, defined)}
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        missing = sorted(_globals_read(compile(tree, "<answer>", "exec")) - bound - set(dir(builtins)))
        if missing:
            problems.append("it reads " + ", ".join(f"`{m}`" for m in missing) + ", which only a "
                            "statement outside any function sets (a variable, or a lambda), and the "
                            "grader runs your functions and imports alone")
        return problems
    except Exception:  # noqa: BLE001
        return []


# -- 2. what crosses between the grader and the answer's process ---------------------------
def _rebuild_function(code: bytes, module: str, name: str, defaults: Any, closure: tuple) -> Any:
    """A case builder's local function (6.2's loss closure) made again from its parts."""
    cells = tuple(types.CellType(value) for value in closure)
    return types.FunctionType(marshal.loads(code), vars(importlib.import_module(module)), name,
                              defaults, cells or None)


class _CasePickler(pickle.Pickler):
    """Pickles test cases, including a case builder's local functions (by code and closure)."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, types.FunctionType) and "<locals>" in obj.__qualname__:
            closure = tuple(c.cell_contents for c in (obj.__closure__ or ()))
            return _rebuild_function, (marshal.dumps(obj.__code__), obj.__module__, obj.__name__,
                                       obj.__defaults__, closure)
        return NotImplemented


#: What :func:`to_plain` and :func:`accept` take, for their messages and the grader's feedback.
PLAIN_OUTPUTS = ("an exact torch.Tensor (or torch.nn.Parameter) or numpy.ndarray of a real dtype on the CPU, "
                 "Python numbers, str, None, and tuples, lists and str-keyed dicts of those")


class Refused(TypeError):
    """An output of a kind the grader does not accept. The message says what was refused
    (``what``: its type, dtype or size), where in the output it sits (``where``:
    ``output[1]['a']``), and what is taken instead (:data:`PLAIN_OUTPUTS`)."""

    def __init__(self, what: str, where: str = "output") -> None:
        for label, text in (("what", what), ("where", where)):  # str() of another raised its own error
            if type(text) is not str:
                raise TypeError(f"Refused's {label} must be a str (what was refused; where it sits), got "
                                f"{type(text).__name__} {shown(text, 60)}")
        self.what, self.where = what, where
        super().__init__(f"{what} at {where} (the grader takes only plain data: {PLAIN_OUTPUTS})")


#: The exact tensor types :func:`to_plain` takes: a right answer may well return ``nn.Parameter(...)``.
_TENSOR_KINDS = (torch.Tensor, torch.nn.Parameter)
_REAL_KINDS = "biuf"  # bool, signed and unsigned integers, floating point


def _type_name(value: Any) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}".removeprefix("builtins.")


def _check_where(where: object) -> None:
    """``where`` (the place in the output that :class:`Refused` names) is a str."""
    if type(where) is not str:
        raise TypeError(f"where must be a str naming the place in the output, such as 'output[1]', got "
                        f"{type(where).__name__} {shown(where, 60)}")


def to_plain(value: Any, depth: int = 0, where: str = "output") -> Any:
    """``value`` as plain data ``torch.load(weights_only=True)`` reads back, accepting only exact
    types (see the module's docstring); raises :class:`Refused` naming the refused value's type and
    its place in the output (``where``, then ``output[1]['a']`` inside). Runs in the answer's process."""
    depth = check_int(depth, "depth", minimum=0)
    _check_where(where)
    kind = type(value)
    if depth > 8:
        raise Refused("an output nested more than 8 levels deep", where)
    if kind in _TENSOR_KINDS:  # a Parameter (the in-kernel check takes it too) as its plain tensor
        if value.layout != torch.strided or value.is_nested or value.device.type != "cpu":
            raise Refused(f"a tensor with layout {value.layout} on {value.device}", where)
        if value.is_complex() or value.is_quantized or value.dtype.itemsize == 0:
            raise Refused(f"a tensor of dtype {value.dtype}", where)
        return {"__tensor__": value.detach().clone()}
    if kind is np.ndarray:
        if value.dtype.kind not in _REAL_KINDS:
            raise Refused(f"a NumPy array of dtype {value.dtype}", where)
        return {"__ndarray__": torch.from_numpy(np.ascontiguousarray(value).copy()), "dtype": value.dtype.str}
    if isinstance(value, np.generic) and kind in {np.dtype(c).type for c in "?bhilqBHILQefdg"}:
        if np.dtype(kind).kind not in _REAL_KINDS or kind is np.longdouble:
            raise Refused(f"a NumPy {kind.__name__}", where)
        return {"__npscalar__": value.item(), "dtype": np.dtype(kind).str}
    if kind is int and value.bit_length() > 2000:  # (torch.load(weights_only=True) reads back ints of
        # at most 255 bytes; battery 24: 10**1000 ended as "the process ended without results")
        raise Refused(f"an int of about {value.bit_length() * math.log10(2):,.0f} digits (the grader reads "
                      "back ints of up to 600 digits)", where)
    if value is None or kind in (bool, int, float, str):
        return value
    if kind in (tuple, list):
        if len(value) > 10_000:
            raise Refused(f"a {kind.__name__} of {len(value)} items", where)
        items = [to_plain(v, depth + 1, f"{where}[{i}]") for i, v in enumerate(value)]
        return {"__tuple__": items} if kind is tuple else items
    if kind is dict and all(type(k) is str for k in value) and len(value) <= 10_000:
        return {"__dict__": {k: to_plain(v, depth + 1, f"{where}[{k!r:.40}]") for k, v in value.items()}}
    if kind is dict:
        odd = [k for k in value if type(k) is not str][:1]
        raise Refused(f"a dict with a key that is not a str ({shown(odd[0], 40)})" if odd else
                      f"a dict of {len(value)} items", where)
    if kind in _UNRUN_RESULTS:
        if kind is not types.AsyncGeneratorType:
            value.close()  # a coroutine never awaited warns, and the warning imports tracemalloc
        raise Refused(_UNRUN_RESULTS[kind], where)
    raise Refused(f"an object of type {_type_name(value)}", where)


#: What the call of an ``async def`` or of a function that ``yield``s returns: its body has not run.
_UNRUN_RESULTS = {
    types.CoroutineType: "a coroutine (your function is an `async def`: calling it does not run it; "
                         "define it with plain `def`)",
    types.GeneratorType: "a generator (your function uses `yield`, so calling it does not run it; "
                         "`return` the result instead)",
    types.AsyncGeneratorType: "an async generator (your function is an `async def` that uses `yield`: "
                              "calling it does not run it; use plain `def` and `return` the result)",
}


def accept(data: Any, depth: int = 0, where: str = "output") -> Any:
    """The inverse of :func:`to_plain`, run in the grader on what the answer's process wrote
    (which the answer may have forged): every value checked again. Raises :class:`Refused`
    naming what was refused and where (as :func:`to_plain` does)."""
    depth = check_int(depth, "depth", minimum=0)
    _check_where(where)
    kind = type(data)
    if depth > 10:
        raise Refused("an output nested too deep", where)
    if data is None or kind in (bool, int, float, str):
        return data
    if kind is list:
        return [accept(v, depth + 1, f"{where}[{i}]") for i, v in enumerate(data)]
    if kind is not dict:
        raise Refused(f"an object of type {_type_name(data)}", where)
    if set(data) == {"__tensor__"}:
        t = data["__tensor__"]
        if type(t) is not torch.Tensor or t.layout != torch.strided or t.is_complex() or t.is_quantized:
            raise Refused("a tensor that is not a plain real tensor", where)
        return t
    if set(data) == {"__ndarray__", "dtype"} and type(data["dtype"]) is str:
        t, dtype = data["__ndarray__"], np.dtype(data["dtype"])
        if type(t) is not torch.Tensor or t.is_complex() or dtype.kind not in _REAL_KINDS:
            raise Refused(f"a NumPy array of dtype {dtype}", where)
        return t.numpy().astype(dtype, copy=True)
    if set(data) == {"__npscalar__", "dtype"} and type(data["dtype"]) is str:
        dtype = np.dtype(data["dtype"])
        if dtype.kind not in _REAL_KINDS or type(data["__npscalar__"]) not in (bool, int, float):
            raise Refused(f"a NumPy scalar of dtype {dtype}", where)
        return dtype.type(data["__npscalar__"])
    if set(data) == {"__tuple__"} and type(data["__tuple__"]) is list:
        return tuple(accept(v, depth + 1, f"{where}[{i}]") for i, v in enumerate(data["__tuple__"]))
    if set(data) == {"__dict__"} and type(data["__dict__"]) is dict:
        return {str(k): accept(v, depth + 1, f"{where}[{k!r:.40}]") for k, v in data["__dict__"].items()
                if type(k) is str}
    raise Refused(f"a dict with keys {shown(sorted(map(str, data)), 80)} (not an encoded output the grader "
                  "knows)", where)


@dataclass
class Outcome:
    """What the answer did on one case: ``kind`` is "value" (``value``, its output), "raised"
    (``error`` = (exception type name, message), ``stub`` when it is the stub's own raise),
    "refused" (``error`` = ("Refused", what it returned)) or "lost" (the process ended first)."""

    kind: Literal["value", "raised", "refused", "lost"]
    value: Any = None
    error: tuple[str, str] = ("", "")
    stub: bool = False
    # each input after the call: a tensor or array (edited in place?), a list of them (grown?), else None
    inputs_after: list[torch.Tensor | np.ndarray | list[torch.Tensor | np.ndarray] | None] = \
        field(default_factory=list)
    used: str | None = None  # a watched twin it called (the call watch of core, in its process)
    tampered: str | None = None

    def __post_init__(self) -> None:
        check_record(self)


# -- 3. the answer's process -----------------------------------------------------------------
REFUSED_EXIT = 87  # the answer's process ends with this status when its audit hook refuses an event
# The interpreter itself switches the call watch's profiler off (the event "sys.setprofile") when
# the profiler cannot be called because the stack is full: an answer that calls itself without
# end. The hook reports that as this, not as a refused event (no cheat: a learner's mistake).
ENDLESS_RECURSION = "endless recursion"
# It does the same when the profiler cannot be called because memory ran out (an answer that
# fills its memory limit): the hook reports that as this when a probe of PROBE_BYTES fails too.
OUT_OF_MEMORY = "out of memory"
PROBE_BYTES = 16 * 2**20
# Audit events the answer's code may not raise (hardening item 1): unpickling by name, new code
# (exec, compile, code and function objects made from parts, marshal), processes and threads,
# frames and code objects (sys._getframe, tb_frame, gi_frame, __code__: object.__getattr__),
# attribute changes the interpreter audits (a function's code or defaults), tracing and
# profiling, new audit hooks, the garbage collector's object lists, raw memory and the network.
REFUSED_EVENTS = frozenset({
    "pickle.find_class", "exec", "compile", "code.__new__", "function.__new__", "marshal.load",
    "marshal.loads", "os.fork", "os.forkpty", "os.system", "os.posix_spawn", "os.kill", "os.killpg",
    "subprocess.Popen", "_thread.start_new_thread", "sys._getframe", "sys._current_frames",
    "sys._current_exceptions", "sys.settrace", "sys.setprofile", "sys.addaudithook",
    "object.__getattr__", "object.__setattr__", "object.__delattr__", "builtins.breakpoint",
    "os.putenv", "os.unsetenv", "resource.setrlimit", "resource.prlimit", "signal.pthread_kill",
    "cpython.PyInterpreterState_New", "cpython.run_command", "cpython.run_file", "cpython.run_module",
    "cpython.run_interactivehook", "cpython.run_startup",
})
REFUSED_PREFIXES = ("ctypes.", "socket.", "gc.", "os.exec", "os.spawn", "os.posix_spawn",
                    "subprocess.", "mmap.", "sqlite3.", "shutil.", "urllib.", "http.", "ftplib.",
                    "smtplib.", "poplib.", "imaplib.", "nntplib.", "telnetlib.", "webbrowser.", "ssl.",
                    "winreg.", "msvcrt.", "pdb.", "syslog.")
# Events on a path (or a file descriptor) that change the file system: allowed inside the
# answer's own work folder only.
PATH_EVENTS = frozenset({"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.symlink", "os.link",
                         "os.truncate", "os.chmod", "os.chown", "os.utime", "os.chflags", "os.lchflags",
                         "os.setxattr", "os.removexattr", "os.mkfifo", "os.mknod"})
# While the grader's own code runs between calls (the call watch arming and disarming itself,
# writing the result), these are allowed, and nothing else besides what the answer may do.
HARNESS_EVENTS = frozenset({"sys.setprofile", "object.__getattr__", "object.__setattr__",
                            "object.__delattr__", "open", "function.__new__", "os.truncate"})
HARNESS_ATTRIBUTES = frozenset({"__code__", "__kwdefaults__", "__defaults__", "__globals__", "f_code"})
# The standard library's own code that compiles generated source (a dataclass's __init__, a
# namedtuple's __new__), reads its caller's module name or a function's signature (a dataclass's
# docstring): allowed when its own line raises the event. Two more that plain torch calls reach
# and that hand back no frame or code object: ``inspect._has_code_flag`` (a bool; every
# ``@torch.no_grad()`` decorator asks it) and ``traceback.format_stack`` (strings; every
# ``torch.manual_seed`` on a CPU-only torch records one). Without them a right answer that seeded
# or decorated was refused (battery 27).
TRUSTED_CODE_MODULES = ("dataclasses", "collections", "typing", "enum")
TRUSTED_FUNCTIONS = (("inspect", "_signature_from_function"), ("inspect", "_has_code_flag"),
                     ("traceback", "format_stack"),
                     ("traceback", "StackSummary._extract_from_extended_frame_gen"))
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def _trusted_codes() -> frozenset:
    codes = set()
    for module_name in TRUSTED_CODE_MODULES:
        module = sys.modules.get(module_name)
        for value in vars(module).values() if module is not None else ():
            for f in (value, *(vars(value).values() if isinstance(value, type) else ())):
                f = getattr(f, "__func__", f)
                if isinstance(f, types.FunctionType) and f.__module__ == module_name:
                    codes.add(f.__code__)
    for module_name, function in TRUSTED_FUNCTIONS:
        f = sys.modules.get(module_name)
        for part in function.split("."):
            f = getattr(f, part, None)
        f = getattr(f, "__func__", f)  # a classmethod, bound to its class
        if isinstance(f, types.FunctionType):
            codes.add(f.__code__)
    return frozenset(codes)


def _check_hook_arguments(work: object, check_key: object, answer: object, harness: object) -> None:
    """What :func:`install_audit_hook` takes, each refused under its own name: a hook installed with
    junk would guard the wrong folder or nothing, for good (audit hooks cannot be removed)."""
    if type(work) is not str or not work or not os.path.isdir(work):
        raise (TypeError if type(work) is not str else ValueError)(
            f"work: expected the answer's work folder (a str naming an existing folder), got "
            f"{type(work).__name__} {shown(work, 80)}")
    # the key's form only: importing its lesson here would make that module importable by the answer
    if type(check_key) is not str or re.fullmatch(r"lesson\d\d\.check_\w+", check_key) is None:
        raise (TypeError if type(check_key) is not str else ValueError)(
            f"check_key: expected a check's key such as 'lesson02.check_softmax_rows', got "
            f"{type(check_key).__name__} {shown(check_key, 80)}")
    if not isinstance(answer, types.CodeType):
        raise TypeError(f"answer: expected the answer's compiled module (a code object from compile()), "
                        f"got {type(answer).__name__} {shown(answer, 60)}")
    if type(harness) is not list or len(harness) != 1 or type(harness[0]) is not bool:
        raise TypeError(f"harness: expected a list of one bool (True while the grader's own code runs), "
                        f"got {type(harness).__name__} {shown(harness, 60)}")


def install_audit_hook(work: str, check_key: str, answer: types.CodeType, harness: list[bool]) -> None:
    """Install, for good (audit hooks cannot be removed), the hook that ends the answer's process
    with status :data:`REFUSED_EXIT` and ``refused: <event>`` on its stderr when the answer raises
    one of :data:`REFUSED_EVENTS` (or a prefix of :data:`REFUSED_PREFIXES`), opens a file for
    writing outside ``work``, changes the file system outside it, or imports a module that is
    neither loaded now nor allowed for ``check_key``. ``answer``, the answer's compiled module,
    may be run once. While ``harness[0]`` is true (the grader's code between calls) the events of
    :data:`HARNESS_EVENTS` are allowed too. Everything the hook uses is bound here, before any of
    the answer's code exists: patching a module afterwards changes nothing.

    Each argument is checked first (a TypeError or ValueError naming it, no hook installed):
    ``work`` an existing folder (a str), ``check_key`` a check's key such as
    ``"lesson02.check_softmax_rows"``, ``answer`` a code object, ``harness`` a list of one bool."""
    _check_hook_arguments(work, check_key, answer, harness)
    import _thread

    exit_, write_, fspath, realpath, getframe = os._exit, os.write, os.fspath, os.path.realpath, sys._getframe
    ident = _thread.get_ident
    main = ident()  # the grader's code runs in this thread only: another thread gets no allowance
    sep, str_, bytes_, int_, isinstance_, frozenset_ = os.sep, str, bytes, int, isinstance, frozenset
    root = realpath(work)
    loaded = frozenset_(sys.modules)
    imports = frozenset_(IMPORTS_ONLY.get(check_key, IMPORTS_ALLOWED)) | \
        COURSE_UTILS_ALLOWED.get(check_key, frozenset_())
    refused, prefixes, path_events = REFUSED_EVENTS, REFUSED_PREFIXES, PATH_EVENTS
    harness_events, harness_attributes = HARNESS_EVENTS, HARNESS_ATTRIBUTES
    trusted = _trusted_codes()
    write_flags = _WRITE_FLAGS
    state = {"answer": answer, "inside": None}  # inside: the thread that runs the hook's own frame reads

    # the two reports the interpreter's own profiler switch-off gets, encoded now: with memory
    # exhausted, encoding them then could fail
    said = {reason: ("\nrefused: " + reason + "\n").encode("ascii") for reason in (ENDLESS_RECURSION,
                                                                                 OUT_OF_MEMORY)}
    probe_bytes = PROBE_BYTES

    def refuse(event: str) -> None:
        try:
            write_(2, said.get(event) or ("\nrefused: " + event + "\n").encode("ascii", "replace"))
        finally:  # the process ends whatever the write did (a MemoryError included)
            exit_(REFUSED_EXIT)

    def memory_exhausted() -> bool:  # not even a probe of PROBE_BYTES can be allocated now
        try:
            probe = bytes_(probe_bytes)  # zeroed by calloc: address space, no pages touched
        except MemoryError:
            return True
        del probe
        return False

    def inside_work(path: Any) -> bool:
        try:
            resolved = realpath(fspath(path))
        except Exception:  # noqa: BLE001 - not a path
            return False
        if isinstance_(resolved, bytes_):
            resolved = resolved.decode("utf-8", "surrogateescape")
        return resolved == root or resolved.startswith(root + sep)

    limit_of = sys.getrecursionlimit

    def stack_full() -> bool:  # the stack is within a few frames of the recursion limit
        state["inside"] = ident()
        try:
            depth, frame = 0, getframe(1)
            while frame is not None:
                depth, frame = depth + 1, frame.f_back
            return depth >= limit_of() - 60
        finally:
            state["inside"] = None

    def called_from_trusted() -> bool:
        state["inside"] = ident()  # the frame reads below raise events of their own
        try:
            frame = getframe(2)  # 0: this function, 1: the hook, 2: the code that raised the event
            return frame is not None and frame.f_code in trusted
        finally:
            state["inside"] = None

    def hook(event: str, args: tuple) -> None:
        if state["inside"] is not None and state["inside"] == ident():
            return
        if event == "exec" and args and args[0] is state["answer"]:
            state["answer"] = None  # the answer's module runs once
            return
        if event == "import":
            name = args[0] if args else None
            if isinstance_(name, str_) and (name in loaded or name in imports):
                return
            refuse(f"import {name}")
        if harness[0] and event in harness_events and ident() == main:
            if event.startswith("object.") and not (len(args) > 1 and args[1] in harness_attributes):
                refuse(event + (f" {args[1]}" if len(args) > 1 and isinstance_(args[1], str_) else ""))
            if event not in ("open", "os.truncate") or args and isinstance_(args[0], int_):
                return  # the grader writes only through the result's descriptor
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writing = (isinstance_(mode, str_) and any(c in mode for c in "wax+")) or \
                (isinstance_(flags, int_) and flags & write_flags)
            if isinstance_(path, int_):
                if writing:
                    refuse("open of a file descriptor for writing")
                return
            if writing and not inside_work(path):
                refuse(f"open for writing {shown(path, 200)}")
            return
        if event in path_events:
            for arg in args:
                if isinstance_(arg, (str_, bytes_)) and not inside_work(arg) or isinstance_(arg, int_) \
                        and event == "os.truncate":
                    refuse(f"{event} {shown(arg, 200)}")
            return
        if event in ("exec", "compile", "sys._getframe", "object.__setattr__", "object.__getattr__") \
                and called_from_trusted():
            return
        if event in refused or event.startswith(prefixes):
            if event == "object.__getattr__" and len(args) > 1 and args[1] == "f_code" \
                    and called_from_watch():
                return
            if event == "sys.setprofile" and stack_full():
                refuse(ENDLESS_RECURSION)
            if event == "sys.setprofile" and memory_exhausted():
                refuse(OUT_OF_MEMORY)
            refuse(event + (f" {args[1]}" if event.startswith("object.") and len(args) > 1
                            and isinstance_(args[1], str_) else ""))

    from .core import _CallWatch

    profile_code = _CallWatch._profile.__code__

    def called_from_watch() -> bool:  # the call watch's profiler reads each called frame's code
        state["inside"] = ident()
        try:
            frame = getframe(2)  # 0: this function, 1: the hook, 2: the code that raised the event
            return frame is not None and frame.f_code is profile_code
        finally:
            state["inside"] = None

    sys.addaudithook(hook)


def _modules_and_classes() -> list[tuple[Any, dict]]:
    """Every loaded module and every class bound in one, each with a copy of its namespace: what
    the grader's code between calls (copying inputs and outputs, the call watch, writing the
    result) looks its functions up in."""
    seen: dict[int, tuple[Any, dict]] = {}
    for module in list(sys.modules.values()):
        if type(module) is not types.ModuleType or module.__name__ in ("__main__", "answer"):
            continue
        namespace = vars(module)
        seen[id(module)] = (module, dict(namespace))
        for value in list(namespace.values()):
            if issubclass(type(value), type) and id(value) not in seen:  # type(): no __class__ looked up
                with contextlib.suppress(TypeError):
                    seen[id(value)] = (value, dict(vars(value)))
    for module_name, name in REGISTRIES:  # tables changed in place, which a module's namespace hides
        table = getattr(sys.modules.get(module_name), name, None)
        if type(table) is dict:
            seen[id(table)] = (_Registry(f"{module_name}.{name}", table), dict(table))
    # settings first: :func:`_changed` names the first difference, and a changed default dtype
    # also rebinds torch.Storage, which would otherwise be named (battery 16)
    return [(setting, _namespace(setting)) for setting in SETTINGS] + list(seen.values())


# Tables the grader's own code in the answer's process reads (pickling the result goes through
# copyreg's reducers), compared by content after each call (a cold trial's note on C23).
REGISTRIES = (("copyreg", "dispatch_table"), ("copyreg", "_extension_registry"),
              ("copyreg", "_inverted_registry"))


@dataclass
class _Registry:
    name: str
    table: dict


@dataclass(frozen=True)
class _Setting:
    """A process setting the grader's comparison depends on, compared by value: ``what`` (the
    words for it) and ``read`` (bound at import: the answer may replace torch's function)."""
    what: str
    read: Any


SETTINGS = (_Setting("the default dtype (torch.set_default_dtype)", torch.get_default_dtype),)


def _namespace(owner: Any) -> dict:
    if type(owner) is _Setting:
        return {"value": owner.read()}
    return owner.table if type(owner) is _Registry else vars(owner)


def _owner_name(owner: Any) -> str:
    if type(owner) is _Registry:
        return owner.name
    if isinstance(owner, types.ModuleType):
        return str(owner.__name__)
    return f"{owner.__module__}.{owner.__qualname__}"


def _changed(snapshot: list[tuple[Any, dict]]) -> str | None:
    """The first setting or attribute of a module or class that is not what
    :func:`_modules_and_classes` saw (changed, deleted or added), in words ("changed the default
    dtype (...) from torch.float32 to torch.float64", "`module.name` changed"); None when all
    are as they were."""
    for owner, before in snapshot:
        if type(owner) is _Setting:
            now = _namespace(owner)["value"]
            if now is not before["value"]:
                return f"changed {owner.what} from {before['value']} to {now}"
            continue
        name = _changed_name(owner, before)
        if name is not None:
            return f"`{name}` changed"
    return None


def _changed_name(owner: Any, before: dict) -> str | None:
    """The first attribute of ``owner`` that is not as in ``before``, as ``module.name``."""
    now = _namespace(owner)
    if len(now) != len(before) + ("__warningregistry__" in now) - ("__warningregistry__" in before):
        added = sorted(set(now) - set(before) - {"__warningregistry__"}) or sorted(set(before) - set(now))
        return f"{_owner_name(owner)}.{(added or ['?'])[0]}"
    for key, value in before.items():
        if key != "__warningregistry__" and now.get(key, before) is not value:
            return f"{_owner_name(owner)}.{key}"
    return None


def inputs_after(args: tuple, kwargs: dict) -> list[Any]:
    """What an answer left in its inputs, to send back with its output: each tensor or array
    (it may have edited one in place) and each list of them (it may have grown one), in plain
    form; None for any other input."""
    if not isinstance(args, tuple):
        raise TypeError(f"args: expected the tuple of positional inputs, got "
                        f"{type(args).__name__} {shown(args, 60)}")
    if not isinstance(kwargs, dict):
        raise TypeError(f"kwargs: expected the dict of keyword inputs, got "
                        f"{type(kwargs).__name__} {shown(kwargs, 60)}")
    after: list[Any] = []
    for given in (*args, *kwargs.values()):
        try:
            after.append(to_plain(given) if _kept_input(given) else None)
        except Refused:
            after.append(None)
    return after


def _kept_input(value: Any) -> bool:
    """Whether an input is sent back after the call (:attr:`Outcome.inputs_after`): a tensor, an
    array, or a list of at most 256 of them."""
    return (type(value) in (torch.Tensor, np.ndarray)
            or (type(value) is list and len(value) <= 256
                and all(type(t) in (torch.Tensor, np.ndarray) for t in value)))


#: Set when the per-call limit struck: the answer is then wrong already, and the cases after it are
#: not run (each could take the whole limit again: a 60 s sleep held autograde 11 minutes per
#: exercise for 0 points, battery 30); each is recorded as stopped by the same limit.
_limit_struck = [False]


def _alarm(signum: int, frame: Any) -> None:
    _limit_struck[0] = True
    raise TimeoutError("the call took longer than the grader's time limit")


def _call_limit(seconds: int) -> None:
    """``signal.alarm(seconds)`` (0: off), and a CPU-time timer one second longer whose signal,
    SIGVTALRM under its default action, ends the answer's process: an answer that loops inside one
    C call (a default argument ``max(iter(int, 1))``) never returns to Python, where the alarm's
    handler would raise, and held the grader for its whole budget (battery 31)."""
    signal.alarm(seconds)
    if hasattr(signal, "ITIMER_VIRTUAL"):
        signal.setitimer(signal.ITIMER_VIRTUAL, seconds + 1 if seconds else 0)


#: How the answer's process ends when :func:`_call_limit`'s CPU-time timer struck: killed by
#: SIGVTALRM, or (under bubblewrap) exit status 128 + SIGVTALRM.
_CPU_LIMIT_STATUSES = (-signal.SIGVTALRM, 128 + signal.SIGVTALRM) if hasattr(signal, "SIGVTALRM") else ()


def _child(payload_fd: str, result_fd: str) -> None:
    """Run in the answer's process: define the answer, call it on every case, write what it
    returned to ``result_fd``, a file descriptor the grader opened on a file outside the
    sandbox (no path the answer could name); the payload comes the same way. Before the
    answer's code runs, the allowed modules are loaded, a snapshot of every module and class is
    taken, and the audit hook (:func:`install_audit_hook`) is installed. After each call a
    changed module or class ends the run as tampering, before any of the grader's code looks a
    function up again. Nothing here is trusted by the grader; it only saves a round of re-checks."""
    save, lseek, ftruncate, fdopen, exit_ = torch.save, os.lseek, os.ftruncate, os.fdopen, os._exit
    channel = int(result_fd)
    harness = [True]

    with os.fdopen(int(payload_fd), "rb") as f:
        payload = pickle.load(f)  # made by the grader before the answer's code existed here
    code, name, check_key, case_sets, per_call, work, stub = (payload[k] for k in (
        "code", "name", "check", "case_sets", "per_call", "work", "stub"))
    del payload

    def write(data: dict) -> None:
        harness[0] = True
        try:
            lseek(channel, 0, 0)  # whatever was written there before (a forged result) is dropped
            ftruncate(channel, 0)
            with fdopen(channel, "wb") as f:
                save(data, f)
        except BaseException:  # noqa: BLE001 - past the file size limit: the grader says so
            exit_(3)
        exit_(0)  # no exit handlers of the answer's (a pool that waits for its workers)

    from .core import _CallWatch

    watch_functions: list[Any] = []
    try:
        lesson, check = check_key.split(".")
        module = importlib.import_module(f"course_utils.exercises.{lesson}")
        exercise = getattr(getattr(module, check), "__self__", None)
        if exercise is not None:
            watch_functions = exercise._forbidden()
    except Exception:  # noqa: BLE001 - no watch: the static rules still apply
        watch_functions = []
    allowed_modules = IMPORTS_ONLY.get(check_key, IMPORTS_ALLOWED) | \
        COURSE_UTILS_ALLOWED.get(check_key, set())
    for allowed in sorted(allowed_modules):
        with contextlib.suppress(ImportError):  # loaded now: an import of it later is no new module
            importlib.import_module(allowed)
    import io

    save({"warm": to_plain((torch.zeros(1), np.zeros(1), np.float32(0)))}, io.BytesIO())  # its lazy imports
    try:
        compiled = compile(code, "<answer>", "exec")
    except BaseException as exc:  # noqa: BLE001
        write({"defined": [type(exc).__name__, str(exc)[:500]]})
    answer_module = types.ModuleType("answer")  # a module of its own: a dataclass looks its module up
    sys.modules["answer"] = answer_module
    namespace = vars(answer_module)
    signal.signal(signal.SIGALRM, _alarm)
    if hasattr(signal, "SIGVTALRM"):
        signal.signal(signal.SIGVTALRM, signal.SIG_DFL)  # (:func:`_call_limit`: ends the process)
    import threading

    def no_thread(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the grader runs answers without threads")

    threading._start_new_thread = no_thread  # no audit event for a new thread before Python 3.13
    snapshot = _modules_and_classes()
    install_audit_hook(work, check_key, compiled, harness)
    harness[0] = False
    try:
        _call_limit(per_call)
        exec(compiled, namespace)  # noqa: S102 - the point of this process
        _call_limit(0)
        if name not in namespace:  # a KeyError would read as the answer's code failing
            raise NameError(f"the code defines no function named {shown(name)} (the name the check is given)")
        fn = namespace[name]
    except BaseException as exc:  # noqa: BLE001
        _call_limit(0)
        try:
            message = str(exc)[:500]
        except BaseException:  # noqa: BLE001
            message = ""
        write({"defined": [type(exc).__name__[:80], message]})
    results: list[list[dict]] = []
    tampered = _changed(snapshot)  # defining the answer (a decorator, a default) changed something
    for cases in case_sets:
        outcomes: list[dict] = []
        results.append(outcomes)
        for case in cases:
            if _limit_struck[0]:
                outcomes.append({"kind": "raised", "after": [], "used": None, "error": [
                    "TimeoutError", "not run: an earlier call took longer than the grader's time limit"]})
                continue
            if tampered is not None:
                outcomes.append({"kind": "raised", "error": ["Tampered", tampered], "after": [],
                                 "used": None, "tampered": tampered})
                break
            harness[0] = True
            args, kwargs = case.fresh()
            watch = _CallWatch(watch_functions)
            watch.__enter__()
            harness[0] = False
            record: dict[str, Any] = {}
            out: Any = None
            try:
                _call_limit(per_call)
                out = fn(*args, **kwargs)
                _call_limit(0)
                record = {"kind": "value"}
            except BaseException as exc:  # noqa: BLE001 - an exit or interrupt is an outcome too
                _call_limit(0)
                try:
                    message = str(exc)[:500]
                except BaseException:  # noqa: BLE001
                    message = ""
                record = {"kind": "raised", "error": [type(exc).__name__[:80], message],
                          "stub": stub and type(exc) is NotImplementedError}
            finally:
                _call_limit(0)
                harness[0] = True
                watch.__exit__(None, None, None)
                harness[0] = False
            tampered = _changed(snapshot) or watch.tampered  # before any lookup in a module again
            if tampered is not None:
                outcomes.append({"kind": "raised", "error": ["Tampered", tampered], "after": [],
                                 "used": watch.used, "tampered": tampered})
                break
            if record["kind"] == "value":
                try:
                    record["value"] = to_plain(out)
                except Refused as exc:
                    record = {"kind": "refused", "error": ["Refused", str(exc)]}
            record.update(after=inputs_after(args, kwargs), used=watch.used, tampered=watch.tampered)
            outcomes.append(record)
    write({"results": results})


# -- 4. running it, isolated ------------------------------------------------------------------
@functools.cache
def isolation() -> str:
    """"bubblewrap" when ``bwrap`` runs here (it needs unprivileged user namespaces, or root),
    else "subprocess only" (the answer's process then sees the file system)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "subprocess only"
    probe = subprocess.run([bwrap, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
                           capture_output=True, timeout=60)
    return "bubblewrap" if probe.returncode == 0 else "subprocess only"


WARNING = ("\n" + "!" * 78 + "\nWARNING (course_utils autograde): bubblewrap (bwrap) is missing or cannot "
           "make a sandbox here;\nstudents' answers run in a plain subprocess that can read and write "
           "the course\nfolder, solutions/ and the gradebook. Install it (apt-get install bubblewrap) "
           "and\nallow user namespaces: see INSTRUCTORS.md, 'Grading outside the notebook'.\n" + "!" * 78)


def _folders_to_hide(hide: Any, name: str = "hide") -> list[Path]:
    """``hide`` as a list of Paths: a list or tuple of str or os.PathLike items, else a
    TypeError naming it as ``name`` (one path alone is not read as the list of its characters)."""
    hide = listed(hide, name, "a list of folders (str or pathlib.Path) the answer must not see")
    if isinstance(hide, (str, bytes, os.PathLike)) or not isinstance(hide, (list, tuple)) \
            or not all(isinstance(p, (str, os.PathLike)) and not isinstance(p, bytes) for p in hide):
        raise TypeError(f"{name}: expected a list of folders (str or pathlib.Path) the answer must not "
                        f"see, got {type(hide).__name__} {shown(hide, 80)}")
    for i, p in enumerate(hide):
        check_path(p, f"{name}[{i}]", "a folder the answer must not see")
    return [Path(p) for p in hide]


def hidden_paths(extra: Sequence[Path] = ()) -> list[Path]:
    """What the answer's process must not see even where it lies inside a folder it is shown:
    the instructor's clone and home, nbgrader's default exchange, and ``extra`` (the course
    folder). Outside the folders of :func:`visible_paths` nothing is shown anyway."""
    paths = [CLONE, Path.home(), Path("/srv/nbgrader"), *_folders_to_hide(extra, "extra")]
    return sorted({p.resolve() for p in paths if p.exists()}, key=lambda p: len(p.parts))


SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")  # under /: programs, libraries
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d")  # the loader's library list


@functools.cache
def visible_paths() -> tuple[Path, ...]:
    """The only folders the answer's process sees (read-only), besides /proc, a minimal /dev and
    its own work folder: the interpreter and its standard library (``sys.base_prefix``), the
    environment (``sys.prefix``), every folder on the ``sys.path`` of a ``python -I`` started
    like the answer's, the ``course_utils`` package folder itself and its data folder (with an
    editable install they sit in the clone, beside solutions/ and notebooks/: the clone itself
    is not shown), NumPy's and torch's install folders, and the system's :data:`SYSTEM_DIRS`
    and :data:`SYSTEM_FILES`. Outermost first."""
    import json

    from ..paths import DATA_DIR

    found = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix), Path(sys.base_exec_prefix),
             Path(sys.executable).parent, PACKAGE, DATA_DIR,
             Path(np.__file__).parent.parent, Path(torch.__file__).parent.parent}
    probe = subprocess.run([sys.executable, "-I", "-c", "import json, sys; print(json.dumps(sys.path))"],
                           capture_output=True, text=True, timeout=120, cwd="/",
                           env={"PATH": "/usr/bin:/bin"})
    with contextlib.suppress(ValueError):
        found |= {Path(p) for p in json.loads(probe.stdout or "[]") if type(p) is str and p.startswith("/")}
    found |= {p.resolve() for p in found}  # a symlinked prefix: shown where it points, too
    found |= {Path(f) for f in SYSTEM_FILES}
    system = [(d,) for d in SYSTEM_DIRS]
    kept = {p for p in found if p.exists() and p != Path("/") and p.parts[1:2] not in system}
    return tuple(sorted(kept, key=lambda p: (len(p.parts), str(p))))


WORK_SIZE = 64 * 2**20  # the answer's work folder and /tmp are memory file systems of this size
TMP_SIZE = 16 * 2**20


def _bwrap_argv(work: Path, hidden: Sequence[Path]) -> list[str]:
    """bubblewrap's arguments: an empty root with only :func:`visible_paths` (read-only), the
    system folders, /proc, /dev, an empty /tmp and ``work`` (the one writable folder, an empty
    memory file system of :data:`WORK_SIZE` bytes); any of ``hidden`` that is or lies inside a
    shown folder (a clone on ``sys.path``, a course folder in the environment or under /usr:
    cold trial C10) is covered by an empty read-only folder, and shown folders inside it are
    bound again on top, outermost first."""
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
            "--setenv", "HOME", str(work), "--setenv", "PATH", "/usr/bin:/bin",
            "--setenv", "OMP_NUM_THREADS", "1"]
    system = []
    for name in SYSTEM_DIRS:
        path = Path("/") / name
        if path.is_symlink():  # merged /usr: /lib -> usr/lib
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
            system.append(path)
    # /proc, /dev and the empty /tmp first: a shown folder under /tmp (a clone or an environment
    # made there) is then bound on top of the empty /tmp instead of being hidden by it
    argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(TMP_SIZE), "--tmpfs", "/tmp"]
    hidden_set = set(hidden)
    shown = [p for p in visible_paths() if p not in hidden_set]
    outer = [*visible_paths(), *system]
    covered = [h for h in hidden_set if any(s == h or s in h.parents for s in outer)]
    mounts = [(len(p.parts), 0, str(p), ["--ro-bind", str(p), str(p)]) for p in shown]
    mounts += [(len(p.parts), -1, str(p), ["--tmpfs", str(p), "--remount-ro", str(p)]) for p in covered]
    for *_, args in sorted(mounts, key=lambda m: m[:3]):
        argv += args
    return argv + ["--size", str(WORK_SIZE), "--tmpfs", str(work), "--chdir", str(work)]


MAX_RLIMIT = 2**63 - 1  # the largest process limit setrlimit takes (memory, result file size)
MAX_SECONDS = 2**31 - 1  # the largest signal.alarm takes (per_call, grace)


def _limits(memory: int, cpu_seconds: int, file_size: int, processes: int) -> None:
    """The answer's process limits, set between fork and exec: address space, CPU seconds (the
    kernel ends it past them, whatever it does with signals), the size of any file it writes
    (its result and its stderr included), processes and threads of this user, no core file."""
    for kind, soft, hard in ((resource.RLIMIT_AS, memory, memory),
                             (resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 5),
                             (resource.RLIMIT_FSIZE, file_size, file_size),
                             (resource.RLIMIT_NPROC, processes, processes), (resource.RLIMIT_CORE, 0, 0)):
        ceiling = resource.getrlimit(kind)[1]  # never above what this user may set: lower is fine
        if ceiling != resource.RLIM_INFINITY:
            soft, hard = min(soft, ceiling), min(hard, ceiling)
        resource.setrlimit(kind, (soft, hard))
    os.setsid()


def _user_tasks() -> int:
    """How many processes and threads this user runs now (RLIMIT_NPROC counts them all)."""
    uid, count = os.getuid(), 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    with open(f"/proc/{entry.name}/status", "rb") as f:
                        threads = [line for line in f if line.startswith(b"Threads:")]
                    count += int(threads[0].split()[1]) if threads else 1
    return count


ANSWER_TASKS = 64  # processes and threads the answer's process may add to the user's (bwrap, torch's pool)
STDERR_TAIL = 4000  # bytes of the answer's stderr the grader reads (from the end)


@dataclass
class Run:
    """The outcomes of one answer (one list per case set), or why there are none."""

    outcomes: list[list[Outcome]]
    defined: tuple[str, str] | None = None  # defining the answer raised (type, message)
    lost: str | None = None  # the process died, ran out of time or wrote nothing usable
    isolation: str = ""

    def __post_init__(self) -> None:
        check_record(self)


def _tail(f: Any) -> str:
    size = os.fstat(f.fileno()).st_size
    f.seek(max(0, size - STDERR_TAIL))
    return f.read().decode(errors="replace")


# the least address space run_answer accepts: below it Python and torch cannot even start
MIN_MEMORY = 256 * 2**20


def run_answer(code: str, name: str, check_key: str, case_sets: Sequence[Sequence[Any]], *,
               hide: Sequence[Path] = (), per_call: int = 60, memory: int = 4 * 2**30,
               sandbox: bool | None = None, max_result_bytes: int | None = None, grace: int = 60) -> Run:
    """Run answer ``name`` (its ``code``, from :func:`answer_source`) on each list of cases in
    ``case_sets``, in a fresh process; ``hide`` adds folders it must not see (the course).
    ``sandbox``: None uses bubblewrap when it works here (:func:`isolation`), True insists.
    The process reads its payload from, and writes its results to, file descriptors it
    inherits, on files outside its sandbox; a result larger than ``max_result_bytes`` (None: 256
    MiB) is refused unread. Its stdout goes nowhere, its stderr to a file of which only the last
    :data:`STDERR_TAIL` bytes are read. It is killed at its wall-clock limit (``grace`` seconds,
    and ``per_call`` per call), whatever it does with signals; its CPU time has the same limit.
    Never raises for anything the answer does."""
    if not isinstance(code, str) or not code.strip():
        raise ValueError(f"code: expected the answer's source text, got {shown(code, 60)}")
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name: expected the answer function's name (a Python identifier), got "
                         f"{shown(name, 60)}")
    _check_key_known(check_key)
    case_sets = listed(case_sets, "case_sets", "a list of lists of cases")
    if isinstance(case_sets, list):  # a str stays itself, for the message below to name
        case_sets = [listed(cases, f"case_sets[{i}]", "a list of cases") for i, cases in enumerate(case_sets)]
    if isinstance(case_sets, (str, bytes)) or not isinstance(case_sets, Sequence) \
            or not all(isinstance(c, Sequence) and not isinstance(c, (str, bytes)) for c in case_sets):
        raise TypeError(f"case_sets: expected a list of lists of cases, got {type(case_sets).__name__}")
    from .cases import Case

    strays = [c for cases in case_sets for c in cases if not isinstance(c, Case)]
    if strays:
        raise TypeError(f"case_sets: expected lists of exercise cases (course_utils.exercises.cases.Case, "
                        f"from a check's make_cases()), got a {type(strays[0]).__name__} "
                        f"{shown(strays[0], 60)}")
    hide = _folders_to_hide(hide)
    for label, value, least, most in (("memory", memory, MIN_MEMORY, MAX_RLIMIT),
                                      ("per_call", per_call, 1, MAX_SECONDS),
                                      ("grace", grace, 0, MAX_SECONDS)):
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
            raise ValueError(f"{label}: expected an int >= {least:,} and <= {most:,}"
                             + (" (bytes: the answer's process must fit Python and torch)"
                                if label == "memory" else " (seconds)") + f", got {shown(value, 60)}")
    if sandbox is not None and not isinstance(sandbox, bool):
        raise TypeError(f"sandbox: expected None (bubblewrap where it works), True or False, got "
                        f"{type(sandbox).__name__} {shown(sandbox, 40)}")
    if max_result_bytes is not None and (isinstance(max_result_bytes, bool)
                                         or not isinstance(max_result_bytes, int)
                                         or not 1 <= max_result_bytes < MAX_RLIMIT):
        raise ValueError(f"max_result_bytes: expected None or an int >= 1 and < {MAX_RLIMIT:,}, got "
                         f"{shown(max_result_bytes, 40)}")
    use_bwrap = isolation() == "bubblewrap" if sandbox is None else sandbox
    if use_bwrap and isolation() != "bubblewrap":
        raise RuntimeError("sandbox=True, but bubblewrap cannot make a sandbox here: " + WARNING)
    with tempfile.TemporaryDirectory(prefix="answer-") as tmp, \
            tempfile.TemporaryDirectory(prefix="answer-result-") as kept_apart, \
            open(Path(kept_apart) / "result.pt", "w+b") as result, \
            open(Path(kept_apart) / "payload.pkl", "w+b") as payload, \
            open(Path(kept_apart) / "stderr.txt", "w+b") as stderr:
        work = Path(tmp).resolve()
        _CasePickler(payload, protocol=pickle.HIGHEST_PROTOCOL).dump(
            {"code": code, "name": name, "check": check_key, "case_sets": [list(c) for c in case_sets],
             "per_call": int(per_call), "work": str(work), "stub": is_stub(code, name)})
        payload.flush()
        payload.seek(0)
        # the package this grader imported, first on the answer's path: with -I (no PYTHONPATH) the
        # child found the installed course_utils, not a checkout named by PYTHONPATH: it ran other
        # code than the grader's, or (under bubblewrap, which shows only PACKAGE) none at all
        python = [sys.executable, "-I", "-c",
                  "import sys; sys.path.insert(0, sys.argv[3]); "
                  "from course_utils.exercises.sandbox import _child; _child(sys.argv[1], sys.argv[2])",
                  str(payload.fileno()), str(result.fileno()), str(PACKAGE.parent)]
        if use_bwrap:
            argv, env = _bwrap_argv(work, hidden_paths(hide)) + python, None
        else:
            argv = python
            env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "OMP_NUM_THREADS": "1"}
        calls = sum(len(c) for c in case_sets) + 1
        limit = grace + per_call * calls
        file_limit = (256 * 2**20 if max_result_bytes is None else max_result_bytes) + 1
        limits = functools.partial(_limits, memory, limit, max(file_limit, STDERR_TAIL + 1),
                                   _user_tasks() + ANSWER_TASKS)
        process = subprocess.Popen(argv, cwd=work, env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=stderr,
                                   pass_fds=(result.fileno(), payload.fileno()),
                                   preexec_fn=limits)
        try:
            status = process.wait(timeout=limit)
            timed_out = False
        except subprocess.TimeoutExpired:
            status, timed_out = None, True
        finally:  # the process group: whatever the answer started and left behind
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.kill()
            process.wait()
        detail = f"it ran longer than {limit} s in all" if timed_out else _tail(stderr)[-300:]
        label = "bubblewrap" if use_bwrap else "subprocess only"
        if status is not None and status in _CPU_LIMIT_STATUSES:
            return Run([], lost=f"it ran longer than the grader's time limit of {per_call} s per call "
                                "without being stopped (inside one C call, where the limit cannot raise, or "
                                "with the limit's signal ignored; while the answer was defined or called): "
                                "the grader ended its process", isolation=label)
        if status == REFUSED_EXIT:
            event = next((line.removeprefix("refused: ") for line in reversed(_tail(stderr).splitlines())
                          if line.startswith("refused: ")), "an event the grader does not allow")
            if event.strip() == ENDLESS_RECURSION:
                return Run([], lost="it called itself without end (RecursionError: maximum recursion depth "
                                    "exceeded); a recursive function needs a case that returns without "
                                    "calling itself", isolation=label)
            if event.strip() == OUT_OF_MEMORY:
                return Run([], lost=f"it ran out of memory (MemoryError) under the grader's memory limit "
                                    f"of {memory / 2**20:,.0f} MiB", isolation=label)
            return Run([], lost=f"refused: {event[:200]} (the answer's process may not do this; "
                                "see INSTRUCTORS.md, threat model)", isolation=label)
        size = os.fstat(result.fileno()).st_size
        if max_result_bytes is not None and size > max_result_bytes:
            return Run([], lost=f"its outputs came to more than the {max_result_bytes / 2**20:.1f} MiB "
                                "the grader reads for this exercise "
                                "(8 times the size of the right outputs and the inputs, and 1 MiB)",
                       isolation=label)
        data = None
        if status == 0 and size:  # a result is read only from a process that ended by itself, well
            try:
                result.seek(0)
                data = torch.load(result, weights_only=True)
            except Exception:  # noqa: BLE001 - forged or cut short: nothing usable
                data = None
        if not isinstance(data, dict):
            why = f"exit status {status}" if status is not None else detail
            if status is not None and status != 0:  # the limit may be why it died: say it
                why += f", under a memory limit of {memory / 2**20:,.0f} MiB"
            said = detail.strip()[-200:]
            return Run([], lost=f"the answer's process ended without results ({why}"
                                + (f"; {said})" if said else ")"), isolation=label)
        if "defined" in data:
            kind, message = (list(data["defined"]) + ["", ""])[:2]
            return Run([], defined=(str(kind), str(message)), isolation=label)
        return Run(_outcomes(data.get("results"), case_sets), isolation=label)


def _outcomes(results: Any, case_sets: Sequence[Sequence[Any]]) -> list[list[Outcome]]:
    """The process's records, checked: one Outcome per case ("lost" where a record is missing)."""
    out = []
    for index, cases in enumerate(case_sets):
        records = results[index] if type(results) is list and index < len(results) else []
        row = []
        for i in range(len(cases)):
            record = records[i] if type(records) is list and i < len(records) else None
            row.append(_outcome(record))
        out.append(row)
    return out


def _text(x: Any) -> str | None:
    return str(x)[:500] if type(x) is str else None


def _outcome(record: Any) -> Outcome:
    if type(record) is not dict:
        return Outcome("lost", error=("Lost", "no result for this case"))
    used, tampered = _text(record.get("used")), _text(record.get("tampered"))
    after = []
    for item in record.get("after", []) if type(record.get("after")) is list else []:
        try:
            value = None if item is None else accept(item)
        except Refused:
            value = None
        after.append(value if _kept_input(value) else None)  # the answer's process may send anything
    kind = record.get("kind")
    if kind == "value":
        try:
            return Outcome("value", value=accept(record.get("value")), inputs_after=after, used=used,
                           tampered=tampered)
        except Refused as exc:
            return Outcome("refused", error=("Refused", str(exc)), used=used, tampered=tampered)
    error = record.get("error")
    if type(error) is list and len(error) == 2:
        error = (str(error[0])[:80], str(error[1])[:500])
    else:
        error = ("?", "")
    if kind == "refused":
        return Outcome("refused", error=error, used=used, tampered=tampered)
    if kind == "raised":
        return Outcome("raised", error=error, stub=record.get("stub") is True, inputs_after=after, used=used,
                       tampered=tampered)
    return Outcome("lost", error=("Lost", "an unreadable result"))


# The checks in a learner's kernel warn about a right answer that the grader would not run
# (core.Exercise.check): core offers the place, this module fills it, so core imports nothing
# of the grader.
from . import core as _core  # noqa: E402

_core.GRADING_NOTE = grading_note
_core.STORE_READS = store_reads
_core.TWIN_NAMES = _twins_of
