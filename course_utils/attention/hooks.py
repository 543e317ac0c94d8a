"""Hook points: named places on the forward path where an analysis reads or edits a tensor.

A :class:`HookPoint` is an identity module (the idea is TransformerLens's): the attention layer
passes ``q``, ``k``, ``v``, the attention pattern and every head's output ``z`` through one, and
each block passes its residual stream through others. With no hook added it returns its input,
so the model computes exactly what it computes without hook points.

Every hook has one signature, ``fn(tensor, hook) -> tensor or None``: ``hook`` is the
:class:`HookPoint` (``hook.name`` says where it sits, e.g. ``"blocks.0.attn.hook_z"``); a
returned tensor replaces the input (same shape, dtype and device, checked), ``None`` keeps it
(a hook that only records). :func:`hooks` adds hooks for the length of a ``with`` block and
:func:`run_with_cache` records tensors by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from torch import Tensor, nn

from .validation import check_callable, check_edited_heads, check_flag, shown

__all__ = ["HookFn", "HookPoint", "hook_points", "name_hook_points", "hooks", "run_with_cache"]

HookFn = Callable[[Tensor, "HookPoint"], "Tensor | None"]
Where = str | Callable[[str], bool]  # a hook point's name, or a test on names


class HookPoint(nn.Module):
    """``forward(x)`` returns ``x``, or what the hooks added with :meth:`add_hook` made of it
    (each in turn sees the previous one's result). ``x`` must be a tensor (of any dtype): a list
    or a number is a TypeError naming the hook point, not passed on as if it were one."""

    def __init__(self) -> None:
        super().__init__()
        self.name = ""  # where it sits, set by name_hook_points(): "blocks.0.attn.hook_q"
        self.fns: list[HookFn] = []

    def add_hook(self, fn: HookFn) -> Callable[[], None]:
        """Call ``fn(tensor, self)`` on every pass; returns a function that removes it again.
        ``fn`` must take those two positional arguments (checked here, where its signature can
        be read: a one-argument ``lambda t: ...`` is refused when added, not when it runs)."""
        check_callable(fn, "a hook", f"a function (tensor, hook) -> tensor or None (for "
                                     f"{self.name or 'this hook point'})", nargs=2)
        self.fns.append(fn)
        return lambda: self.fns.remove(fn) if fn in self.fns else None

    @property
    def has_hooks(self) -> bool:
        return bool(self.fns)

    def forward(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor):  # any tensor (ids too): the point passes it on unchanged
            raise TypeError(f"x (what the hook point {self.name or '(unnamed)'} passes on) must be a "
                            f"torch.Tensor, got {type(x).__name__} {shown(x, 60)}")
        for fn in list(self.fns):
            result = fn(x, self)
            if result is not None:
                x = check_edited_heads(result, x, f"the hook at {self.name or 'a hook point'}")
        return x

    def extra_repr(self) -> str:
        return self.name


def hook_points(module: nn.Module) -> dict[str, HookPoint]:
    """Every hook point inside ``module``, by its path from ``module``
    (``"blocks.1.attn.hook_pattern"`` from a model, ``"hook_pattern"`` from its layer)."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch nn.Module (a model or one of its layers), got "
                        f"{type(module).__name__}")
    return {name: m for name, m in module.named_modules() if isinstance(m, HookPoint)}


def name_hook_points(module: nn.Module) -> None:
    """Give every hook point inside ``module`` its path as ``hook.name`` (what a hook and an error
    message see): the outermost module (the model) does this once it is built."""
    for name, point in hook_points(module).items():
        point.name = name


def _matching(points: dict[str, HookPoint], where: Where, name: str = "names") -> dict[str, HookPoint]:
    """The hook points named ``where``, or whose name passes the test ``where``; ``name`` is the
    argument ``where`` came from, for the messages. A test must answer True or False: ``"yes"``,
    ``1`` or a ``re.Match`` would be taken as True without a word (wrap it in ``bool(...)``)."""
    _check_where(where, name)
    if callable(where):
        found = {point_name: p for point_name, p in points.items()
                 if check_flag(where(point_name), f"{name} (a test on hook point names), asked about "
                                                  f"{shown(point_name)},")}
    else:
        found = {where: points[where]} if isinstance(where, str) and where in points else {}
    if not found:
        what = f"named {shown(where)}" if isinstance(where, str) else "whose name passes the test given"
        raise ValueError(f"no hook point {what}; the module has {list(points)[:8]}"
                         + (" ..." if len(points) > 8 else ""))
    return found


