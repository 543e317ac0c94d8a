"""Input checks for the attention modules, kept apart so the maths in
:mod:`course_utils.attention.mha` and :mod:`course_utils.attention.naive_mha` reads at a glance.

Every check raises ``TypeError`` (wrong kind of thing) or ``ValueError`` (right kind,
wrong value) naming the argument, what was expected and what arrived. None of them runs
a tensor operation: they read shapes, dtypes and devices only, so they cost no kernel
launches and never wait for a GPU. For that reason NaN and infinity are *not* refused:
they propagate (see :mod:`course_utils.attention.mha`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import inspect
import math
import numbers
import os
import sys
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "describe_shape",
    "describe_device",
    "check_head_dims",
    "check_kv_heads",
    "check_dropout",
    "check_flag",
    "check_int",
    "check_thread_count",
    "MAX_THREADS",
    "MAX_DECIMALS",
    "check_index",
    "IndexOutOfRange",
    "check_real",
    "is_real",
    "real_number",
    "check_float_dtype",
    "check_positive_number",
    "check_callable",
    "check_generator",
    "check_tensor",
    "check_same_dtype_and_device",
    "check_device",
    "check_device_present",
    "check_holds_values",
    "check_finite",
    "check_stream",
    "check_matches_module",
    "check_keys_not_empty",
    "check_sdpa_inputs",
    "check_mha_inputs",
    "check_mha_tensors",
    "check_fast_attention_inputs",
    "check_kv_pair",
    "check_mask_fits",
    "combine_masks",
    "check_edited_heads",
    "check_bool_mask",
    "check_int_list",
    "check_axes",
    "check_tensor_list",
    "check_heads_to_merge",
    "check_rows",
    "check_ids",
    "check_fits_in_memory",
    "check_attention_fits",
    "physical_memory_bytes",
    "check_record",
    "freeze_fields",
    "ReadOnlyDict",
    "check_increasing",
    "check_dims_not_empty",
    "MAX_NARGS",
    "shown",
    "items_of",
    "dict_of",
    "plain_str",
    "plain_int",
    "check_choice",
    "check_names_free",
    "check_dense",
    "finite",
    "say",
]


def shown(value: object, width: int | None = None) -> str:
    """``repr(value)``, cut to ``width`` characters, for a message; never raises for any value: one whose
    ``__repr__`` raises is named by its type (its error replaced the message: battery 27), after
    its value where it subclasses str, bytes, int or float (``'final' (a Mode whose repr raised ...)``)."""
    if width is not None and (isinstance(width, bool) or not isinstance(width, int) or width < 0):
        raise TypeError(f"shown's width must be None or an int >= 0, got {type(width).__name__} "
                        f"{shown(width, 40)}")
    try:
        text = repr(value)
    except Exception as err:  # noqa: BLE001
        text = f"<a {type(value).__name__} whose repr raised {type(err).__name__}>"
        base = next((b for b in (str, bytes, int, float) if isinstance(value, b)), None)
        if base is not None:  # a subclass of a built-in: its value still says what arrived
            with contextlib.suppress(Exception):
                text = f"{base.__repr__(value)} ({text[1:-1]})"
    return text if width is None else text[:width]


def say(text: str) -> None:
    """``print(text)`` that never raises at the learner (the widgets and ``Feedback.assert_passed``
    print through it): a stream that cannot encode a character (an ASCII terminal,
    ``PYTHONIOENCODING=ascii``) gets it escaped (``\\xe9``; a typo's value with an accent made an
    explorer raise UnicodeEncodeError: battery 27), and a closed, broken or raising stream gets
    nothing (battery 29). Anything else is printed as ``str()`` makes it; one whose ``str()``
    raises is named by its type and the error instead."""
    try:
        text = text if type(text) is str else str(text)
    except Exception as err:  # noqa: BLE001 - its str is the broken part; say so instead
        text = f"<a {type(text).__name__} whose str() raised {type(err).__name__}>"
    try:
        print(text)
    except UnicodeEncodeError:
        encoding = getattr(sys.stdout, "encoding", None) or "ascii"
        with contextlib.suppress(Exception):
            print(text.encode(encoding, "backslashreplace").decode(encoding))
    except Exception:  # noqa: BLE001 - a closed, broken or raising stream (battery 29): nothing
        pass


def _checks_name(check: Callable | None = None, *, labels: tuple[str, ...] = ()) -> Callable:
    """Refuse, before ``check`` runs, a ``name`` (the argument's name its messages use) that is not
    a str: a name whose str raises replaced the message it was meant to label (battery 28). ``None``
    passes where the check allows it (a default of None, or ``str | None``); a missing name is left
    to Python's own TypeError. ``labels`` names the check's other label parameters (``what``,
    ``why``, ``length``: words its messages print), refused the same way (a str subclass whose
    ``str()`` raises replaced the message: battery 29); used as ``@_checks_name(labels=("what",))``.
    The positions are read once, here, from the signature: a call pays one type test per label."""
    if check is None:
        return functools.partial(_checks_name, labels=labels)
    parameters = inspect.signature(check).parameters
    empty = inspect.Parameter.empty
    specs = []  # (label, its position or None, its default, what passes besides a str, expected)
    for label in (("name",) if "name" in parameters else ()) + tuple(labels):
        parameter = parameters[label]
        position = (list(parameters).index(label)
                    if parameter.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD else None)
        default = parameter.default
        none_ok = default is None or "None" in str(parameter.annotation)  # ``str | None``
        allowed, expected = (None, "a str or None") if none_ok else (empty, "a str")
        specs.append((label, position, default, allowed, expected))
    specs = tuple(specs)

    @functools.wraps(check)
    def checked(*args: object, **kwargs: object) -> object:
        for label, position, default, allowed, expected in specs:
            value = args[position] if position is not None and len(args) > position \
                else kwargs.get(label, default)
            if type(value) is not str and value is not allowed and value is not empty:
                what = "the name of the argument its messages use" if label == "name" \
                    else "words its messages print"
                raise TypeError(f"{check.__name__}'s {label} must be {expected} ({what}), got "
                                f"{type(value).__name__} {shown(value, 60)}")
        return check(*args, **kwargs)
    return checked


def items_of(values: object, name: str, expected: str) -> list:
    """``list(values)``, the one way the checks take the items of a sequence they were given: a
    value whose ``len()`` or iteration raises (a list subclass whose ``__len__`` raises) is a
    TypeError naming ``name``, what was ``expected`` and what arrived, instead of its own error
    naming nothing (battery 29). A plain list or tuple costs one type test and a copy."""
    try:
        return list(values)
    except Exception as err:  # noqa: BLE001 - its len or iteration is the broken part; say so
        raise TypeError(f"{name} must be {expected}, got {type(values).__name__} {shown(values, 60)} "
                        f"whose len() or iteration raised {type(err).__name__} (chained below)") from err


def dict_of(mapping: object, name: str, expected: str) -> object:
    """A caller's dict as a plain ``dict`` read through :func:`items_of`: a dict subclass whose
    ``len()``, iteration or item lookup raises is a TypeError naming ``name``, what was ``expected``
    and what arrived (its error chained), instead of its own error naming nothing. Anything that is
    not a dict is left to the caller's own type check (returned as it came)."""
    if not isinstance(mapping, dict):
        return mapping
    keys = items_of(mapping, name, expected)
    try:
        return {key: mapping[key] for key in keys}
    except Exception as err:  # noqa: BLE001 - its item lookup is the broken part; say so
        raise TypeError(f"{name} must be {expected}, got {type(mapping).__name__} {shown(mapping, 60)} "
                        f"whose item lookup raised {type(err).__name__} (chained below)") from err


def plain_str(value: object, name: str, expected: str = "a str") -> str:
    """``value`` as the plain ``str`` it holds, the one way a str argument (a lesson, an exercise or
    file name, a label) is taken: a str subclass is read through ``str.__str__``, so its own
    ``__str__`` or ``__repr__`` (which may raise or lie) is never called, and an f-string, a dict
    lookup or ``Path`` of the result behaves as for a plain str. Anything else is a TypeError
    naming ``name``, what was ``expected`` and what arrived."""
    if isinstance(value, str):
        return value if type(value) is str else str.__str__(value)
    raise TypeError(f"{name} must be {expected}, got {type(value).__name__} {shown(value, 60)}")


def plain_int(value: object, name: str, expected: str = "an int") -> int:
    """``value`` as the plain ``int`` it holds, the one way an integer argument is read (by
    :func:`check_int`, by an explorer's layer and head): an int subclass is read through
    ``int.__int__``, so its own ``__int__``, ``__index__`` or ``__str__`` (which may raise or lie) is
    never called, and a NumPy integer through ``int()``. A bool, anything that is not an integer, or
    an integer whose ``int()`` raises is a TypeError naming ``name``, what was ``expected`` and what
    arrived (its own error would name nothing)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be {expected}, got {type(value).__name__} {shown(value)}")
    if isinstance(value, int):
        return value if type(value) is int else int.__int__(value)
    try:
        result = int(value)
    except Exception as err:  # noqa: BLE001 - its int() is the broken part; say so
        raise TypeError(f"{name} must be {expected}, got {type(value).__name__} {shown(value, 60)} "
                        f"whose int() raised {type(err).__name__}") from None
    return result if type(result) is int else int.__int__(result)


@_checks_name
def check_choice(value: object, name: str, choices: Iterable[str] | Mapping[str, str]) -> str:
    """The package's one rule for a string option (``method="zero"``, ``per="token"``): ``value``
    is one of ``choices`` (a tuple of plain strs, or a dict ``{choice: what it means}`` whose
    meanings the message prints); returned as the plain ``str`` it holds. A str subclass is read
    by its plain value (:func:`plain_str`): one holding ``"zero"`` is taken as ``"zero"``, and its
    own ``__eq__`` or ``__hash__`` (which may raise or say True to anything) never runs. Anything
    that is not a str (None, a number, an object whose ``__eq__`` raises) is a TypeError, decided by
    its type before any comparison; a str that is none of the choices is a ValueError (with the
    nearest choice when one is close). Both name ``name``, list the choices and show what arrived
    (:func:`shown`: a value whose repr raises is named by its type)."""
    options, meanings = _choices_of(choices, name)
    listing = _listing(f"{c!r}" + (f" ({meanings[c]})" if meanings.get(c) else "") for c in options)
    if not issubclass(type(value), str):  # type(), not isinstance: a lying __class__ is not a str
        raise TypeError(f"{name} must be one of {listing} (a str), got {type(value).__name__} "
                        f"{shown(value, 60)}")
    plain = plain_str(value, name)
    if plain not in options:  # plain strs only: str's own ==
        close = difflib.get_close_matches(plain, options, n=1, cutoff=0.6)
        raise ValueError(f"{name} must be one of {listing}, got {shown(plain, 60)}"
                         + (f" (did you mean {close[0]!r}?)" if close else ""))
    return plain


def _choices_of(choices: object, name: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """:func:`check_choice`'s ``choices`` (the caller's own, so a mistake is the package's): a
    non-empty tuple, list or dict of plain strs; returned as the choices and their meanings."""
    meanings = dict(choices) if isinstance(choices, Mapping) else {}
    options = tuple(choices) if isinstance(choices, (tuple, list, Mapping)) else ()
    if not options or any(type(c) is not str for c in options) \
            or any(type(m) is not str for m in meanings.values()):
        raise TypeError(f"check_choice's choices (for {name}) must be a non-empty tuple of strs or a dict "
                        f"{{choice: meaning}} of strs, got {type(choices).__name__} {shown(choices, 80)}")
    return options, meanings


def _listing(items: Iterable[str]) -> str:
    """``"'a', 'b' or 'c'"``: items joined for a message."""
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


@_checks_name(labels=("why",))
def check_names_free(keys: Iterable, name: str, taken: Iterable[str], why: str) -> None:
    """The keys of a dict the caller turns into a table's columns (``keys``, from the argument
    ``name``) are none of ``taken``: the columns the table adds itself (``"pruned"``, ``"top
    score"``) or those another argument already names. A key that is one of them is a ValueError
    naming ``name``, the key and every name it may not use, and ``why`` (a few words: whose
    names those are); pandas would otherwise overwrite one column with the other without a word,
    or fail inside with a bare KeyError. A str subclass key is compared by its plain value (as
    pandas compares it); a key that is no str cannot collide with a str name and passes."""
    taken = tuple(taken)
    for key in items_of(keys, name, "the keys of a dict"):
        if issubclass(type(key), str) and plain_str(key, name) in taken:
            raise ValueError(f"{name} has the key {shown(plain_str(key, name), 60)}, a name the table "
                             f"keeps for {why}; its keys may not be any of {_listing(map(repr, taken))}: "
                             f"rename it")


_shown = shown  # for check_mask_fits, whose argument ``shown`` hides the function


def describe_shape(x: Tensor) -> str:
    """``(2, 5, 16)``: a shape as text for error messages; ``x`` is a tensor or an array (anything
    with a ``shape`` tuple), else a TypeError naming what arrived."""
    shape = getattr(x, "shape", None)
    if not isinstance(shape, tuple):  # torch.Size is a tuple
        raise TypeError(f"describe_shape needs a tensor or an array (something with a shape), got "
                        f"{type(x).__name__} {shown(x, 60)}")
    return "(" + ", ".join(str(s) for s in shape) + ")"


def describe_device(x: Tensor) -> str:
    """``"device cpu"``, or for a meta tensor ``"device meta (a shape without values)"``: the words
    the messages use for a tensor with no data, the same as :func:`check_holds_values`'s; ``x`` is a
    tensor, else a TypeError naming what arrived (as :func:`describe_shape` does)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"describe_device needs a tensor, got {type(x).__name__} {shown(x, 60)}")
    return f"device {x.device}" + (" (a shape without values)" if x.is_meta else "")


