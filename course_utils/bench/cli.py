"""``python -m course_utils.bench <subcommand> [options]``: every benchmark of the course.

Subcommands: ``mha`` (lesson 4's four versions), ``gqa`` (decode steps, lesson 7), ``memory``
(each lesson's time and peak memory) and ``train`` (the tiny models' training time).
"""

import argparse
import importlib

__all__ = ["SUBCOMMANDS", "main"]

#: Modules that each add one subcommand with ``add_bench_parser(subparsers)``, imported when the
#: command line runs.
SUBCOMMANDS: tuple[str, ...] = ("course_utils.bench.mha_speed", "course_utils.bench.gqa_speed",
                                "course_utils.bench.memory", "course_utils.bench.train_speed")


def main(argv: list[str] | None = None) -> None:
    """``python -m course_utils.bench <subcommand> [options]``; see ``--help``."""
    parser = argparse.ArgumentParser(prog="python -m course_utils.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = parser.add_subparsers(dest="which", required=True)
    for module in SUBCOMMANDS:
        importlib.import_module(module).add_bench_parser(subparsers)
    args = parser.parse_args(argv)
    args.run(args)