def _check_where(where: object, name: str) -> None:
    """A hook point's name (str) or a test on names (a function name -> bool, of one argument: one
    of another arity is refused here, naming ``name``, not by Python when it is first asked). A
    module is callable but no test: called with a name, it would fail inside its forward, never
    naming ``name``."""
    if isinstance(where, nn.Module) or not (isinstance(where, str) or callable(where)):
        kind = " (a module is callable, but it is not a test on hook point names)" \
            if isinstance(where, nn.Module) else ""
        raise TypeError(f"{name} must be a hook point's name (str) or a function name -> bool, got "
                        f"{type(where).__name__} {shown(where, 60)}{kind}")
    if not isinstance(where, str):
        check_callable(where, name, "a hook point's name (str) or a function name -> bool", nargs=1)


def _check_fwd_hooks(fwd_hooks: object) -> None:
    """A list (or tuple) of ``(name or test, fn)`` pairs."""
    if not isinstance(fwd_hooks, list | tuple):
        raise TypeError(f"fwd_hooks must be a list of (name, fn) pairs, got {type(fwd_hooks).__name__} "
                        f"{shown(fwd_hooks, 60)}")
    for i, pair in enumerate(fwd_hooks):
        if not (isinstance(pair, list | tuple) and len(pair) == 2):
            raise TypeError(f"fwd_hooks[{i}] must be a pair (name, fn), got {type(pair).__name__} "
                            f"{shown(pair, 60)}")
        _check_where(pair[0], f"fwd_hooks[{i}][0]")  # the function is checked where it is added


@contextmanager
def hooks(module: nn.Module, fwd_hooks: Sequence[tuple[Where, HookFn]]) -> Iterator[None]:
    """Add each ``(name, fn)`` of ``fwd_hooks`` to ``module``'s hook point of that name (or to
    every point whose name passes ``name`` when it is a function) inside the ``with`` block; they
    are removed when it ends, also after an error."""
    points = hook_points(module)
    _check_fwd_hooks(fwd_hooks)
    removers = []
    try:
        for i, (where, fn) in enumerate(fwd_hooks):
            found = _matching(points, where, f"fwd_hooks[{i}][0]")
            removers += [point.add_hook(fn) for point in found.values()]
        yield
    finally:
        for remove in reversed(removers):
            remove()


def _check_inputs_fit(module: nn.Module, args: tuple, kwargs: dict) -> None:
    """``module(*args, **kwargs)`` can bind to ``module.forward`` (a signature Python cannot read passes)."""
    import inspect

    try:
        signature = inspect.signature(module.forward)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as error:
        raise TypeError(f"run_with_cache runs module(*args, **kwargs), but the inputs given do not fit "
                        f"{type(module).__name__}.forward{signature}: {error} (pass the module's inputs "
                        f"after it, e.g. run_with_cache(model, tokens))") from None


def run_with_cache(module: nn.Module, *args: object, names: Sequence[Where] | Where | None = None,
                   **kwargs: object) -> tuple[object, dict[str, Tensor]]:
    """``module(*args, **kwargs)`` and the tensors that passed its hook points, by name: all of
    them, those in ``names``, or those whose name passes ``names`` when it is a function. The
    inputs must fit ``module.forward`` (checked before any hook is added). A module with no hook
    point (``nn.Linear``, a model not built from the course's layers) is a ValueError naming
    ``module`` before it runs: there would be nothing to record."""
    points = hook_points(module)
    if not points:
        raise ValueError(f"module ({type(module).__name__}) has no hook point, so run_with_cache would "
                         f"record nothing: pass a course model or layer (e.g. a TinyTransformer or a "
                         f"MultiHeadAttention), which pass their tensors through hook points")
    _check_inputs_fit(module, args, kwargs)
    if names is None:
        wanted = list(points)
    elif callable(names) or isinstance(names, str):
        wanted = list(_matching(points, names))
    else:
        if not isinstance(names, list | tuple):
            raise TypeError(f"names must be None, a hook point's name, a function name -> bool or a list "
                            f"of names, got {type(names).__name__} {shown(names, 60)}")
        for i, where in enumerate(names):
            _check_where(where, f"names[{i}]")
        wanted = [name for i, where in enumerate(names) for name in _matching(points, where, f"names[{i}]")]
    cache: dict[str, Tensor] = {}

    def keep(name: str) -> HookFn:
        return lambda x, hook: cache.__setitem__(name, x)

    with hooks(module, [(name, keep(name)) for name in wanted]):
        out = module(*args, **kwargs)
    return out, cache