@_checks_name(labels=("heads_name",))
def check_head_dims(d_model: int, num_heads: int, *, heads_name: str = "num_heads") -> int:
    """The one check that ``num_heads`` (both positive ints) divides ``d_model``; returns
    ``d_k = d_model // num_heads``. ``heads_name`` is how the message names the head count."""
    d_model = check_int(d_model, "d_model", minimum=1)  # Python ints: d_k is one too
    num_heads = check_int(num_heads, heads_name, minimum=1)
    if d_model % num_heads:
        divisors = _first_divisors(d_model)
        d_text, h_text = shown(d_model, 40), shown(num_heads, 40)  # a 10**400 is cut (battery 29)
        try:
            ratio = f"{d_model / num_heads:.4g}"
        except OverflowError:
            ratio = "more than a float holds"
        raise ValueError(
            f"d_model = {d_text} is not divisible by {heads_name} = {h_text}: every head needs the "
            f"same whole width d_k = d_model / {heads_name}, and {d_text} / {h_text} = "
            f"{ratio}. Heads that divide {d_text}: {divisors}"
        )
    return d_model // num_heads


def _first_divisors(n: int, count: int = 10) -> list[int]:
    """The smallest ``count`` divisors of ``n`` >= 1, for error messages. Only 1..1,000,000 is
    scanned (a size of 10**12 lists its small divisors at once instead of looping for hours)."""
    return [d for d in range(1, min(n, 1_000_000) + 1) if n % d == 0][:count]


@_checks_name
def check_kv_heads(num_kv_heads: object, num_heads: int, name: str = "num_kv_heads") -> int:
    """The one check that ``num_kv_heads`` (g, a positive int) divides ``num_heads`` (h), so that
    each K/V head serves ``h // g`` query heads; returns g. ``num_heads`` is checked too (a
    positive int): a str would otherwise be read by ``%`` as a format string."""
    num_heads = check_int(num_heads, "num_heads", minimum=1)
    g = check_int(num_kv_heads, name, minimum=1)
    if num_heads % g:
        raise ValueError(f"{name} must be a positive int dividing num_heads={num_heads} (one of "
                         f"{_first_divisors(num_heads, 20)}), got {shown(g)}")
    return g


@_checks_name
def check_dropout(value: object, name: str = "dropout_p") -> float:
    """A real number in [0, 1) (NaN is refused); returned as a float."""
    if not is_real(value):
        raise TypeError(f"{name} must be a float in [0, 1), got {type(value).__name__} {shown(value)}")
    number = _to_float(value, name, "a float in [0, 1)")
    if math.isnan(number) or not 0.0 <= number < 1.0:
        raise ValueError(f"{name} must be a float in [0, 1), got {shown(value)}")
    return number


def finite(value: numbers.Real) -> bool:
    """``math.isfinite(value)`` that never raises: an int no float holds (``10**400``) counts as
    not finite here, so the caller's own message names it (Python's "int too large to convert to
    float" named nothing: battery 27); so does anything that is no real number (battery 28)."""
    try:
        return math.isfinite(value)
    except Exception:  # noqa: BLE001 - also no real number ('0.1', None), a 0-d meta tensor, a raising __float__
        return False


