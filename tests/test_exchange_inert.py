"""The autograded notebook the formgrader shows carries nothing a browser would run (issue 34, C16)."""
import re

import nbformat
import pytest

from course_utils.exercises import autograde

PAYLOAD = ('Thanks!<img src="x" style="display:none" onerror="fetch(base_url+\'/api/grade/1\','
           '{method:\'PUT\'})"><script>alert(1)</script>[x](javascript:alert(2))')
TAG = re.compile(r"<\s*(img|script|iframe|svg|a|object|embed|style|link)\b", re.I)


def _hostile_notebook():
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    md = nbformat.v4.new_markdown_cell(PAYLOAD)
    md.attachments = {"a.png": {"image/png": "AAAA"}}
    raw = nbformat.v4.new_raw_cell(PAYLOAD, metadata={"raw_mimetype": "text/html"})
    code = nbformat.v4.new_code_cell("x = 1", outputs=[
        nbformat.v4.new_output("display_data", data={"text/html": PAYLOAD, "text/plain": "x"}),
        nbformat.v4.new_output("stream", name="stdout", text=PAYLOAD)])
    test = nbformat.v4.new_code_cell("lesson07.check_x(f)", metadata={
        "nbgrader": {"grade": True, "solution": False, "grade_id": "lesson07_x_test", "points": 1}})
    test.outputs = [nbformat.v4.new_output("stream", name="stdout", text="Graded outside the notebook: ok\n"),
                    nbformat.v4.new_output("display_data", data={"text/html": PAYLOAD})]
    nb.cells = [md, raw, code, test]
    return nb


def test_student_html_is_shown_as_text_and_only_the_verdict_output_is_kept():
    from nbconvert.filters import markdown2html

    nb = autograde.make_inert(_hostile_notebook())
    nbformat.validate(nb)
    assert [c.cell_type for c in nb.cells] == ["markdown", "markdown", "code", "code"]
    for cell in nb.cells[:2]:
        html = markdown2html(cell.source)
        assert not TAG.search(html), html
        assert "&lt;img" in html  # the student's text is still there, to read
        assert "attachments" not in cell
        assert "raw_mimetype" not in cell.metadata
    assert nb.cells[2].outputs == []
    assert [o.output_type for o in nb.cells[3].outputs] == ["stream"]
    assert "widgets" not in nb.metadata


def test_after_the_graders_own_escaping_the_text_shows_once_escaped():
    from nbconvert.filters import markdown2html

    nb = _hostile_notebook()
    autograde.neutralise_html(nb)
    html = markdown2html(autograde.make_inert(nb).cells[0].source)
    assert not TAG.search(html) and "&lt;img" in html and "&amp;lt;" not in html


def test_the_whole_exported_page_runs_no_student_script():
    from nbconvert import HTMLExporter

    html, _ = HTMLExporter().from_notebook_node(autograde.make_inert(_hostile_notebook()))
    assert '<img src="x"' not in html and "<script>alert(1)" not in html
    assert 'href="javascript:' not in html
    assert html.count("&lt;img src=") == 2  # the markdown cell and the raw cell, as text


def test_make_inert_runs_last_after_the_grades_are_saved():
    pytest.importorskip("nbgrader")

    class Config(dict):
        def __getattr__(self, key):
            return self.setdefault(key, type(self)())

        def __setattr__(self, key, value):
            self[key] = value

    c = Config()
    autograde.configure(c, ".")
    names = [p.__name__ for p in c["Autograde"]["autograde_preprocessors"]]
    assert names[-1] == "MakeInert"
    assert names.index("SaveAutoGrades") < names.index("MakeInert")
