"""``python -m course_utils.bench <subcommand> [options]``: every benchmark of the course.

Subcommands: ``mha`` (lesson 4's four versions), ``gqa`` (decode steps, lesson 7), ``memory``
(each lesson's time and peak memory) and ``train`` (the tiny models' training time).

Every option is checked when the command line is parsed, before any benchmark runs: the
argparse types below turn a bad value into a usage error naming the option, what it expects
and what arrived (``--shapes 0x0``, ``--timeout -5``), and the command exits with status 2.
A subcommand whose options together ask for more memory than the machine has (``gqa --shapes
1024x65536``) sets ``check`` (``set_defaults(check=...)``), run once they are parsed, the same way.
A subcommand's integer options use :func:`positive_int`, :func:`non_negative_int` or a type
built on them (:func:`seed_number`, ...), never a bare ``int`` (a test holds every subcommand to that).
"""

import argparse
import importlib
import re
from collections.abc import Callable

from .. import cli

__all__ = ["SUBCOMMANDS", "main", "build_parser", "positive_int", "non_negative_int",
           "seed_number", "batch_by_context", "device_name", "Distinct"]

#: Modules that each add one subcommand with ``add_bench_parser(subparsers)``, imported when the
#: command line runs.
SUBCOMMANDS: tuple[str, ...] = ("course_utils.bench.mha_speed", "course_utils.bench.gqa_speed",
                                "course_utils.bench.memory", "course_utils.bench.train_speed")


def check_text(text: object, what: str) -> str:
    """``text`` is the str argparse hands to a type function (``what`` names the type for the
    message); a type function called by hand with an int or None says so instead of failing on
    ``.strip()``."""
    if not isinstance(text, str):
        raise TypeError(f"{what} is an argparse type: it takes the option's text (a str, as typed), got "
                        f"{type(text).__name__} {cli.shown(text, 60)}")
    return text


def not_blank(text: object, wanted: str) -> object:
    """A str ``text`` (an option's text) holds more than white space; else a usage error saying
    what was ``wanted`` and that an empty word arrived (a quoted shell variable that was empty,
    ``--device=``): ``''`` and ``' '`` name no file or device. Anything else is returned as it is,
    for the type's own check to name."""
    if isinstance(text, str) and not text.strip():
        raise argparse.ArgumentTypeError(f"expected {wanted}, got an empty word {cli.shown(text)}")
    return text


def check_subparsers(subparsers: object, command: str) -> None:
    """``subparsers`` is what ``parser.add_subparsers()`` returned (where ``command`` is added)."""
    if not isinstance(subparsers, argparse._SubParsersAction):
        raise TypeError(f"subparsers must be what argparse's parser.add_subparsers() returns (to add the "
                        f"{cli.shown(command)} subcommand to), got {type(subparsers).__name__} "
                        f"{cli.shown(subparsers, 60)}")