def is_real(value: object) -> bool:
    """The package's one rule for "a number": any ``numbers.Real`` that is not a bool (a Python
    int or float, a NumPy integer or float of any width: ``np.float32`` is as much a number as
    ``np.float64``, which subclasses float; ``True`` is no number). NaN and infinity pass here:
    each caller says whether it refuses them."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def real_number(value: object, name: str, expected: str = "a real number") -> float:
    """``value`` as a Python float, if it is a number by :func:`is_real`: anything else (a bool, a
    str, None, a tensor) is a TypeError naming ``name``, ``expected`` and what arrived, and a
    number no float holds (``10**400``) a ValueError (:func:`_to_float`). NaN and infinity are
    returned as they are, for the caller's range check. The one way a numeric argument that may
    arrive as a NumPy scalar is taken (a config, a duration, a table's cell)."""
    if not is_real(value):
        raise TypeError(f"{name} must be {expected}, got {type(value).__name__} {shown(value, 60)}")
    return _to_float(value, name, expected)


def _to_float(value: numbers.Real, name: str, expected: str) -> float:
    """``float(value)``, or a ValueError naming ``name`` for a real number no float holds (an int
    such as ``10**400``: Python's own "int too large to convert to float" named nothing: battery
    27)."""
    try:
        return float(value)
    except (OverflowError, ValueError, TypeError) as err:
        raise ValueError(f"{name} must be {expected} that fits a float, got {type(value).__name__} "
                         f"{shown(value, 80)} ({err})") from None


@_checks_name
def check_flag(value: object, name: str) -> bool:
    """A real ``bool`` (``"no"`` or ``1`` would be silently truthy or falsy)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {shown(value)}")
    return value


#: The most decimals a table of the course is rounded to: float64 holds about 15 significant
#: digits, and pandas' round gives NaN beyond ~300 (10**decimals overflows).
MAX_DECIMALS = 15


# The most threads any function of the course starts: beyond it OpenMP and torch run out of
# memory or kill the interpreter (100,000 did), and a 2**31 wraps to 1.
MAX_THREADS = max(256, os.cpu_count() or 1)


@_checks_name
def check_thread_count(value: object, name: str = "num_threads") -> int:
    """A thread count: an int in 1..:data:`MAX_THREADS` (256, or the CPU count where larger)."""
    return check_int(value, name, minimum=1, maximum=MAX_THREADS)


@_checks_name
def check_int(value: object, name: str, *, minimum: int | None = None,
              maximum: int | None = None) -> int:
    """The package's one integer rule: a Python or NumPy integer (not a bool, float or str),
    at least ``minimum`` and at most ``maximum`` when given; returned as a Python ``int`` (so it
    can go into JSON, ``range`` and error messages as itself). A float that happens to be whole
    (``2.0``) is refused too: an index or a count that arrives as a float is usually a bug
    upstream (a mean, a division), not a number to round. An int subclass is read by the plain
    value it holds, its own ``__int__`` never called (:func:`plain_int`)."""
    value = plain_int(value, name)
    if type(minimum) not in _PLAIN_BOUNDS or type(maximum) not in _PLAIN_BOUNDS:  # cheap: runs often
        _check_bounds(minimum, maximum, name)  # the caller's bounds; a message only when they are wrong
    if maximum is not None and minimum is not None and minimum > maximum:
        raise ValueError(f"{name} has no allowed value: its range {minimum}..{maximum} is empty (the "
                         f"lower bound is above the upper one), so {value} cannot be checked against it")
    if maximum is not None and minimum is not None and not minimum <= value <= maximum:
        raise ValueError(f"{name} must be an int in {minimum}..{maximum}, got {value}")
    if minimum is not None and value < minimum:
        wanted = {1: "a positive int", 0: "an int >= 0"}.get(minimum, f"an int >= {minimum}")
        raise ValueError(f"{name} must be {wanted}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be an int <= {maximum}, got {value}")
    return value


_PLAIN_BOUNDS = (int, type(None))  # bounds that need no further look (NumPy ints get one)


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_bounds(minimum: object, maximum: object, name: str) -> None:
    """The ``minimum`` and ``maximum`` a caller gave :func:`check_int` for ``name``: None or ints."""
    for label, bound in (("minimum", minimum), ("maximum", maximum)):
        if bound is not None and not _is_int(bound):
            raise TypeError(f"check_int's {label} (the bound for {name}) must be an int or None, got "
                            f"{type(bound).__name__} {shown(bound, 60)}")


@_checks_name
def check_int_list(values: object, name: str, *, minimum: int | None = None,
                   maximum: int | None = None, allow_empty: bool = False) -> list[int]:
    """A list, tuple, range or 1-D array of ints, each passing :func:`check_int` (named
    ``name[i]`` in the message); a lone int, a str or a set is refused, and so is an empty
    sequence unless ``allow_empty`` (a real bool). Returned as a list of Python ints (a generator
    is read once)."""
    check_flag(allow_empty, "allow_empty")
    _check_bounds(minimum, maximum, name)  # before the list: an empty one would never reach check_int
    if isinstance(values, Tensor):
        if values.ndim != 1 or values.is_floating_point() or values.dtype == torch.bool:
            raise TypeError(f"{name} must be a list of ints (or a 1-D integer tensor), got a "
                            f"{values.dtype} tensor of shape {describe_shape(values)}")
        values = values.tolist()
    if isinstance(values, (str, bytes, set, frozenset, dict)) or isinstance(values, numbers.Number) \
            or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be a list of ints such as [1, 2, 4], got "
                        f"{type(values).__name__} {shown(values, 80)}")
    items = items_of(values, name, "a list of ints such as [1, 2, 4]")
    if not items and not allow_empty:
        raise ValueError(f"{name} must hold at least one int, got an empty {type(values).__name__}")
    return [check_int(v, f"{name}[{i}]", minimum=minimum, maximum=maximum)
            for i, v in enumerate(items)]


@_checks_name
def check_axes(ax: object, name: str = "ax") -> None:
    """``None`` or a 2-D matplotlib ``Axes`` to draw into. A figure, an array of axes or a str is
    not one (TypeError); nor is a 3-D, polar or map Axes (``projection=...``; TypeError naming its
    class and projection): the course's drawings put text, rectangles and heatmaps on x-y
    coordinates, which such axes cannot hold."""
    if ax is None:
        return
    from matplotlib.axes import Axes

    if not isinstance(ax, Axes):
        hint = " (pick one, e.g. axes[0])" if hasattr(ax, "__len__") and not isinstance(ax, str) else ""
        raise TypeError(f"{name} must be a matplotlib Axes or None (a new figure), got "
                        f"{type(ax).__name__} {shown(ax, 60)}{hint}")
    projection = getattr(ax, "name", None)
    if projection != "rectilinear":
        raise TypeError(f"{name} must be a 2-D matplotlib Axes (a 3-D or polar one cannot hold this "
                        f"drawing), got {type(ax).__name__} (projection {projection!r}); make one with "
                        f"plt.subplots() or fig.add_subplot() without projection=")


@_checks_name
def check_tensor_list(parts: object, name: str, *, stacked_ndim: int | None = None,
                      allow_empty: bool = False) -> list[Tensor]:
    """A non-empty list or tuple of tensors, or, where ``stacked_ndim`` is given, one tensor of
    that many dims whose first dim lists them (``(h, ...)`` -> h parts); returned as a list.
    Without ``stacked_ndim`` one tensor is refused, and so is one of another number of dims:
    one part passed without its list would otherwise be cut into its rows, silently. An empty
    list (or a stacked tensor of 0 parts) is a ValueError naming ``name``, unless ``allow_empty``
    (as :func:`check_int_list`)."""
    if stacked_ndim is not None:  # the caller's own value; checked even where a list makes it unused
        check_int(stacked_ndim, f"check_tensor_list's stacked_ndim (for {name})", minimum=1)
    check_flag(allow_empty, f"check_tensor_list's allow_empty (for {name})")
    if isinstance(parts, Tensor):
        if stacked_ndim is None:
            raise TypeError(f"{name} must be a list or tuple of tensors, got one tensor of shape "
                            f"{describe_shape(parts)}: pass [tensor] for one part (its rows are not "
                            f"read as parts here)")
        if parts.ndim == 0:
            raise ValueError(f"{name} must be a list of tensors (or one tensor (n, ...)), got a 0-D tensor")
        if stacked_ndim is not None and parts.ndim != stacked_ndim:
            raise ValueError(f"{name} must be a list of tensors, or one {stacked_ndim}-D tensor with the "
                             f"parts on dim 0, got one {parts.ndim}-D tensor of shape "
                             f"{describe_shape(parts)}: if it is one part, pass it in a list, [part]")
        parts = list(parts.unbind(0))
    if not isinstance(parts, (list, tuple)):
        raise TypeError(f"{name} must be a list of tensors, got {type(parts).__name__}")
    kind, parts = type(parts).__name__, items_of(parts, name, "a list of tensors")
    if not parts and not allow_empty:
        raise ValueError(f"{name} must hold at least one tensor, got an empty {kind}")
    for i, p in enumerate(parts):
        if not isinstance(p, Tensor):
            raise TypeError(f"{name}[{i}] must be a torch.Tensor, got {type(p).__name__}")
    return parts


@_checks_name(labels=("what",))
def check_rows(rows: object, name: str, size: int, what: str = "rows", *, nonempty: bool = False) -> Tensor:
    """A selection of ``size`` rows as a long tensor of indices in ``0..size-1``: an int tensor,
    a list of ints, or a bool mask of exactly ``size`` entries (True = keep, turned into the
    indices it keeps). A bool mask of another length, float indices and negative indices (which
    would silently count from the end) are refused, and so is a list mixing bools and ints
    (``[True, 0]`` would be read as the indices ``[1, 0]``); a slice is left for the caller
    (pass ``range(size)[the_slice]``). With ``nonempty`` (a real bool) a selection of no row
    is a ValueError naming ``name`` (a batch's ``take``: a batch of none scores as NaN)."""
    size = check_int(size, f"check_rows's size (how many {what} {name} selects from)", minimum=0)
    check_flag(nonempty, f"check_rows's nonempty (for {name})")
    selected = _selected_rows(rows, name, size, what)
    if nonempty and not selected.numel():
        raise ValueError(f"{name} must select at least one of the {size} {what} (a batch of none scores "
                         f"as NaN), got an empty selection")
    return selected


def _selected_rows(rows: object, name: str, size: int, what: str) -> Tensor:
    """:func:`check_rows` without the ``nonempty`` rule."""
    if isinstance(rows, Tensor):
        tensor = rows
    elif isinstance(rows, (list, tuple, range)) or (hasattr(rows, "__array__") and not isinstance(rows, str)):
        if isinstance(rows, (list, tuple)):
            _check_not_mixed_bools(rows, name)
        try:
            tensor = torch.as_tensor(rows)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"{name} must be an integer tensor or a list of ints, got "
                            f"{type(rows).__name__} {shown(rows, 60)}") from None
        if tensor.numel() == 0:
            tensor = tensor.long()
    else:
        raise TypeError(f"{name} must be an integer tensor, a list of ints or a bool mask of {size} "
                        f"{what}, got {type(rows).__name__} {shown(rows, 60)}")
    check_holds_values(tensor, name)  # its entries are read below
    if tensor.is_floating_point() or tensor.is_complex():
        raise TypeError(f"{name} must hold integer indices (or be a bool mask), got dtype {tensor.dtype}")
    if tensor.dtype == torch.bool:
        if tuple(tensor.shape) != (size,):
            raise ValueError(f"{name} as a bool mask must have one entry per one of the {size} {what}, "
                             f"got shape {describe_shape(tensor)}")
        return tensor.nonzero().flatten()
    if tensor.ndim != 1:
        raise ValueError(f"{name} must be 1-D (n,) indices, got shape {describe_shape(tensor)}")
    if tensor.numel() and (int(tensor.min()) < 0 or int(tensor.max()) >= size):
        raise IndexOutOfRange(f"{name} must lie in 0..{size - 1} ({size} {what}), got min "
                              f"{int(tensor.min())}, max {int(tensor.max())}")
    return tensor.long()


def _check_not_mixed_bools(items: list | tuple, name: str) -> None:
    """A list of row selectors is all bools (a mask) or holds no bool (indices): torch would read
    a mix such as ``[True, 0]`` as the indices ``[1, 0]``, silently."""
    kinds = [isinstance(v, (bool, np.bool_)) for v in items]
    if any(kinds) and not all(kinds):
        i = kinds.index(not kinds[0])
        raise TypeError(f"{name} must be all ints (indices) or all bools (a mask), not a mix: "
                        f"{name}[0] is {type(items[0]).__name__} {shown(items[0], 30)} but {name}[{i}] is "
                        f"{type(items[i]).__name__} {shown(items[i], 30)}")


def physical_memory_bytes() -> int | None:
    """This machine's physical memory in bytes (``None`` where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


@_checks_name(labels=("what",))
def check_fits_in_memory(num_bytes: int, name: str | None, what: str = "", *,
                         sizes: dict[str, int] | None = None) -> None:
    """Refuse an allocation of ``num_bytes`` larger than this machine's physical memory, before
    PyTorch's allocator fails with an "enforce fail" (or the system starts swapping). The
    ValueError blames ``name``; given ``sizes`` (``{argument: value}``, the sizes the allocation
    grows with) and no ``name``, it blames the largest of them, the one most likely to be wrong,
    and lists them all with their values."""
    if sizes is not None:
        if not isinstance(sizes, dict) or not sizes:
            raise TypeError(f"check_fits_in_memory's sizes must be a non-empty dict {{argument: size}}, "
                            f"got {type(sizes).__name__} {shown(sizes, 60)}")
        for key, value in sizes.items():
            check_int(value, str(key), minimum=0)
        name = max(sizes, key=sizes.__getitem__) if name is None else name
        listed = ", ".join(f"{key}={value:,}" for key, value in sizes.items())
        what = f"{listed}: {what}" if what else listed
    if not isinstance(name, str):
        raise TypeError(f"check_fits_in_memory's name must be a str (the argument it blames), got "
                        f"{type(name).__name__} {shown(name, 60)}")
    if isinstance(num_bytes, bool) or not isinstance(num_bytes, numbers.Integral) or num_bytes < 0:
        raise ValueError(f"{name}: the size to check must be a byte count (an int >= 0), got "
                         f"{type(num_bytes).__name__} {shown(num_bytes)}")
    total = physical_memory_bytes()
    if total is not None and num_bytes > total:
        raise ValueError(f"{name} asks for {_gib(num_bytes)}{f' ({what})' if what else ''}, "
                         f"more than this machine's {total / 2**30:,.1f} GiB of memory")


def _gib(num_bytes: int) -> str:
    """``num_bytes`` in GiB for a message; a count no float holds (``10**400``: "int too large to
    convert to float" named nothing: battery 29) is given as a power of two instead."""
    bits = int(num_bytes).bit_length()
    if bits > 1000:
        return f"over 2**{bits - 1} bytes"
    return f"{num_bytes / 2**30:,.1f} GiB"


@_checks_name
def check_attention_fits(batch: int, seq_len: int, d_model: int, num_heads: int,
                         name: str | None = None) -> None:
    """Refuse, before anything is allocated, a self-attention forward pass whose float32 working
    memory does not fit here: scores ``(B, h, T, T)``, the input and its projections, and the
    weights. Each size must be an int >= 1 (checked here too, by its name). ``name`` is blamed in
    the message (default: the largest of the four sizes, by :func:`check_fits_in_memory`'s
    rule); the message lists all four with their values."""
    batch, seq_len, d_model, num_heads = (check_int(v, n, minimum=1) for n, v in (
        ("batch", batch), ("seq_len", seq_len), ("d_model", d_model), ("num_heads", num_heads)))
    parts = {"batch x num_heads x seq_len**2": batch * num_heads * seq_len * seq_len,
             "batch x seq_len x d_model": 4 * batch * seq_len * d_model,
             "d_model**2": 4 * d_model * d_model}
    check_fits_in_memory(4 * sum(parts.values()), name,
                         "float32 attention scores of shape (B, h, T, T), the input (B, T, d_model) "
                         "and its projections, and the weights",
                         sizes={"batch": batch, "seq_len": seq_len, "d_model": d_model,
                                "num_heads": num_heads})


@_checks_name(labels=("what",))
def check_ids(x: object, name: str, high: int, what: str = "ids") -> Tensor:
    """An integer tensor (not bool, not float) whose entries lie in ``0..high-1`` (``what`` says
    what they are, e.g. ``"symbols"``); returned unchanged."""
    high = check_int(high, f"check_ids's high (how many {what} {name} may name)", minimum=0)
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of integer {what}, got {type(x).__name__}")
    check_holds_values(x, name)  # its entries are read below
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer {what} (torch.long), got dtype {x.dtype}")
    if x.numel() and (int(x.min()) < 0 or int(x.max()) >= high):
        raise ValueError(f"{name} must hold {what} in 0..{high - 1}, got min {int(x.min())}, "
                         f"max {int(x.max())}")
    return x


class IndexOutOfRange(IndexError, ValueError):
    """An index outside ``0..size-1``: both an ``IndexError`` (what indexing raises) and a
    ``ValueError`` (what the rest of the checks raise for a value out of range), so code that
    catches either keeps working (NumPy's ``AxisError`` does the same)."""


@_checks_name(labels=("what",))
def check_index(value: object, name: str, size: int, what: str = "") -> int:
    """An int in ``0..size-1`` (``what``, e.g. ``"layers in the model"``, says what ``size``
    counts); negative indices are refused rather than read from the end. Out of range raises
    :class:`IndexOutOfRange`, both an ``IndexError`` and a ``ValueError``."""
    size = check_int(size, f"check_index's size (how many {what or 'entries'} {name} indexes)", minimum=0)
    if size < 1:
        raise IndexOutOfRange(f"{name}: there is nothing to index{f' (no {what})' if what else ''}, "
                              f"got {shown(value)}")
    try:
        return check_int(value, name, minimum=0, maximum=size - 1)
    except ValueError as err:
        raise IndexOutOfRange(f"{err}" + (f" ({size} {what})" if what else "")) from None


@_checks_name
def check_real(value: object, name: str, *, finite: bool = True) -> float:
    """A real number (not a bool, str or tensor of several numbers); NaN refused, and
    infinity too when ``finite``; returned as a float."""
    if type(finite) is not bool:  # the caller's flag: 1 or "yes" would be silently truthy
        check_flag(finite, f"check_real's finite (for {name})")
    if isinstance(value, Tensor) and value.numel() == 1 and value.dtype != torch.bool:
        value = value.item()
    if not is_real(value):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {shown(value, 80)}")
    value = _to_float(value, name, f"a {'finite ' if finite else ''}number")
    if math.isnan(value) or (finite and math.isinf(value)):
        raise ValueError(f"{name} must be a {'finite ' if finite else ''}number, got {shown(value)}")
    return value


@_checks_name
def check_float_dtype(dtype: object, name: str = "dtype") -> torch.dtype:
    """A floating ``torch.dtype`` (keys, values and weights stored as integers would be truncated)."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating torch.dtype (e.g. torch.float32): numbers stored as "
                        f"integers or bools would be truncated; got {shown(dtype)}")
    return dtype


@_checks_name
def check_positive_number(value: object, name: str, *, allow_inf: bool = False) -> float:
    """A real number > 0 (not a bool or str; NaN refused, and infinity too unless ``allow_inf``,
    e.g. a timeout where infinity means "no limit"); returned as a float."""
    if type(allow_inf) is not bool:  # the caller's flag: 1 or "yes" would be silently truthy
        check_flag(allow_inf, f"check_positive_number's allow_inf (for {name})")
    finite = "" if allow_inf else "finite "
    if not is_real(value):
        raise TypeError(f"{name} must be a {finite}number > 0, got {type(value).__name__} {shown(value)}")
    number = _to_float(value, name, f"a {finite}number > 0")
    if math.isnan(number) or number <= 0 or (math.isinf(number) and not allow_inf):
        raise ValueError(f"{name} must be a {finite}number > 0, got {shown(value)}")
    return number


#: The most positional arguments :func:`check_callable` tries a function with (the course's
#: callbacks take up to 6; a count like 10**13 would build a list too large for memory).
MAX_NARGS = 255


@_checks_name(labels=("what",))
def check_callable(value: object, name: str, what: str = "a function", *,
                   nargs: int | None = None) -> None:
    """``value`` can be called (``what`` describes the expected signature for the message) and,
    when ``nargs`` is given, with that many positional arguments (a function of the wrong
    arity is refused here, not by a ``TypeError`` from deep inside the caller). A callable whose
    signature Python cannot read (some built-ins) passes the arity check. ``nargs`` is None or
    an int in 0..:data:`MAX_NARGS` (0: a function called with no arguments)."""
    if nargs is not None:
        nargs = check_int(nargs, "nargs", minimum=0, maximum=MAX_NARGS)
    if not callable(value):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__} {shown(value, 80)}")
    if nargs is None:
        return
    import inspect

    # a module is called through nn.Module.__call__(*args, **kwargs), which binds anything: its
    # forward says what it takes
    target = value.forward if isinstance(value, torch.nn.Module) else value
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*([None] * nargs))
    except TypeError:
        label = getattr(value, "__name__", None) or f"{type(value).__name__}.forward"
        raise TypeError(f"{name} must be {what}, called with {nargs} positional argument"
                        f"{'s' if nargs != 1 else ''}, but {label}{signature} cannot take "
                        f"{nargs}") from None


@_checks_name
def check_generator(value: object, name: str = "generator") -> None:
    """``None`` or a ``torch.Generator`` (a seed is not one: ``torch.Generator().manual_seed(0)``)."""
    if value is not None and not isinstance(value, torch.Generator):
        raise TypeError(f"{name} must be a torch.Generator or None, got {type(value).__name__} "
                        f"{shown(value)}; make one with torch.Generator().manual_seed(seed)")


@_checks_name
def check_bool_mask(mask: object, name: str) -> None:
    """Raise a clear error unless ``mask`` is a boolean tensor."""
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of dtype torch.bool, got {type(mask)}")
    if mask.dtype != torch.bool:
        meaning = "True = real token" if "padding" in name else "True = may attend"
        raise TypeError(
            f"{name} must have dtype torch.bool ({meaning}), got {mask.dtype}. This course does not "
            "accept numeric masks; convert yours by what its numbers mean: a 0/1 mask with 1 for "
            "kept keys (e.g. a tokenizer's attention_mask) -> `mask != 0` (or `mask.bool()`); "
            "an additive mask with 0 for kept and -inf for blocked keys -> `mask == 0`."
        )


@_checks_name
def check_dims_not_empty(x: Tensor, name: str, dims: tuple[str, ...] = ("B", "T")) -> None:
    """The leading dims of ``x`` named by ``dims`` (``"B"`` sequences, ``"T"`` tokens) each hold at
    least one entry: an empty batch or sequence has nothing to attend over, and would otherwise
    fail inside a reshape or a reduction with torch's words. ``x`` must be a tensor with at least
    ``len(dims)`` dims; ``dims`` (this helper's own argument) a tuple or list of str labels."""
    dims = _check_dims_labels(dims)
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__} {shown(x, 60)}")
    if x.ndim < len(dims):
        raise ValueError(f"{name} must be at least {len(dims)}-D ({', '.join(dims)}, ...), got shape "
                         f"{describe_shape(x)}")
    words = {"B": "sequence", "T": "token"}
    for i, label in enumerate(dims):
        if x.shape[i] == 0:
            raise ValueError(f"{name} must hold at least one {words.get(label, 'entry')} ({label} >= 1), "
                             f"got shape {describe_shape(x)}")


def _check_dims_labels(dims: object) -> tuple[str, ...]:
    """The ``dims`` of :func:`check_dims_not_empty`: a tuple or list of str labels such as
    ``("B", "T")``; returned as it is (a plain tuple or list: the hot path), else as a tuple."""
    expected = "a tuple of str labels such as ('B', 'T')"
    if isinstance(dims, (tuple, list)) and type(dims) not in (tuple, list):  # a subclass: its len may raise
        dims = tuple(items_of(dims, "check_dims_not_empty's dims", expected))
    if not isinstance(dims, (tuple, list)) or not all(isinstance(d, str) for d in dims):
        raise TypeError(f"check_dims_not_empty's dims must be {expected}, "
                        f"got {type(dims).__name__} {shown(dims, 60)}")
    return dims


@_checks_name(labels=("layout",))
def check_tensor(x: object, name: str, *, ndim: int | None = None, min_ndim: int = 0,
                 layout: str = "") -> None:
    """``x`` is a floating-point tensor with ``ndim`` dims (or at least ``min_ndim``).
    ``layout`` (e.g. ``"(B, T, d_model=16)"``) is shown in the shape error."""
    if not (ndim is None or type(ndim) is int and ndim >= 0) or type(min_ndim) is not int or min_ndim < 0:
        _check_dims_wanted(ndim, min_ndim)  # the caller's own values; a message only when they are wrong
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.layout != torch.strided:
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout {x.layout}; convert "
                        f"with {name}.to_dense()")
    if ndim is not None and x.ndim != ndim:
        hint = " (add a batch dim with x.unsqueeze(0))" if x.ndim == ndim - 1 else ""
        raise ValueError(f"{name} must be {ndim}-D {layout}, got {x.ndim}-D shape "
                         f"{describe_shape(x)}{hint}")
    if x.ndim < min_ndim:
        raise ValueError(f"{name} must be at least {min_ndim}-D {layout}, got shape {describe_shape(x)}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must hold floating-point numbers (e.g. torch.float32), got dtype "
                        f"{x.dtype}; convert with {name}.float()")


def _check_dims_wanted(ndim: object, min_ndim: object) -> None:
    """The caller's ``ndim`` (None or an int >= 0) and ``min_ndim`` (an int >= 0) of :func:`check_tensor`."""
    if ndim is not None:
        check_int(ndim, "check_tensor's ndim", minimum=0)
    check_int(min_ndim, "check_tensor's min_ndim", minimum=0)


def check_same_dtype_and_device(tensors: dict[str, Tensor]) -> None:
    """Every tensor of the dict ``{name: tensor}`` has the same dtype and sits on the same device."""
    if not isinstance(tensors, dict):
        raise TypeError(f"tensors must be a dict {{name: tensor}}, got {type(tensors).__name__} "
                        f"{shown(tensors, 60)}")
    named = {plain_str(name, "check_same_dtype_and_device's tensors keys",
                                 "a str (an argument's name)"): t
             for name, t in tensors.items()}
    for name, t in named.items():
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__} {shown(t, 60)}")
    for what in ("dtype", "device"):
        found = {name: getattr(t, what) for name, t in named.items()}
        if len(set(found.values())) > 1:
            listed = ", ".join(f"{name} {value}" for name, value in found.items())
            raise (TypeError if what == "dtype" else ValueError)(
                f"{', '.join(named)} must share one {what}, got {listed}"
            )


