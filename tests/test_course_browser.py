"""Every lesson, run in JupyterLab in a real (headless) Chromium, looks right to a learner.

For each lesson: JupyterLab opens it without marking it modified, Run All runs every cell
without an error, every figure is a loaded image, every ipywidget renders as a widget and
answers a change of one of its controls. Screenshots go to ``artifacts/browser/``
(ignored by git). Needs Debian's ``chromium`` and the ``playwright`` package (dev extra);
without them the tests are skipped. Only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import json
import os
import platform
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # minutes: run by .ci/run and `course.py test --all`

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path(os.environ.get("COURSE_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = ROOT / "artifacts" / "browser"
LESSONS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
# Every blank student copy, the one a learner opens (Run All must reach the end, each check
# printing "not attempted yet" instead of stopping the run), and one solved copy where it runs
# anything its student copy does not (below). The solved copies' contents are checked by nbval;
# their figures and widgets are the student copies', made from the same source, so running all
# of them here again would only cost CI minutes.
SOLVED_SAMPLE = "00_start_here.ipynb"


def _what_a_run_does(path: Path) -> tuple:
    """The code cells (source and metadata) and the notebook's metadata: what Run All runs and
    how JupyterLab opens it. The first markdown cell's Colab/Binder links differ by folder."""
    nb = json.loads(path.read_text())
    code = [(c["source"], c.get("metadata", {})) for c in nb["cells"] if c["cell_type"] == "code"]
    return code, nb["metadata"]


# The solved sample runs only while it differs in that from its student copy: lesson 00 has no
# exercise, so today its student copy's run (student/00_start_here.ipynb) is the very same run.
_SAME_RUN = (_what_a_run_does(ROOT / "notebooks" / SOLVED_SAMPLE)
             == _what_a_run_does(ROOT / "student" / SOLVED_SAMPLE))