def _whole_number(text: str, wanted: str) -> int:
    try:
        return int(text.strip().replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {wanted}, got {cli.shown(text)}") from None


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1 (a count, a size, seconds)."""
    check_text(text, "positive_int")
    value = _whole_number(text, "a whole number >= 1")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {cli.shown(text)}")
    return value


def thread_count(text: str) -> int:
    """An argparse type: a thread count, 1..MAX_THREADS (256, or the CPU count where larger)."""
    from ..attention.validation import MAX_THREADS

    value = positive_int(text)
    if value > MAX_THREADS:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_THREADS} threads, got {cli.shown(text)}")
    return value


def repeat_count(text: str) -> int:
    """An argparse type: how many times a benchmark repeats, 1..10,000 (each repeat runs every
    method once, so a mistyped 10**30 would run until killed)."""
    from .timing import MAX_REPEATS

    value = positive_int(text)
    if value > MAX_REPEATS:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_REPEATS:,} repeats, got {cli.shown(text)}")
    return value


def step_count(text: str) -> int:
    """An argparse type: how many training steps, 1..MAX_STEPS (100,000; the course's runs take
    500-800), the bound ``TrainConfig`` holds every run to, so a mistyped 10**12 is refused when
    parsed instead of training until killed."""
    from ..model.train import MAX_STEPS

    value = positive_int(text)
    if value > MAX_STEPS:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_STEPS:,} steps, got {cli.shown(text)}")
    return value


MAX_SECONDS = 7 * 24 * 3600


def seconds(text: str) -> int:
    """An argparse type: a time limit in whole seconds, 1..MAX_SECONDS (a week)."""
    value = positive_int(text)
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_SECONDS:,} seconds (a week), got "
                                         f"{cli.shown(text)}")
    return value


def layer_count(text: str) -> int:
    """An argparse type: a benchmark model's number of layers, 1..1024 (each layer's weights and
    caches are allocated, so a mistyped 10**12 would hang or exhaust memory)."""
    value = positive_int(text)
    if value > 1024:
        raise argparse.ArgumentTypeError(f"expected at most 1024 layers, got {cli.shown(text)}")
    return value


def device_name(text: str) -> str:
    """An argparse type: a device this machine has, ``cpu``, ``cuda`` or ``cuda:N`` (``mps`` on a
    Mac that has it); returned as torch spells it. Refused when parsed: a misspelt name (which
    torch would report as a traceback after the benchmark started), a GPU that is not here,
    and ``meta``, whose tensors hold no numbers (its timings would be meaningless ratios)."""
    from ..attention.validation import check_device  # imports torch: only when a --device is given

    not_blank(check_text(text, "device_name"), "a device such as 'cpu', 'cuda' or 'cuda:0'")
    try:
        return str(check_device(text.strip(), "--device"))
    except (TypeError, ValueError) as err:  # says what was expected and what arrived
        raise argparse.ArgumentTypeError(str(err)) from None


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number >= 0 (a seed)."""
    check_text(text, "non_negative_int")
    value = _whole_number(text, "a whole number >= 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {cli.shown(text)}")
    return value


def seed_number(text: str) -> int:
    """An argparse type: a seed, a whole number in 0..2**64-1 (what ``torch.manual_seed`` takes,
    the range ``train --seed`` is held to), so a mistyped ``2**70`` is refused when parsed rather
    than by a traceback from inside the run."""
    from ..env import check_seed

    check_text(text, "seed_number")
    try:
        return check_seed(non_negative_int(text))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected a seed in 0..2**64-1, got {cli.shown(text)} "
                                         f"({err})") from None


#: The longest context and the largest batch the benchmarks take: their KV caches are allocated
#: whole, so a mistyped 99999999999 would ask for terabytes (refused when parsed instead).
MAX_CONTEXT = 65_536
MAX_BATCH = 1024


def context_length(text: str) -> int:
    """An argparse type: a context length in tokens, 1..MAX_CONTEXT."""
    value = positive_int(text)
    if value > MAX_CONTEXT:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_CONTEXT} tokens (the KV cache is allocated "
                                         f"whole), got {cli.shown(text)}")
    return value


def batch_by_context(text: str) -> tuple[int, int]:
    """An argparse type: ``BATCHxCONTEXT`` such as ``1x4096``, BATCH in 1..MAX_BATCH and CONTEXT
    in 1..MAX_CONTEXT."""
    batch, sep, context = check_text(text, "batch_by_context").lower().partition("x")
    example = (f"a shape is BATCHxCONTEXT with BATCH in 1..{MAX_BATCH} and CONTEXT in 1..{MAX_CONTEXT}, "
               "e.g. 1x4096")
    if not sep:
        raise argparse.ArgumentTypeError(f"{example}; got {cli.shown(text)}")
    try:
        shape = positive_int(batch), positive_int(context)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{example}; got {cli.shown(text)}") from None
    if shape[0] > MAX_BATCH or shape[1] > MAX_CONTEXT:
        raise argparse.ArgumentTypeError(f"{example} (the KV cache is allocated whole); got "
                                         f"{cli.shown(text)}")
    return shape