@_checks_name
def check_device(device: object, name: str = "device") -> torch.device:
    """A device that can hold numbers and exists here: ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (when
    that GPU is present), ``"mps"`` when available, as a str or ``torch.device``. The meta device
    is refused (its tensors have a shape but no values: whatever is written there is lost).
    Returned as a ``torch.device``."""
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"{name} must be a str or torch.device such as 'cpu' or 'cuda:0', got "
                        f"{type(device).__name__} {shown(device, 60)}")
    try:
        parsed = torch.device(device)
    except RuntimeError:
        raise ValueError(f"{name} must be a device such as 'cpu', 'cuda' or 'cuda:0', "
                         f"got {shown(device)}") from None
    check_not_meta_device(parsed, name, asked=device)
    return check_device_present(parsed, name, asked=device, instead="'cpu'")


@_checks_name
def check_not_meta_device(device: torch.device, name: str = "device", *, asked: object = None) -> None:
    """The parsed ``device`` is not the meta device (its tensors have a shape but no values): the
    rule of :func:`check_device`, for a caller that only parses its device (``asked``, default
    ``device``, is what the message shows). ``device`` must be a ``torch.device`` (a TypeError
    naming ``name`` otherwise: a str gave "'str' object has no attribute 'type'": battery 28)."""
    if not isinstance(device, torch.device):
        raise TypeError(f"{name} must be a parsed torch.device (check_device parses a name), got "
                        f"{type(device).__name__} {shown(device, 60)}")
    if device.type == "meta":
        raise ValueError(f"{name} must be a device that holds values ('cpu' or 'cuda'), got "
                         f"{shown(str(device) if asked is None else asked)}: meta tensors have a shape but "
                         "no numbers to store or compute with")


@_checks_name(labels=("instead",))
def check_device_present(device: torch.device, name: str = "device", *, asked: object = None,
                         instead: str = "'cpu' or None") -> torch.device:
    """The parsed ``device`` exists on this machine: the CPU always, a CUDA GPU when torch sees it
    (and that index), MPS when available; anything else (``xpu``, ...) is refused. One
    implementation for the course (:func:`course_utils.env.pick_device` and the masks call it
    too), naming ``name``, what was ``asked`` for (default:
    ``device``) and what to use ``instead``, so that a missing GPU is named here rather than by
    torch's ``AssertionError: Torch not compiled with CUDA enabled`` inside a tensor op. The meta
    device is the caller's to allow or refuse (it is not a machine's). A str is parsed first."""
    if isinstance(device, str):
        try:
            device, asked = torch.device(device), device if asked is None else asked
        except RuntimeError:
            raise ValueError(f"{name} must be a device such as 'cpu', 'cuda' or 'cuda:0', "
                             f"got {shown(device)}") from None
    if not isinstance(device, torch.device):
        raise TypeError(f"{name} must be a torch.device or a str such as 'cpu' or 'cuda:0', got "
                        f"{type(device).__name__} {shown(device, 60)}")
    asked = str(device) if asked is None else asked
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{name} {shown(asked)} asked for, but this machine has no usable CUDA GPU "
                             f"(torch.cuda.is_available() is False); use {instead}")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ValueError(f"{name} {shown(asked)} asked for, but only {count} CUDA GPU(s) are visible")
    elif device.type == "mps":
        if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            raise ValueError(f"{name} {shown(asked)} asked for, but Apple's MPS backend is not available "
                             f"here; use {instead}")
    elif device.type != "cpu":
        raise ValueError(f"{name} must be 'cpu', 'cuda', 'cuda:N' or 'mps', got {shown(asked)}")
    elif device.index not in (None, 0):  # torch.device('cpu', 3) parses, but there is one CPU device
        raise ValueError(f"{name} {shown(asked)} asked for, but the CPU is one device: use 'cpu' (an index "
                         f"picks a GPU, 'cuda:N')")
    return device


@_checks_name
def check_holds_values(x: Tensor, name: str) -> None:
    """``x`` is dense (not sparse) and not on the meta device (a tensor with a shape and no
    numbers: copying it into a cache or a model, or reading a score from it, fails deep inside or
    stores nothing); ``x`` must be a tensor."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__} {shown(x, 60)}")
    if x.is_meta:
        raise ValueError(f"{name} is on the meta device (a shape without values), got shape "
                         f"{describe_shape(x)}: build or load it on 'cpu' or 'cuda' first")
    check_dense(x, name)


@_checks_name
def check_dense(x: Tensor, name: str) -> None:
    """The tensor ``x`` is dense (layout ``torch.strided``): a sparse one failed inside torch with
    "Could not run 'aten::min' with arguments from the 'SparseCPU' backend" (battery 27)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__} {shown(x, 60)}")
    if x.layout != torch.strided:
        raise TypeError(f"{name} must be a dense tensor (layout torch.strided), got a {x.layout} tensor "
                        f"of shape {describe_shape(x)}: pass {name}.to_dense()")


@_checks_name(labels=("what",))
def check_finite(x: Tensor, name: str, what: str = "") -> None:
    """Every number in the floating tensor ``x`` is finite; otherwise a ValueError naming ``name``,
    the first bad index and its value (``what`` adds why it matters). One reduction over ``x``:
    for results and small inputs, not for every step of a hot loop. A meta tensor (no values to
    check) is refused by :func:`check_holds_values`, naming ``name`` and the device."""
    check_holds_values(x, name)  # a tensor with values: the TypeError and the meta device
    x = x.detach()  # (an inference tensor that requires grad made isfinite raise torch's own error)
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        bad = (~torch.isfinite(x)).nonzero()[0].tolist()
        value = x[tuple(bad)].item()
        raise ValueError(f"{name} must hold finite numbers, got {value} at index {tuple(bad)}"
                         + (f" ({what})" if what else ""))


