"""Where a benchmark's result goes (bench/report.py): never over a result
already kept."""

from bench.report import unused_name


def test_a_result_name_already_taken_gets_the_next_letter(tmp_path):
    assert unused_name("stack-200-2026-11-27", tmp_path) == "stack-200-2026-11-27"
    (tmp_path / "stack-200-2026-11-27.md").write_text("kept")
    (tmp_path / "stack-200-2026-11-27-b.json").write_text("kept")
    assert unused_name("stack-200-2026-11-27", tmp_path) == "stack-200-2026-11-27-c"
    assert unused_name("throughput-2026-11-27", tmp_path) == "throughput-2026-11-27"