class Distinct(argparse.Action):
    """An argparse action for a list option whose values must differ (``--seeds 0 0`` would
    train the same run twice and take its median as if of two): a repeat is a usage error naming
    the option, refused when parsed, before anything is printed. ``key=`` (given to
    ``add_argument``) says when two values are the same (``os.path.realpath`` for files, so
    ``a.ipynb`` and ``./a.ipynb`` are one notebook); a repeat is shown as it was typed."""

    def __init__(self, *args, key: Callable[[object], object] | None = None, **kwargs) -> None:
        if key is not None and not callable(key):  # named before argparse's own arguments are checked
            raise TypeError(f"Distinct's key must be a function of one value (such as os.path.realpath) "
                            f"or None, got {type(key).__name__} {cli.shown(key, 60)}")
        super().__init__(*args, **kwargs)
        self.key = key or (lambda value: value)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        keys = [self.key(v) for v in values]
        repeated = [v for i, v in enumerate(values) if keys[i] in keys[:i]]
        if repeated:
            shown = ", ".join(dict.fromkeys(_shown(v) for v in repeated))
            raise argparse.ArgumentError(self, f"expected distinct values, got {shown} more than once")
        setattr(namespace, self.dest, values)


def _shown(value: object) -> str:
    """A value as it was typed: ``1x4096`` for a shape, ``0`` for a seed (a value of another
    option's type whose str raises: its repr, or its type, through cli.shown)."""
    try:
        return "x".join(map(str, value)) if isinstance(value, tuple) else str(value)
    except Exception:  # noqa: BLE001 - its str is the broken part
        return cli.shown(value, 60)


def build_parser() -> argparse.ArgumentParser:
    """The parser with every subcommand registered."""
    parser = cli.ArgumentParser(prog="python -m course_utils.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = parser.add_subparsers(dest="which", required=True)
    for module in SUBCOMMANDS:
        importlib.import_module(module).add_bench_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int | None:
    """``python -m course_utils.bench <subcommand> [options]``; see ``--help``. Returns the
    subcommand's exit status (None: 0)."""
    parser = build_parser()
    argv = cli.words(argv)
    names = _subcommand_names(parser)
    if not argv or (argv[0] not in names and argv[0] not in ("-h", "--help")):
        # argparse names an unknown first word by the subparsers' dest ("required: which")
        parser.error("choose a subcommand: " + ", ".join(names)
                     + (f"; got {_word(argv[0])}" if argv else "")
                     + " (python -m course_utils.bench SUBCOMMAND --help shows its options)")
    # argparse reads "-1x1024" as an unknown option and reports a missing value instead; a
    # negative shape is refused here with the rule it breaks
    for text in argv:
        if re.fullmatch(r"-[\d.]+x-?[\d.]*", text, flags=re.IGNORECASE):
            try:
                batch_by_context(text)
            except argparse.ArgumentTypeError as err:
                parser.error(f"--shapes: {err}")
    _refuse_stray_blank_words(parser, argv)
    args = parser.parse_args(argv)
    check = getattr(args, "check", None)  # what no single option's type can see: the memory they ask for
    if check is not None:
        try:
            check(args)
        except ValueError as err:
            parser.error(str(err))
    return args.run(args)  # None, or an exit status (memory: 1 when a notebook failed)


def _word(text: str) -> str:
    """A word of the command line as it arrived, saying so when it is empty or white space only
    (``''`` would otherwise read as a typo of nothing)."""
    return f"an empty word {cli.shown(text)}" if not text.strip() else cli.shown(text)


def _refuse_stray_blank_words(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """An empty or white-space word that no option or argument of the subcommand takes (``mha
    ''``) is refused naming it as one; argparse's own "unrecognized arguments: " shows nothing.
    Only a command line holding such a word is parsed here first (a blank value an option's type
    refuses is named by that type, as usual)."""
    if all(text.strip() for text in argv[1:]):
        return
    _, extras = parser.parse_known_args(argv)
    blank = [text for text in extras if not text.strip()]
    if blank:
        parser.error(f"{argv[0]} takes no such argument: got {', '.join(map(_word, blank))} (a quoted "
                     f"variable that was empty?); python -m course_utils.bench {argv[0]} --help shows "
                     "its options")


def _subcommand_names(parser: argparse.ArgumentParser) -> list[str]:
    """The subcommands registered on ``parser``, in order."""
    return [name for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name in action.choices]