@_checks_name
def check_matches_module(x: Tensor, name: str, weight: Tensor) -> None:
    """``x`` has the dtype and device of the module whose parameter is ``weight`` (both tensors)."""
    if not isinstance(weight, Tensor):
        raise TypeError(f"weight must be one of the module's parameters (a torch.Tensor) to compare {name} "
                        f"with, got {type(weight).__name__} {shown(weight, 60)}")
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__} {shown(x, 60)}")
    if x.dtype != weight.dtype:
        raise TypeError(
            f"{name} has dtype {x.dtype} but the module's parameters are {weight.dtype} "
            f"(a numpy array becomes float64): convert with {name}.to({weight.dtype}) or the "
            f"module with .to({x.dtype})"
        )
    if x.device != weight.device:
        raise ValueError(
            f"{name} is on device {x.device} but the module's parameters are on {weight.device}: "
            f"move one of them with .to(device)"
        )
    check_not_inference(x, name, tracked=weight.requires_grad)


@_checks_name
def check_not_inference(x: Tensor, name: str, *, tracked: bool) -> None:
    """``x`` was not made under ``torch.inference_mode()`` when the computation it enters records
    gradients (``tracked``: a parameter or input there needs them, and grad mode is on): torch
    cannot keep an inference tensor for backward, and says so naming no argument. ``tracked`` is
    a real bool (:func:`check_flag`)."""
    if type(tracked) is not bool:
        check_flag(tracked, f"check_not_inference's tracked (for {name})")
    if tracked and x.is_inference() and torch.is_grad_enabled():
        raise ValueError(
            f"{name} was made under torch.inference_mode() and cannot take part in a computation that "
            f"records gradients: run it under torch.no_grad() or torch.inference_mode() too, or pass "
            f"{name}.clone()"
        )


@_checks_name
def check_keys_not_empty(num_queries: int, num_keys: int, name: str = "k") -> None:
    """Queries with no key at all have nothing to average: refuse ``Tk = 0`` when ``Tq > 0``.
    ``num_queries`` and ``num_keys`` are counts (ints >= 0), checked here too; the usual case,
    two Python ints from a shape, is recognised in one comparison (this runs on every forward)."""
    if not (type(num_queries) is int and type(num_keys) is int and num_queries >= 0 and num_keys >= 0):
        num_queries = check_int(num_queries, "num_queries (Tq)", minimum=0)
        num_keys = check_int(num_keys, "num_keys (Tk)", minimum=0)
    if num_keys == 0 and num_queries > 0:
        raise ValueError(
            f"{name} has no positions (Tk = 0) for {num_queries} queries: each query needs at "
            "least one key to attend to (an empty sequence, Tq = Tk = 0, is fine)"
        )


def check_sdpa_inputs(q: object, k: object, v: object, mask: object, is_causal: object,
                      dropout_p: object) -> None:
    """Everything :func:`course_utils.attention.mha.scaled_dot_product_attention` needs."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(t, name, min_ndim=2, layout="(..., T, d)")
    check_same_dtype_and_device({"q": q, "k": k, "v": v})
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k need the same last dim dk to be compared: q {describe_shape(q)}, "
                         f"k {describe_shape(k)}")
    if q.shape[-1] == 0:  # scores of 0 / sqrt(0): every weight and output would be NaN
        raise ValueError(f"q and k need a head width dk of at least 1 (the scores are divided by "
                         f"sqrt(dk)), got dk = 0: q {describe_shape(q)}, k {describe_shape(k)}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same length Tk (one value per key): k "
                         f"{describe_shape(k)}, v {describe_shape(v)}")
    if not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise ValueError("q, k and v must have identical leading (batch/head) dims, got "
                         f"q {describe_shape(q)}, k {describe_shape(k)}, v {describe_shape(v)}")
    check_keys_not_empty(q.shape[-2], k.shape[-2], "k")
    check_flag(is_causal, "is_causal")
    check_dropout(dropout_p, "dropout_p")
    if mask is not None:
        target = (*q.shape[:-1], k.shape[-2])  # the scores' shape (..., Tq, Tk)
        check_mask_fits(mask, target, "(..., Tq, Tk)", device=q.device)


@_checks_name
def check_stream(x: object, name: str, *, d_model: int, weight: Tensor) -> None:
    """The one input check of a layer on the residual stream (attention's query, key and value,
    a block, an MLP): ``x`` a float ``(B, T, d_model)`` tensor of at least one sequence (``B >= 1``:
    an empty batch would come back as an empty result without a word; ``T = 0`` is left to the
    layer) with the dtype and device of the module whose parameter is ``weight``. ``d_model`` (the
    module's own width) must be an int >= 1, else a TypeError or ValueError naming it: the messages
    print it (one whose repr raised replaced them: battery 29)."""
    if type(d_model) is not int:  # the forward pass pays this type test only
        d_model = check_int(d_model, f"d_model (the width {name} is checked against)", minimum=1)
    check_tensor(x, name, ndim=3, layout=f"(B, T, d_model={d_model})")
    if x.shape[-1] != d_model:
        raise ValueError(f"{name} last dim must be d_model={d_model}, got shape {describe_shape(x)}")
    check_dims_not_empty(x, name, ("B",))
    check_matches_module(x, name, weight)


def check_mha_tensors(query: object, key: object, value: object, *, d_model: int,
                      weight: Tensor) -> None:
    """The tensors an attention layer projects: ``query``, ``key`` and ``value`` each a float
    ``(B, T, d_model)`` tensor with the dtype and device of the module whose parameter is
    ``weight``, one batch size B, and key and value of one length Tk. What
    :meth:`~course_utils.attention.mha.MultiHeadAttentionBase.forward` and ``project_qkv`` both need."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if (name == "key" and key is query) or (name == "value" and value is key):
            continue  # self-attention passes one tensor three times: check it once
        check_stream(t, name, d_model=d_model, weight=weight)
    if not (query.shape[0] == key.shape[0] == value.shape[0]):
        raise ValueError(f"query, key and value must share the batch size B, got "
                         f"{describe_shape(query)}, {describe_shape(key)}, {describe_shape(value)}")
    if key.shape[1] != value.shape[1]:
        raise ValueError(f"key and value must have the same length Tk, got key {describe_shape(key)} "
                         f"and value {describe_shape(value)}")


def check_mha_inputs(query: object, key: object, value: object, *, d_model: int, weight: Tensor,
                     is_causal: object, need_weights: object) -> None:
    """Everything :meth:`course_utils.attention.mha.MultiHeadAttention.forward` needs;
    ``weight`` is one of the module's parameters (its dtype and device must match)."""
    check_mha_tensors(query, key, value, d_model=d_model, weight=weight)
    check_keys_not_empty(query.shape[1], key.shape[1], "key")
    check_flag(is_causal, "is_causal")
    check_flag(need_weights, "need_weights")


def _heads_fit(q: object, k: object, v: object, num_heads: int, num_kv_heads: int, d_k: int) -> bool:
    """The quick test of :func:`check_fast_attention_inputs`: three dense float 4-D tensors,
    q ``(B, h, Tq, dk)``, k and v ``(B, g, Tk, dk)`` of one shape, dtype and device."""
    if not (type(q) is Tensor and type(k) is Tensor and type(v) is Tensor):  # a subclass: the full check
        return False
    qs, ks = q.shape, k.shape
    return (len(qs) == 4 and ks == v.shape and len(ks) == 4 and qs[0] == ks[0]
            and qs[1] == num_heads and ks[1] == num_kv_heads and qs[3] == d_k == ks[3]
            and q.dtype == k.dtype == v.dtype and q.dtype.is_floating_point
            and q.device == k.device == v.device and q.layout == k.layout == v.layout == torch.strided)


def _allowed_fits(allowed: object, q: Tensor, k: Tensor) -> bool:
    """The quick test of a mask: bool ``(B|1, h|1, Tq, Tk)`` on q's device."""
    if type(allowed) is not Tensor or allowed.dtype != torch.bool or allowed.ndim != 4:
        return False
    a = allowed.shape
    return (a[0] in (1, q.shape[0]) and a[1] in (1, q.shape[1]) and a[2] == q.shape[2]
            and a[3] == k.shape[2] and allowed.device == q.device)


def check_fast_attention_inputs(q: object, k: object, v: object, allowed: object, causal_only: object, *,
                                num_heads: int, num_kv_heads: int, d_k: int) -> None:
    """What :meth:`~course_utils.attention.mha.MultiHeadAttentionBase.fast_attention` needs:
    float heads ``q`` ``(B, h, Tq, dk)`` and ``k``, ``v`` ``(B, g, Tk, dk)`` of one dtype and device,
    ``allowed`` None or a bool mask that fits ``(B, h, Tq, Tk)``, and ``causal_only`` a bool.
    Shapes only: no tensor operation. It runs on every forward, so the usual case is
    recognised first in a few comparisons, and the messages are built only for a misfit."""
    if _heads_fit(q, k, v, num_heads, num_kv_heads, d_k) and isinstance(causal_only, bool) \
            and (allowed is None or _allowed_fits(allowed, q, k)):
        return
    for label, size in (("num_heads", num_heads), ("num_kv_heads", num_kv_heads), ("d_k", d_k)):
        check_int(size, label, minimum=1)  # before the layouts below are written with them
    check_tensor(q, "q", ndim=4, layout=f"(B, h={num_heads}, Tq, dk={d_k})")
    for name, t in (("k", k), ("v", v)):
        check_tensor(t, name, ndim=4, layout=f"(B, g={num_kv_heads}, Tk, dk={d_k})")
    check_same_dtype_and_device({"q": q, "k": k, "v": v})
    if q.shape[1] != num_heads or q.shape[3] != d_k:
        raise ValueError(f"q must be (B, h={num_heads}, Tq, dk={d_k}), got {describe_shape(q)}")
    for name, t in (("k", k), ("v", v)):
        if t.shape[0] != q.shape[0] or t.shape[1] != num_kv_heads or t.shape[3] != d_k:
            raise ValueError(f"{name} must be (B={q.shape[0]}, g={num_kv_heads}, Tk, dk={d_k}) like q's "
                             f"batch, got {describe_shape(t)}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have one shape, got {describe_shape(k)} and {describe_shape(v)}")
    check_flag(causal_only, "causal_only")
    if allowed is not None:
        check_mask_fits(allowed, (q.shape[0], num_heads, q.shape[2], k.shape[2]), "(B, h, Tq, Tk)",
                        device=q.device, name="allowed")


def check_heads_to_merge(heads: object, num_heads: int, d_k: int) -> None:
    """What ``merge_heads`` needs: a float ``(B, h, T, dk)`` tensor with ``h * dk = d_model`` and
    ``B >= 1`` (an empty batch would merge into an empty output without a word)."""
    num_heads = check_int(num_heads, "num_heads", minimum=1)  # before the message is computed from them
    d_k = check_int(d_k, "d_k", minimum=1)  # (as plain ints: an int subclass's repr may raise)
    layout = f"(B, h={num_heads}, T, dk={d_k})"
    check_tensor(heads, "heads", ndim=4, layout=layout)
    check_dims_not_empty(heads, "heads", ("B",))
    if heads.shape[1] * heads.shape[3] != num_heads * d_k:
        raise ValueError(f"heads must be {layout} so that h * dk = d_model = {num_heads * d_k}, got "
                         f"shape {describe_shape(heads)}")


@_checks_name(labels=("target_names",))
def check_mask_fits(mask: object, target: tuple[int, ...], target_names: str, *,
                    device: torch.device | None = None, shown: Tensor | None = None,
                    name: str = "mask") -> None:
    """``mask`` is a bool tensor whose last two dims are exactly (Tq, Tk) of ``target``; it
    may have fewer leading dims, each equal to the target's or 1. Nothing else broadcasts.
    ``shown`` is the mask as the caller passed it (for the error message), ``name`` its argument."""
    if isinstance(target, Tensor) or not isinstance(target, (tuple, list, torch.Size)):
        raise TypeError(f"check_mask_fits: target must be the scores' shape, a tuple of ints such as "
                        f"(B, h, Tq, Tk), got {type(target).__name__} {_shown(target, 60)}")
    target = tuple(check_int_list(target, "check_mask_fits: target", minimum=0))
    if len(target) < 2 or not isinstance(target_names, str) or not isinstance(name, str):
        raise TypeError(f"check_mask_fits: target needs at least (Tq, Tk), got {target}; target_names and "
                        f"name must be str, got {type(target_names).__name__} and {type(name).__name__}")
    check_bool_mask(mask, name)
    shown = mask if shown is None else shown
    ok = 2 <= mask.ndim <= len(target) and tuple(mask.shape[-2:]) == tuple(target[-2:])
    if ok:
        lead_mask = mask.shape[:-2]
        lead_target = target[len(target) - mask.ndim : -2]
        ok = all(m in (1, t) for m, t in zip(lead_mask, lead_target, strict=True))
    if not ok:
        raise ValueError(
            f"{name} of shape {describe_shape(shown)} does not fit attention scores of shape "
            f"{tuple(target)} {target_names}: its last two dims must be exactly "
            f"(Tq, Tk) = {tuple(target[-2:])} and any leading dim must equal the scores' "
            "dim or be 1"
        )
    if device is not None and not isinstance(device, torch.device):  # "cpu" as a str is torch.device("cpu")
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError, ValueError):  # '' gave torch's bare "must not be empty"
            raise ValueError(f"check_mask_fits's device (for {name}) must be a torch.device or a device "
                             f"name such as 'cpu', got {type(device).__name__} {_shown(device, 60)}"
                             ) from None
    if device is not None and mask.device != device:
        raise ValueError(f"{name} is on device {mask.device} but the attention inputs are on {device}")