COPIES = [("notebooks", SOLVED_SAMPLE)] * (not _SAME_RUN) + [("student", lesson) for lesson in LESSONS]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
RUN_TIMEOUT_S = 420
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
LAB_SETTINGS = {  # no news or update checks (no network), every cell rendered (no windowing)
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
        {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}

try:
    from playwright.sync_api import sync_playwright
except ImportError:
    sync_playwright = None

if not CHROMIUM.exists() or sync_playwright is None:
    pytest.skip("browser tests skipped: need Debian's chromium (apt-get install chromium) and "
                "playwright (pip install -e '.[dev]')", allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab on 127.0.0.1 (random free port, random token), serving a copy of the lessons."""
    base = tmp_path_factory.mktemp("lab")
    for folder in ("notebooks", "student"):
        shutil.copytree(ROOT / folder, base / "root" / folder,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    for rel, value in LAB_SETTINGS.items():
        (base / "settings" / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / "settings" / rel).write_text(json.dumps(value))
    port, token = _free_port(), secrets.token_hex(24)
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}  # inline figures in the kernel
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               PYTHONHASHSEED="0", JUPYTER_CONFIG_DIR=str(base / "config"),
               JUPYTERLAB_SETTINGS_DIR=str(base / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(base / "workspaces"))
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={base / 'root'}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log = open(base / "server.log", "w")  # noqa: SIM115 - closed at teardown
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2):
                break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail("JupyterLab did not start:\n" + (base / "server.log").read_text()[-3000:])
            time.sleep(0.5)
    yield {"url": url, "token": token, "root": base / "root", "base": base}
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
    log.close()


@pytest.fixture(scope="module")
def browser(lab):
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(lab["base"] / "chromium-profile"), executable_path=str(CHROMIUM), headless=True,
            args=CHROMIUM_FLAGS, viewport={"width": 1280, "height": 900})
        try:
            yield context
        finally:
            context.close()


PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"
PROMPTS_JS = f"""() => Array.from(document.querySelectorAll('{PANEL} .jp-CodeCell'))
    .map(c => (c.querySelector('.jp-InputPrompt') || {{}}).innerText || '')"""
IMAGES_JS = f"""() => Array.from(document.querySelectorAll('{PANEL} .jp-OutputArea-output img'))
    .map(img => ({{complete: img.complete, width: img.naturalWidth}}))"""


KERNEL_IDLE_JS = """() => Array.from(document.querySelectorAll('.jp-StatusBar-TextItem'))
    .some(e => /\\| Idle$/.test(e.innerText.trim()))"""
MARK_WIDGETS_JS = """() => {
    const outs = Array.from(document.querySelectorAll(
        '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell .jp-OutputArea-output'))
        .filter(o => !o.parentElement.closest('.jp-OutputArea-output'))   // top-level outputs only
        .filter(o => o.querySelector('.jupyter-widgets'));
    outs.forEach((o, k) => {
        o.setAttribute('data-course-widget', String(k));
        o.closest('.jp-OutputArea').setAttribute('data-course-widget-cell', String(k));
    });
    return outs.length;
}"""


def _wait_until_run(page) -> list[str]:
    """Poll the input prompts until every code cell shows [n], or nothing is left running."""
    deadline, idle_since = time.monotonic() + RUN_TIMEOUT_S, None
    while time.monotonic() < deadline:
        prompts = page.evaluate(PROMPTS_JS)
        if prompts and all(re.search(r"\[\d+\]", p) for p in prompts):
            return prompts
        if any("*" in p for p in prompts):
            idle_since = None
        elif idle_since is None:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > 15:  # stopped early (an error stops Run All)
            return prompts
        time.sleep(1)
    return page.evaluate(PROMPTS_JS)


def _output_state(output) -> str:
    """The text and images of a cell's outputs, as one string (images by a hash of their data)."""
    return output.evaluate("""el => el.innerText + '|' + Array.from(el.querySelectorAll('img'))
        .map(i => { let h = 0; for (let j = 0; j < i.src.length; j++) h = (h * 31 + i.src.charCodeAt(j)) | 0;
                    return i.src.length + ':' + h; }).join(',')""")


def _poke(widget) -> str | None:
    """Change one control of a rendered widget; say which, or None when it has none."""
    select = widget.locator("select")
    if select.count():
        first = select.first
        options = first.locator("option").all_inner_texts()
        current = first.evaluate("s => s.options[s.selectedIndex].text")
        other = next(o for o in options if o != current)
        first.select_option(label=other)
        return f"dropdown {current} -> {other}"
    handle = widget.locator(".noUi-handle")
    if handle.count():
        handle.first.focus()
        handle.first.press("ArrowRight")
        return "slider +1 step"
    return None


@pytest.mark.parametrize("folder,lesson", COPIES, ids=[f"{f}/{n}" for f, n in COPIES])
def test_lesson_in_the_browser(lab, browser, folder, lesson):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    stem = lesson.removesuffix(".ipynb") + ("-student" if folder == "student" else "")
    page = browser.new_page()
    page.goto(f"{lab['url']}/lab/workspaces/{stem}/tree/{folder}/{lesson}?reset&token={lab['token']}")
    page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell >> nth=0", timeout=90_000)
    page.wait_for_function(KERNEL_IDLE_JS, timeout=120_000)  # connected, kernel info received
    time.sleep(1.5)
    page.screenshot(path=str(ARTIFACTS / f"{stem}-opened.png"))
    stored = json.loads((ROOT / folder / lesson).read_text())["metadata"].get("language_info", {})
    if stored.get("version") == platform.python_version():  # else JupyterLab rewrites it: dirty
        assert page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.jp-mod-dirty").count() == 0, \
            "JupyterLab marks the lesson modified right after opening it (run notebook_tools.py upgrade)"

    page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-item", has_text=re.compile(r"^Run All Cells")).first.click()
    prompts = _wait_until_run(page)
    page.keyboard.press("Control+s")
    page.wait_for_function("() => !document.querySelector('.lm-DockPanel-tabBar .jp-mod-dirty')",
                           timeout=30_000)
    page.screenshot(path=str(ARTIFACTS / f"{stem}-ran.png"))
    saved = json.loads((lab["root"] / folder / lesson).read_text())
    code = [c for c in saved["cells"] if c["cell_type"] == "code"]
    errors = [(i, o.get("ename"), o.get("evalue")) for i, c in enumerate(code)
              for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert not errors, f"error output in code cells {errors}"
    not_run = [i for i, c in enumerate(code) if c.get("execution_count") is None]
    assert not not_run and all(re.search(r"\[\d+\]", p) for p in prompts), f"code cells not run: {not_run}"
    assert len(prompts) == len(code), f"{len(code)} code cells saved, {len(prompts)} shown"
    if folder == "student":  # each check answered with its message, not an exception
        checks = [c for c in code if c["metadata"].get("nbgrader", {}).get("grade")
                  and not c["metadata"].get("nbgrader", {}).get("solution")]  # the locked test cells
        quiet = [i for i, c in enumerate(checks)
                 if "not attempted yet" not in json.dumps(c.get("outputs", []))]
        assert not quiet, f"checks that did not print 'not attempted yet': {quiet}"

    n_png = sum("image/png" in o.get("data", {}) for c in code for o in c.get("outputs", []))
    images = page.evaluate(IMAGES_JS)
    assert len(images) >= n_png, f"{n_png} figures saved, {len(images)} images on the page"
    assert all(img["complete"] and img["width"] > 0 for img in images), f"an image did not load: {images}"

    n_widgets = sum(WIDGET_MIME in o.get("data", {}) for c in code for o in c.get("outputs", []))
    outputs_text = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea").all_inner_texts()
    assert not any("Error displaying widget" in t or "Loading widget" in t for t in outputs_text), \
        "a widget did not render"
    rendered = page.evaluate(MARK_WIDGETS_JS)
    assert rendered == n_widgets, f"{n_widgets} widgets displayed, {rendered} rendered as widgets"
    for k in range(rendered):  # the controls may redraw their own output or the cell's figure
        widget, cell_outputs = (page.locator(f"[data-course-widget='{k}']"),
                                page.locator(f"[data-course-widget-cell='{k}']"))
        widget.scroll_into_view_if_needed()
        before = _output_state(cell_outputs)
        what = _poke(widget)
        assert what, f"widget {k} has no dropdown or slider to change"
        deadline = time.monotonic() + 60
        while _output_state(cell_outputs) == before and time.monotonic() < deadline:
            time.sleep(0.5)
        cell_outputs.screenshot(path=str(ARTIFACTS / f"{stem}-widget{k}.png"))
        assert _output_state(cell_outputs) != before, f"widget {k} did not respond to {what}"
    page.close()
