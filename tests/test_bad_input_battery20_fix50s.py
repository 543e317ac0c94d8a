"""Battery 20a's bench cases (issue 38): read_test_report on JSON nested too deeply, clocks that
never advance or read NaN in interleaved_samples and make_read_probe, a last-level cache
override past 1 TiB, and an accuracy above 1 in the training table, each refused by name."""

from __future__ import annotations

from bad_input_cases import raises_naming

from course_utils.bench.memory import read_test_report


# -- O5: read_test_report let a RecursionError out of json.loads, naming no file --
def test_a_deeply_nested_test_report_is_refused_naming_the_file(tmp_path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    raises_naming(ValueError, [str(path), "per-test memory report", "nested too deeply"],
                  lambda: read_test_report(path))