def combine_masks(mask: object, key_padding_mask: object, *, batch: int, num_heads: int,
                  num_queries: int, num_keys: int, device: torch.device) -> Tensor | None:
    """Check ``mask`` (``(Tq, Tk)``, ``(B, Tq, Tk)`` or ``(B|1, h|1, Tq, Tk)``) and
    ``key_padding_mask`` (``(B, Tk)``, ``True`` = real token), and merge them into one bool
    view ``(B|1, h|1, Tq, Tk)``, ``True`` = may attend; ``None`` if neither is given."""
    if not isinstance(device, torch.device):  # built, a torch.device is valid; anything else is parsed
        device = torch.device("meta") if isinstance(device, str) and device == "meta" \
            else check_device_present(device, "device")  # meta stays allowed: a module on meta runs shapes
    sizes = {"batch": batch, "num_heads": num_heads, "num_queries": num_queries, "num_keys": num_keys}
    target = tuple(check_int(size, label, minimum=0) for label, size in sizes.items())
    combined = None
    if mask is not None:
        check_bool_mask(mask, "mask")
        lifted = mask
        if mask.ndim == 2:  # (Tq, Tk) -> (1, 1, Tq, Tk)
            lifted = mask[None, None]
        elif mask.ndim == 3:  # (B, Tq, Tk) -> (B, 1, Tq, Tk): never matched against h
            lifted = mask.unsqueeze(1)
        check_mask_fits(lifted, target, "(B, h, Tq, Tk)", device=device, shown=mask)
        combined = lifted
    if key_padding_mask is not None:
        check_bool_mask(key_padding_mask, "key_padding_mask")
        if tuple(key_padding_mask.shape) != (batch, num_keys):
            raise ValueError(
                f"key_padding_mask must have shape (B, Tk) = {(batch, num_keys)} with True = real "
                f"token, got {describe_shape(key_padding_mask)}"
            )
        if key_padding_mask.device != torch.device(device):
            raise ValueError(f"key_padding_mask is on device {key_padding_mask.device} but the "
                             f"inputs are on {device}")
        padding = key_padding_mask[:, None, None, :]  # (B, 1, 1, Tk)
        combined = padding if combined is None else combined & padding
    if combined is None:
        return None
    return combined.expand(combined.shape[0], combined.shape[1], num_queries, num_keys)  # a view


def check_attention_extras(past: object, *, batch: int, num_kv_heads: int, d_k: int,
                           weight: Tensor) -> None:
    """``past`` is None, a function (its result is checked by :func:`check_kv_pair` once it has
    run), or a ``(k, v)`` pair of ``(B, g, T_past, dk)`` tensors fitting the module."""
    if past is None or callable(past):
        return
    check_kv_pair(past, "past", batch=batch, num_kv_heads=num_kv_heads, d_k=d_k, weight=weight,
                  alternatives=", a cache's append function or None")


@_checks_name(labels=("length", "alternatives"))
def check_kv_pair(pair: object, name: str, *, batch: int, num_kv_heads: int, d_k: int, weight: Tensor,
                  length: str = "T_past", alternatives: str = "") -> tuple[Tensor, Tensor]:
    """``pair`` is a ``(k, v)`` pair of ``(B, g, T, dk)`` tensors of one shape, with the module's
    batch, K/V heads, head width, dtype and device: the ``past`` pair given to a forward, or what
    a ``past`` function returned. Otherwise a TypeError or ValueError naming ``name`` (its
    tensors are ``name k`` and ``name v``), what was expected and what arrived. Returned as a
    tuple."""
    if isinstance(pair, (tuple, list)) and type(pair) not in (tuple, list):  # a subclass: its len may raise
        pair = tuple(items_of(pair, name, f"a (k, v) pair of tensors (B, g, {length}, dk)"))
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        got = type(pair).__name__
        if isinstance(pair, (tuple, list)):
            got += f" of {len(pair)} item{'' if len(pair) == 1 else 's'}"
        hint = " (did the function forget to return them?)" if pair is None else ""
        raise TypeError(f"{name} must be a (k, v) pair of tensors (B, g, {length}, dk){alternatives}, "
                        f"got {got}{hint}")
    batch, num_kv_heads, d_k = (check_int(size, f"check_kv_pair's {label} (for {name})", minimum=1)
                                for size, label in ((batch, "batch"), (num_kv_heads, "num_kv_heads"),
                                                    (d_k, "d_k")))  # not the tensors' fault; plain ints
    expected = f"(B={batch}, g={num_kv_heads}, {length}, dk={d_k})"
    for part, t in zip(("k", "v"), pair, strict=True):
        check_tensor(t, f"{name} {part}", ndim=4, layout=expected)
        if t.shape[0] != batch or t.shape[1] != num_kv_heads or t.shape[3] != d_k:
            raise ValueError(f"{name} {part} must be {expected}, got {describe_shape(t)}")
        check_matches_module(t, f"{name} {part}", weight)
    if pair[0].shape != pair[1].shape:
        raise ValueError(f"{name} k and v must have one shape, got {describe_shape(pair[0])} and "
                         f"{describe_shape(pair[1])}")
    return pair[0], pair[1]


@_checks_name
def check_edited_heads(result: object, heads: Tensor, name: str = "edit_heads") -> Tensor:
    """What the ``edit_heads`` hook returned for ``heads`` ``(B, h, T, dk)``: a tensor of the same
    shape, dtype and device (anything else would be merged into a wrong output, or fail deep
    inside ``out_proj``); returned unchanged. ``heads`` must be a tensor (a TypeError naming it
    otherwise)."""
    if not isinstance(heads, Tensor):
        raise TypeError(f"check_edited_heads: heads must be the tensor the hook got, got "
                        f"{type(heads).__name__} {shown(heads, 60)}")
    expected = (f"heads of the shape {describe_shape(heads)}, dtype {heads.dtype} and device "
                f"{heads.device} it got")
    if not isinstance(result, Tensor):
        raise TypeError(f"{name} must return {expected}, got {type(result).__name__}"
                        + (" (did the function forget to return the heads?)" if result is None else ""))
    if result.shape != heads.shape:
        raise ValueError(f"{name} must return {expected}, got shape {describe_shape(result)}")
    if result.dtype != heads.dtype:
        raise TypeError(f"{name} must return {expected}, got dtype {result.dtype}")
    if result.device != heads.device:
        raise ValueError(f"{name} must return {expected}, got device {result.device}")
    if result.is_floating_point() and not _all_finite(result) \
            and _all_finite(heads):  # the edit made them: every later logit would be NaN
        check_finite(result, f"{name}'s result", "the heads it got were finite")
    return result


def _all_finite(x: Tensor) -> bool:
    """Whether every number in the floating tensor ``x`` is finite. A NaN or an infinity makes
    the sum NaN or infinite, so a finite sum settles it in one cheap reduction (this runs on every
    hook_z edit: ``torch.isfinite(x).all()`` cost 3-5 % of lesson 06's ablation sweeps); only a sum
    that overflows (finite numbers near the dtype's limit) is checked number by number. Detached:
    the check is no part of the graph when the heads carry gradients."""
    return math.isfinite(float(x.detach().sum())) or bool(torch.isfinite(x).all())


# -- battery 5 additions (helper b5b): kept in one block ------------------------------------------
@_checks_name(labels=("what",))
def check_distinct(values: object, name: str, what: str = "entries") -> list:
    """``values`` (a list, tuple or range) holds each entry once; a repeat is a ValueError naming
    ``name``, the values and the repeats (a repeated seed or head count would be run, averaged or
    tabulated twice). NaN counts as equal to NaN, and unhashable entries (lists) are compared by
    ==. Returned as a list. A tensor (of at least one dimension) is compared by its values, so
    one on the meta device, which has none, is refused naming ``name`` (a ValueError)."""
    if isinstance(values, (str, bytes, dict, set, frozenset)) or not isinstance(values, Iterable) or (
            isinstance(values, Tensor) and values.ndim == 0):
        raise TypeError(f"{name} must be a list, tuple or range of {what}, got {type(values).__name__} "
                        f"{shown(values, 60)}")
    if isinstance(values, Tensor):
        check_holds_values(values, name)  # a meta tensor has no values to compare
    items = items_of(values, name, f"a list, tuple or range of {what}")
    # tensors' == is elementwise: compared by their values (a list of tensors too; battery 23)
    keys = values.tolist() if isinstance(values, Tensor) else [
        v.tolist() if isinstance(v, Tensor) and v.device.type != "meta" else v for v in items]
    repeated = [v for i, v in enumerate(keys) if any(_same(v, w) for w in keys[:i])]
    if repeated:
        repeats = [v for i, v in enumerate(repeated) if not any(_same(v, w) for w in repeated[:i])]
        raise ValueError(f"{name} must list distinct {what}, got {shown(items, 120)}, which repeats "
                         f"{shown(repeats)}")
    return items


def _same(a: object, b: object) -> bool:
    """``a == b`` as a repeat: two NaNs are the same entry, and a comparison that is not a plain
    True (an array's elementwise ==) counts as different."""
    if isinstance(a, numbers.Real) and isinstance(b, numbers.Real) and math.isnan(a) and math.isnan(b):
        return True
    try:
        equal = a == b
        return not hasattr(equal, "__len__") and bool(equal)
    except (TypeError, ValueError, RuntimeError):
        return False


@_checks_name
def check_table(table: object, name: str, columns: tuple[str, ...] = ()) -> None:
    """``table`` is a pandas DataFrame holding ``columns``; else a TypeError or ValueError naming
    ``name``, the columns wanted and the ones it has. ``columns`` is a tuple (or list) of
    column names, each hashable as pandas needs (a str such as ``"layer"``, or an int)."""
    import pandas as pd

    if isinstance(columns, (str, bytes)) or not isinstance(columns, (tuple, list)):
        raise TypeError(f"check_table's columns must be a tuple of column names, got "
                        f"{type(columns).__name__} {shown(columns, 60)}")
    for i, column in enumerate(columns):
        try:
            hash(column)
        except TypeError:
            raise TypeError(f"check_table's columns[{i}] must be a column name (a str such as 'layer'), "
                            f"got {type(column).__name__} {shown(column, 60)}") from None

    if not isinstance(table, pd.DataFrame):
        wanted = f" with columns {list(columns)}" if columns else ""
        raise TypeError(f"{name} must be a pandas DataFrame{wanted}, got {type(table).__name__} "
                        f"{shown(table, 60)}")
    repeated = table.columns[table.columns.duplicated()].unique().tolist()
    if repeated:  # table[c] would be a frame of several columns, not one column
        raise ValueError(f"{name} must have distinct column names, got {shown(list(table.columns), 120)}, "
                         f"which repeats {repeated}")
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"{name} lacks the columns {missing}; it has {list(table.columns)}")


__all__ += ["check_distinct", "check_table", "check_model_holds_values"]


