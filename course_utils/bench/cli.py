"""``python -m course_utils.bench <subcommand> [options]``: every benchmark of the course.

Subcommands: ``mha`` (lesson 4's four versions), ``gqa`` (decode steps, lesson 7), ``memory``
(each lesson's time and peak memory) and ``train`` (the tiny models' training time).

Every option is checked when the command line is parsed, before any benchmark runs: the
argparse types below turn a bad value into a usage error naming the option, what it expects
and what arrived (``--shapes 0x0``, ``--timeout -5``), and the command exits with status 2.
A subcommand's integer options use :func:`positive_int` or :func:`non_negative_int`, never a
bare ``int`` (a test holds every subcommand to that).
"""

import argparse
import importlib
from pathlib import Path

__all__ = ["SUBCOMMANDS", "main", "build_parser", "positive_int", "non_negative_int",
           "batch_by_context", "notebook_file", "device_name"]

#: Modules that each add one subcommand with ``add_bench_parser(subparsers)``, imported when the
#: command line runs.
SUBCOMMANDS: tuple[str, ...] = ("course_utils.bench.mha_speed", "course_utils.bench.gqa_speed",
                                "course_utils.bench.memory", "course_utils.bench.train_speed")


def _whole_number(text: str, wanted: str) -> int:
    try:
        return int(text.strip().replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}") from None


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1 (a count, a size, seconds)."""
    value = _whole_number(text, "a whole number >= 1")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def thread_count(text: str) -> int:
    """An argparse type: a thread count, 1..MAX_THREADS (256, or the CPU count where larger)."""
    from ..attention.validation import MAX_THREADS

    value = positive_int(text)
    if value > MAX_THREADS:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_THREADS} threads, got {text!r}")
    return value


def layer_count(text: str) -> int:
    """An argparse type: a benchmark model's number of layers, 1..1024 (each layer's weights and
    caches are allocated, so a mistyped 10**12 would hang or exhaust memory)."""
    value = positive_int(text)
    if value > 1024:
        raise argparse.ArgumentTypeError(f"expected at most 1024 layers, got {text!r}")
    return value


def device_name(text: str) -> str:
    """An argparse type: a device this machine has, ``cpu``, ``cuda`` or ``cuda:N`` (``mps`` on a
    Mac that has it); returned as torch spells it. Refused when parsed: a misspelt name (which
    torch would report as a traceback after the benchmark started), a GPU that is not here,
    and ``meta``, whose tensors hold no numbers (its timings would be meaningless ratios)."""
    from ..attention.validation import check_device  # imports torch: only when a --device is given

    try:
        return str(check_device(text.strip(), "--device"))
    except (TypeError, ValueError) as err:  # says what was expected and what arrived
        raise argparse.ArgumentTypeError(str(err)) from None


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number >= 0 (a seed)."""
    value = _whole_number(text, "a whole number >= 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def batch_by_context(text: str) -> tuple[int, int]:
    """An argparse type: ``BATCHxCONTEXT`` such as ``1x4096``, both whole numbers >= 1."""
    batch, sep, context = text.lower().partition("x")
    example = "a shape is BATCHxCONTEXT with both >= 1, e.g. 1x4096"
    if not sep:
        raise argparse.ArgumentTypeError(f"{example}; got {text!r}")
    try:
        return positive_int(batch), positive_int(context)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{example}; got {text!r}") from None


def notebook_file(text: str) -> str:
    """An argparse type: an existing ``.ipynb`` file (checked before the first notebook runs)."""
    path = Path(text)
    if path.suffix != ".ipynb":
        raise argparse.ArgumentTypeError(f"expected a notebook file (.ipynb), got {text!r}")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no notebook file {text!r} (relative to {Path.cwd()})")
    return text


def build_parser() -> argparse.ArgumentParser:
    """The parser with every subcommand registered."""
    parser = argparse.ArgumentParser(prog="python -m course_utils.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = parser.add_subparsers(dest="which", required=True)
    for module in SUBCOMMANDS:
        importlib.import_module(module).add_bench_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> None:
    """``python -m course_utils.bench <subcommand> [options]``; see ``--help``."""
    args = build_parser().parse_args(argv)
    args.run(args)
