"""``python -m course_utils.bench ...``: see :mod:`course_utils.bench.cli`."""

from .cli import main

main()