# -- battery 6 additions (helper b6b): kept in one block ------------------------------------------
@_checks_name
def check_linear_weights_fit(d_in: int, widths: tuple[int, ...], name: str = "d_model",
                             dtype: torch.dtype | None = None, *,
                             also: tuple[tuple[int, int], ...] = (),
                             sizes: dict[str, int] | None = None) -> None:
    """Refuse, before allocating, linear layers of ``d_in`` inputs and the given output
    ``widths`` whose weights would not fit in this machine's memory (PyTorch's allocator would
    otherwise fail with an "enforce fail" that names no argument): a ValueError naming
    ``name`` and the bytes. ``dtype`` defaults to torch's default dtype. ``also`` lists more
    layers as ``(d_in, d_out)`` pairs (a module whose layers read other widths). ``sizes``, the
    module's ``{argument: value}`` that set the widths, are listed in the message, which then
    names the largest of them rather than ``name``."""
    if sizes is not None:
        if not isinstance(sizes, dict) or not sizes:
            raise TypeError(f"check_linear_weights_fit's sizes must be a non-empty dict {{argument: size}}, "
                            f"got {type(sizes).__name__} {shown(sizes, 60)}")
        name = max(sizes, key=lambda k: check_int(sizes[k], str(k)))  # d_in's name below
    if not isinstance(name, str):
        raise TypeError(f"check_linear_weights_fit's name must be a str (the argument it names), got "
                        f"{type(name).__name__} {shown(name, 60)}")
    d_in = check_int(d_in, name, minimum=0)
    widths = check_int_list(widths, "check_linear_weights_fit's widths", minimum=0, allow_empty=True)
    if not isinstance(also, (tuple, list)) or not all(isinstance(p, (tuple, list)) and len(p) == 2
                                                      for p in also):
        raise TypeError(f"check_linear_weights_fit's also must be (d_in, d_out) pairs, got "
                        f"{type(also).__name__} {shown(also, 60)}")
    pairs = [check_int_list(pair, f"check_linear_weights_fit's also[{i}]", minimum=0)
             for i, pair in enumerate(also)]
    itemsize = torch.empty((), dtype=dtype or torch.get_default_dtype()).element_size()
    num_bytes = (d_in * sum(widths) + sum(a * b for a, b in pairs)) * itemsize
    check_fits_in_memory(num_bytes, name, f"weights of {len(widths) + len(pairs)} linear layers, "
                                          f"{num_bytes:,} bytes", sizes=sizes or {name: d_in})


__all__ += ["check_linear_weights_fit"]


@_checks_name(labels=("why",))
def check_linear_layer(layer: object, name: str, d_in: int, d_out: int, *, bias: bool | None = None,
                       why: str = "") -> None:
    """``layer``, the module attribute ``name``, is an ``nn.Linear`` from ``d_in`` to ``d_out``
    features: weight ``(d_out, d_in)`` and a bias ``(d_out,)`` or none (``bias`` True: it must
    have one, False: it must not, None: either). For a method that copies a module's layers (a
    layer replaced or changed after construction would otherwise fail inside torch's ``copy_``
    as a size mismatch naming nothing): a TypeError or ValueError naming ``name``, what it should
    be and what it is, ending with ``why`` (e.g. ``"to_torch copies it"``) when given."""
    tail = f" ({why})" if why else ""
    check_int(d_in, f"check_linear_layer's d_in (for {name})", minimum=1)  # a str "3" blamed the layer
    check_int(d_out, f"check_linear_layer's d_out (for {name})", minimum=1)
    if not isinstance(layer, torch.nn.Linear):
        raise TypeError(f"{name} must be an nn.Linear({d_in}, {d_out}){tail}, got {type(layer).__name__} "
                        f"{shown(layer, 60)}")
    if tuple(layer.weight.shape) != (d_out, d_in):
        raise ValueError(f"{name}.weight must have shape ({d_out}, {d_in}), an nn.Linear({d_in}, {d_out})"
                         f"{tail}, got shape {tuple(layer.weight.shape)}: was {name} replaced or changed "
                         f"after construction?")
    has_bias = layer.bias is not None
    if has_bias and tuple(layer.bias.shape) != (d_out,):
        raise ValueError(f"{name}.bias must have shape ({d_out},){tail}, got shape {tuple(layer.bias.shape)}")
    if bias is not None and has_bias != bias:
        raise ValueError(f"{name} must {'have a bias' if bias else 'have no bias'}, as the module's other "
                         f"projections{tail}, got bias={'a tensor' if has_bias else 'None'}")


__all__ += ["check_linear_layer"]


# -- battery 10 additions (helper fix40b) ---------------------------------------------------------
def check_config_fields(config: object, texts: tuple[str, ...], counts: dict[str, int]) -> None:
    """The fields of a frozen config dataclass (:class:`~course_utils.attention.gqa.PublishedConfig`,
    :class:`~course_utils.attention.mla.MLAConfig`): each of ``texts`` a str, each of ``counts``
    an int of at least its given minimum, stored back as a Python int. Raised errors name the
    field as ``Class.field``. A text that is empty or only spaces is refused: a config is shown
    and cited by its name and source."""

    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise TypeError(f"config must be a config dataclass instance (PublishedConfig, MLAConfig), got "
                        f"{type(config).__name__} {shown(config, 60)}")
    if isinstance(texts, str) or not isinstance(texts, tuple | list) or not isinstance(counts, dict):
        raise TypeError(f"texts must be a tuple of field names and counts a dict field -> minimum, got "
                        f"{type(texts).__name__} {shown(texts, 40)} and {type(counts).__name__} "
                        f"{shown(counts, 40)}")
    texts = items_of(texts, "texts", "a tuple of field names")
    if not all(isinstance(f, str) for f in (*texts, *counts)):  # a list among them is unhashable
        raise TypeError(f"texts and the keys of counts must be field names (str), got {shown(texts, 60)} "
                        f"and {shown(list(counts), 60)}")
    fields = {f.name for f in dataclasses.fields(config)}
    unknown = [f for f in (*texts, *counts) if f not in fields]
    if unknown:
        raise ValueError(f"{type(config).__name__} has no field {shown(unknown[0])} (texts and counts name "
                         f"its fields: {sorted(fields)})")
    kind = type(config).__name__
    for field in texts:
        value = getattr(config, field)
        if not isinstance(value, str):
            raise TypeError(f"{kind}.{field} must be a str, got {type(value).__name__} {shown(value, 60)}")
        if not value.strip():  # a config is shown and cited by its name and source
            raise ValueError(f"{kind}.{field} must be a non-empty str, got {shown(value, 60)}")
        if type(value) is not str:  # stored as the plain str (a subclass's repr made the config
            object.__setattr__(config, field, str.__str__(value))  # unprintable: battery 31)
    for field, minimum in counts.items():
        value = check_int(getattr(config, field), f"{kind}.{field}", minimum=minimum)
        object.__setattr__(config, field, value)


__all__ += ["check_config_fields"]


# -- result records ---------------------------------------------------------------------------
_RECORD_CHECKS: dict[tuple, list] = {}  # (class, its options) -> its checks


def check_record(record: object, *, nan_ok: tuple[str, ...] = (), signed: tuple[str, ...] = (),
                 positive: tuple[str, ...] = (), nonempty: tuple[str, ...] = (),
                 fractions: tuple[str, ...] = ()) -> None:
    """The one check of a result record (a dataclass the package fills in), run from its
    ``__post_init__``: every field holds what its annotation says, named in the message as
    ``Record.field``. ``int``: a Python or NumPy int >= 0 (not a bool: records hold counts, sizes
    and indices; at least 1 for the fields in ``positive``); ``float``: a real number >= 0 (times,
    sizes, losses, differences; > 0 for the fields in ``positive``, such as a time divided by), finite
    and not NaN, except that ``signed`` fields may be negative
    and ``nan_ok`` fields may be NaN or infinite (e.g. a difference not measured yet); ``str``,
    ``bool``, ``X | None``, ``Literal[...]``, ``list[X]``/``tuple[X, ...]`` (a list or a tuple),
    ``dict[K, V]`` (a :class:`ReadOnlyDict` too, what :func:`freeze_fields` stores) and classes
    (``Tensor``, another record) as themselves; ``Any`` and ``object``
    take anything. The fields in ``nonempty`` (a list a method takes the ``min()`` of, ...) hold
    at least one item (a str: at least one character), and so does a field called ``name`` (what
    a record is known by in tables and messages: ``TraceStep('')`` would print a blank row) whether
    or not ``nonempty`` names it. The ``float`` fields in ``fractions`` (an
    accuracy, a share), or the floats they hold, lie in [0, 1]. Each name in ``nan_ok``,
    ``signed``, ``positive``, ``nonempty`` and ``fractions`` must be a field of the record (a
    misspelt one would silently check nothing), and a field of a kind the option applies to
    (``nan_ok``, ``signed``, ``fractions``: one that holds floats; ``positive``: ints or floats;
    ``nonempty``: a str, list, tuple or dict): else a ValueError naming it. The annotations are
    read once per class and set of options, so a record made in a loop pays only for the
    isinstance tests."""
    if not dataclasses.is_dataclass(record) or isinstance(record, type):
        raise TypeError(f"check_record checks a record, an instance of a dataclass (called from its "
                        f"__post_init__), got {type(record).__name__} {shown(record, 60)}")
    cls = type(record)
    key = (cls, nan_ok, signed, positive, nonempty, fractions)  # the options too: each set is checked
    try:
        checks = _RECORD_CHECKS.get(key)
    except TypeError:  # a list among them (unhashable): checked below, cached under its tuple
        checks = None
    if checks is None:
        options = {"nan_ok": nan_ok, "signed": signed, "positive": positive, "nonempty": nonempty,
                   "fractions": fractions}
        options = _check_record_options(cls, options)
        checks = _RECORD_CHECKS[(cls, *options.values())] = _record_checks(cls, **options)
    for name, check in checks:
        value = getattr(record, name)
        plain = check(value, f"{cls.__name__}.{name}")
        if type(plain) is int and type(value) is not int:  # an int field: kept as the plain int check_int
            object.__setattr__(record, name, plain)  # returned (an int subclass's repr may raise: battery 30)


class ReadOnlyDict(dict):
    """A dict that refuses every change, naming itself by ``label`` (``"DecodeRow.samples_s"``): a
    dict field of a frozen result record (see :func:`freeze_fields`). It stays a ``dict``
    (``check_record`` checks ``dict[K, V]`` fields as dicts, and ``in``, ``[key]``, ``.items()``,
    ``==``, pandas and json read it as one); ``copy()`` and ``|`` give a plain, changeable dict.
    ``items`` is what ``dict()`` takes: a mapping or (key, value) pairs (else a TypeError naming
    ``items``); ``label``, printed by every refusal, a non-empty str (else a TypeError or a
    ValueError naming ``label``)."""

    __slots__ = ("label",)

    def __init__(self, items: Mapping = (), label: str = "this dict") -> None:
        from ..cli import check_label  # standard library only; not imported with the package

        if hasattr(self, "label"):  # made already: d.__init__(other) would fill it again
            self._refuse()
        check_label(label, "label", "the name of the ReadOnlyDict its refusals print")
        try:
            super().__init__(items)
        except (TypeError, ValueError) as err:  # None, 3, [1]: not a mapping nor (key, value) pairs
            raise TypeError(f"items (of ReadOnlyDict {shown(label, 60)}) must be a mapping or an iterable "
                            f"of (key, value) pairs, got {type(items).__name__} {shown(items, 60)} "
                            f"({err})") from None
        self.label = label

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise TypeError(f"{self.label} is read-only: it was checked when its record was made; make a "
                        "new record (dataclasses.replace) instead of changing it")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self) -> tuple:  # pickle and copy rebuild it whole (not item by item)
        return type(self), (dict(self), self.label)


def freeze_fields(record: object) -> None:
    """Called first in a frozen record's ``__post_init__``, before ``check_record``: a list given
    for a field annotated ``tuple[...]`` becomes a tuple, and a dict given for a ``dict[...]``
    field a :class:`ReadOnlyDict` copy whose list values are tuples, so that the check sees what
    the record keeps and a record checked once stays valid (its methods read its fields without
    checking them again). Other fields are left as given, for the check to judge (a list given
    as a ``str`` name is refused, not turned into a tuple)."""
    if not dataclasses.is_dataclass(record) or isinstance(record, type):
        raise TypeError(f"freeze_fields freezes a record, an instance of a dataclass (called from its "
                        f"__post_init__), got {type(record).__name__} {shown(record, 60)}")
    for name, origin in _container_fields(type(record)):
        value = getattr(record, name)
        if origin is tuple and isinstance(value, list):  # (a list whose len() raises is named: battery 30)
            object.__setattr__(record, name, tuple(items_of(value, f"{type(record).__name__}.{name}",
                                                            "a list or tuple")))
        elif origin is dict and isinstance(value, dict):
            object.__setattr__(record, name, ReadOnlyDict(
                {k: tuple(v) if isinstance(v, list) else v for k, v in value.items()},
                f"{type(record).__name__}.{name}"))


