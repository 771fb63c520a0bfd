"""benchmarks.results: results.md is results.json made readable, whatever the benchmark."""

from benchmarks.results import render_markdown


def test_results_markdown_has_the_stamps_a_heading_per_section_and_a_table_per_list_of_rows():
    results = {"command": "python -m benchmarks.x", "rate": 2.34567,
               "part": {"ratio": 1.5, "runs": [{"seed": 1, "f1": 0.9}, {"seed": 2}]}}
    lines = render_markdown(results, "T").splitlines()
    assert lines[:4] == ["# T", "", "command: `python -m benchmarks.x`  ", ""]
    assert "rate: 2.346  " in lines and "## part" in lines and "ratio: 1.5  " in lines
    table = lines.index("### runs") + 2
    assert lines[table:table + 4] == ["| seed | f1 |", "|---|---|", "| 1 | 0.9 |", "| 2 |  |"]
