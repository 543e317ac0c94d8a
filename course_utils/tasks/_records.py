"""What the tasks' frozen records share: their list fields are kept as tuples, so a record
checked once (by :func:`~course_utils.attention.validation.check_record` in its
``__post_init__``) stays as it was checked."""
from __future__ import annotations

__all__ = ["check_increasing", "lists_to_tuples"]


def lists_to_tuples(record: object, *names: str) -> None:
    """Store each field of ``record`` named in ``names`` that holds a list as a tuple of the same
    items (``object.__setattr__``: the record is a frozen dataclass). Call it first in
    ``__post_init__``, before ``check_record``, so the check sees what is kept; anything but a
    list is left for ``check_record`` to name."""
    for name in names:
        value = getattr(record, name)
        if isinstance(value, list):
            object.__setattr__(record, name, tuple(value))


def check_increasing(steps: tuple[int, ...], name: str) -> None:
    """``steps`` strictly increase (a learning curve goes forward in time); else a ValueError
    naming ``name`` and the first pair out of order. (The rule of
    :class:`course_utils.model.train.History`'s steps; here because model imports tasks, so
    tasks cannot import model.)"""
    back = next((i for i in range(1, len(steps)) if steps[i] <= steps[i - 1]), None)
    if back is not None:
        raise ValueError(f"{name} must strictly increase (one entry per step, in order), got "
                         f"{name}[{back - 1}] = {steps[back - 1]} then {name}[{back}] = {steps[back]}")