@functools.cache
def _container_fields(cls: type) -> tuple[tuple[str, type], ...]:
    """The fields of the dataclass ``cls`` annotated ``tuple[...]`` or ``dict[...]``, with that
    origin (read once per class)."""
    hints = typing.get_type_hints(cls)
    origins = ((f.name, typing.get_origin(hints[f.name])) for f in dataclasses.fields(cls))
    return tuple((name, origin) for name, origin in origins if origin in (tuple, dict))


@_checks_name
def check_increasing(steps: Sequence[int], name: str) -> None:
    """``steps``, a list of ints (:func:`check_int_list`, empty allowed: a TypeError naming
    ``name[i]`` for a NaN or a str entry, which would compare as "in order"), strictly increase (a
    learning curve goes forward in time); else a ValueError naming ``name`` and the first pair
    out of order."""
    steps = check_int_list(steps, name, allow_empty=True)
    back = next((i for i in range(1, len(steps)) if steps[i] <= steps[i - 1]), None)
    if back is not None:
        raise ValueError(f"{name} must strictly increase (one entry per step, in order), got "
                         f"{name}[{back - 1}] = {steps[back - 1]} then {name}[{back}] = {steps[back]}")


def _check_record_options(cls: type, options: dict[str, object]) -> dict[str, tuple[str, ...]]:
    """The field-name lists a record's ``__post_init__`` gave :func:`check_record`: tuples (or
    lists) of names of its fields; returned as tuples."""
    fields = [f.name for f in dataclasses.fields(cls)]
    checked = {}
    for option, given in options.items():
        names = tuple(items_of(given, f"check_record's {option} (for {cls.__name__})", "a tuple of field "
                               "names")) if isinstance(given, (tuple, list)) else given
        if isinstance(names, str) or not isinstance(names, (tuple, list)) \
                or not all(isinstance(n, str) for n in names):
            raise TypeError(f"check_record's {option} (for {cls.__name__}) must be a tuple of field names, "
                            f"got {type(given).__name__} {shown(given, 60)}")
        checked[option] = names
        unknown = [n for n in names if n not in fields]
        if unknown:
            raise ValueError(f"check_record's {option} names {shown(unknown[0])}, which is not a field of "
                             f"{cls.__name__} (its fields: {fields})")
        hints = typing.get_type_hints(cls)
        kinds, wanted = _OPTION_KINDS[option]
        for n in names:
            if option == "nonempty":
                fits = _holds_items(hints[n])
            else:
                fits = bool(_hint_leaves(hints[n]) & kinds)
            if not fits:
                raise ValueError(f"check_record's {option} names {shown(n)}, a field of {cls.__name__} "
                                 f"annotated {_describe_hint(hints[n])}: {option} applies to {wanted} "
                                 f"only (there it would check nothing)")
    return checked


# The fields each option of check_record applies to: (the kinds, in words).
_OPTION_KINDS = {"nan_ok": ({float}, "fields holding floats"),
                 "signed": ({float}, "fields holding floats"),
                 "fractions": ({float}, "fields holding floats"),
                 "positive": ({int, float}, "fields holding ints or floats"),
                 "nonempty": ({str, list, tuple, dict}, "str, list, tuple and dict fields")}


#: Fields a record is known by in tables and messages (``TraceStep.name``, ``RatioSpread.name``):
#: :func:`check_record` refuses them empty as if ``nonempty`` named them (where they hold a str,
#: list, tuple or dict), so that no record needs to remember to ask.
_NAMING_FIELDS = ("name",)


def _holds_items(hint: object) -> bool:
    """``hint`` (besides None) allows only a str, list, tuple or dict: what ``nonempty`` checks."""
    return {typing.get_origin(h) or h for h in _strip_none(hint)} <= _OPTION_KINDS["nonempty"][0]


def _strip_none(hint: object) -> tuple:
    """The annotations ``hint`` allows besides None (``X | None`` -> ``(X,)``)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return tuple(a for a in typing.get_args(hint) if a is not type(None))
    return (hint,)


def _hint_leaves(hint: object) -> set:
    """The plain types an annotation holds at its leaves (``dict[str, list[float]] | None`` ->
    ``{str, float}``)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType, list, tuple, dict):
        return set().union(*(_hint_leaves(a) for a in args if a is not Ellipsis), set())
    return {hint} if isinstance(hint, type) else set()


def _record_checks(cls: type, nan_ok: tuple[str, ...], signed: tuple[str, ...],
                   positive: tuple[str, ...], nonempty: tuple[str, ...] = (),
                   fractions: tuple[str, ...] = ()) -> list:
    import typing

    hints = typing.get_type_hints(cls)
    nonempty = (*nonempty, *(n for n in _NAMING_FIELDS if n in hints and _holds_items(hints[n])))
    checks = [(f.name, _type_check(hints[f.name], f.name in nan_ok, f.name in signed, f.name in positive,
                                   f.name in fractions))
              for f in dataclasses.fields(cls)]
    return [(name, _not_empty(check) if name in nonempty else check) for name, check in checks]


def _not_empty(check):
    """``check``, then: the value holds at least one item (a str, one character)."""
    def not_empty(value: object, label: str) -> None:
        check(value, label)
        if value is not None and len(value) == 0:
            wanted = "be a non-empty str" if isinstance(value, str) else "hold at least one item"
            raise ValueError(f"{label} must {wanted}, got {type(value).__name__} {shown(value, 60)}")
    return not_empty


def _type_check(hint: object, nan_ok: bool, signed: bool, positive: bool,  # noqa: C901 (one case per kind)
                fraction: bool = False):
    """A function ``(value, label) -> None`` that refuses what ``hint`` does not describe
    (``fraction``: its floats lie in [0, 1])."""
    import typing

    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any or hint is object:
        return lambda value, label: None
    if origin in (typing.Union, types.UnionType):
        inner = [_type_check(a, nan_ok, signed, positive, fraction) for a in args if a is not type(None)]
        wanted = " or ".join(_describe_hint(a) for a in args)

        def union(value: object, label: str) -> None:
            if value is None and type(None) in args:
                return
            for check in inner:
                try:
                    return check(value, label)
                except (TypeError, ValueError):
                    pass
            if len(inner) == 1:  # its own message (with its range), saying None would do too
                try:
                    inner[0](value, label)
                except (TypeError, ValueError) as err:
                    raise type(err)(_or_none(str(err), label) if type(None) in args else str(err)) from None
            raise TypeError(f"{label} must be {wanted}, got {type(value).__name__} {shown(value, 60)}")
        return union
    if origin is typing.Literal:
        def literal(value: object, label: str) -> None:
            if type(value) is not str or value not in args:
                raise ValueError(f"{label} must be one of {', '.join(map(repr, args))}, got "
                                 f"{type(value).__name__} {shown(value, 60)}")
        return literal
    if hint is int:
        low = 1 if positive else 0
        return lambda value, label: check_int(value, label, minimum=low)
    if hint is float:
        def real(value: object, label: str) -> None:
            if type(value) is not float and not is_real(value):
                raise TypeError(f"{label} must be a real number, got {type(value).__name__} "
                                f"{shown(value, 60)}")
            _to_float(value, label, "a real number")  # 10**400: no float holds it (battery 27)
            if nan_ok and not math.isfinite(value):
                return
            if not math.isfinite(value) or (not signed and value < 0) or (positive and value <= 0):
                bound = " > 0" if positive else "" if signed else " >= 0"
                raise ValueError(f"{label} must be a finite number{bound}, got {shown(value)}")
            if fraction and not 0 <= value <= 1:
                raise ValueError(f"{label} must be a fraction in [0, 1], got {shown(value)}")
        return real
    if hint is bool:
        return lambda value, label: check_flag(value, label) and None
    if origin in (list, tuple):
        fixed = origin is tuple and not (len(args) == 2 and args[1] is Ellipsis)
        items = [_type_check(a, nan_ok, signed, positive, fraction) for a in args] if fixed else \
            [_type_check(args[0] if args else typing.Any, nan_ok, signed, positive, fraction)]
        wanted = _describe_hint(hint)

        def sequence(value: object, label: str) -> None:
            if type(value) not in (list, tuple) and isinstance(value, (list, tuple)):  # a subclass: its
                value = items_of(value, label, wanted)  # len() may raise (battery 30), named here
            if not isinstance(value, (list, tuple)) or (fixed and len(value) != len(items)):
                raise TypeError(f"{label} must be {wanted}, got {type(value).__name__} {shown(value, 60)}")
            for i, item in enumerate(value):
                check = items[i if fixed else 0]
                try:
                    check(item, label)
                except (TypeError, ValueError):  # again, naming the item (no label built per item)
                    check(item, f"{label}[{i}]")
        return sequence
    if origin is dict:
        key_check, value_check = (_type_check(a, nan_ok, signed, positive, fraction)
                                  for a in args or (object, object))

        def mapping(value: object, label: str) -> None:
            if not isinstance(value, dict):
                raise TypeError(f"{label} must be {_describe_hint(hint)}, got {type(value).__name__} "
                                f"{shown(value, 60)}")
            for key, item in value.items():
                key_check(key, f"{label} key {shown(key, 40)}")
                value_check(item, f"{label}[{shown(key, 40)}]")
        return mapping
    if isinstance(hint, type):
        if hint is str:
            def text(value: object, label: str) -> None:
                if type(value) is not str:
                    raise TypeError(f"{label} must be a str, got {type(value).__name__} {shown(value, 60)}")
            return text

        def instance(value: object, label: str) -> None:
            if not isinstance(value, hint):
                raise TypeError(f"{label} must be {_describe_hint(hint)}, got {type(value).__name__} "
                                f"{shown(value, 60)}")
        return instance
    raise TypeError(f"check_record cannot check the annotation {shown(hint)}")  # a new kind: add a case


def _or_none(message: str, label: str) -> str:
    """A check's message about ``label`` itself (``"X must be an int >= 0, got -3"``), saying that
    None is allowed too (``"... >= 0 or None, got -3"``); a message about an item is left as it is."""
    head = f"{label} must be "
    if message.startswith(head) and ", got " in message:
        return message.replace(", got ", " or None, got ", 1)
    return message


def _describe_hint(hint: object, top: bool = True) -> str:
    """``list[int]`` -> ``"a list of int"``, ``list[Tensor | None]`` -> ``"a list of (Tensor or
    None)"``: an annotation in words, for messages."""
    import typing

    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is type(None):
        return "None"
    if origin in (typing.Union, types.UnionType):
        words = " or ".join(_describe_hint(a, top) for a in args)
        return words if top else f"({words})"
    if origin is typing.Literal:
        return "one of " + ", ".join(map(repr, args))
    if origin in (list, tuple) and args:
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            words = f"a tuple ({', '.join(_describe_hint(a, False) for a in args)})"
        else:
            words = f"a list of {_describe_hint(args[0], False)}"
    elif origin is dict and args:
        words = f"a dict {_describe_hint(args[0], False)} -> {_describe_hint(args[1], False)}"
    else:
        words = getattr(hint, "__name__", str(hint))
        return (("an " if words[0] in "aeiouAEIOU" else "a ") + words) if top else words
    return words if top else f"({words})"


@_checks_name
def check_model_holds_values(model: torch.nn.Module, name: str = "model") -> None:
    """``model``'s parameters hold numbers: a model on the meta device (shapes without values,
    e.g. built under ``torch.device("meta")``) is a ValueError naming ``name``, before a value is
    read from it deep inside torch (``.item()``, a device mismatch). Anything but a
    ``torch.nn.Module`` is a TypeError naming ``name`` and what arrived."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"{name} must be a torch.nn.Module (a model), got {type(model).__name__} "
                        f"{shown(model, 60)}")
    for param_name, param in model.named_parameters():
        if param.is_meta:
            raise ValueError(f"{name} is on the meta device (shapes without values; its parameter "
                             f"{param_name} has shape {describe_shape(param)}): build or load it on 'cpu' "
                             "or 'cuda' first, e.g. model.to_empty(device='cpu') and then load its weights")


def check_weights_finite(model: torch.nn.Module, why: str) -> None:
    """``model``'s parameters hold finite numbers: else a ValueError naming the first parameter
    holding NaN or infinity, ending with ``why`` (what a non-finite weight does to the caller's
    result). One pass over the weights. Used by training and path patching (battery 30: a NaN
    weight was blamed on the learning rate, or on the caller's own inputs)."""
    for param_name, param in model.named_parameters():
        check_finite(param, f"model's weights ({param_name})", why)
