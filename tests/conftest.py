"""Give every exercise check its reference solution and slips back (they live in solutions/,
outside the package; the checks themselves grade against stored outputs), and record each
test's peak memory.

The memory record (Binder gives a whole server 2 GB, so every test process must stay under
it): before each test the process's peak resident set (``VmHWM``) is reset to its current
size, and after the test's setup, call and teardown it is read again. That peak, and the
largest child process waited for so far when a test raised it, go into
``artifacts/test_peak_rss.json`` (merged by test id, so the quick and the slow runs of
``.ci/run`` end up in one file). ``python -m course_utils.bench test-memory`` lists the
largest. Linux only; ``--no-peak-rss`` turns it off. It times nothing and asserts nothing.
"""

import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import solutions  # noqa: E402
from course_utils.bench.memory import TEST_REPORT, peak_rss_bytes, reset_peak_rss, rss_bytes  # noqa: E402

solutions.attach()

_KEY = "course_peak_rss"


def pytest_addoption(parser):
    parser.addoption("--no-peak-rss", action="store_true",
                     help="do not record each test's peak memory into " + str(TEST_REPORT))


def pytest_configure(config):
    config._course_peak_rss = {}  # test id -> record, filled in this process (or from workers)
    config._course_peak_rss_on = (not config.getoption("--no-peak-rss") and sys.platform.startswith("linux")
                                  and reset_peak_rss())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """Let pytest keep each test file as it rewrote it for its assert messages (its cache,
    tests/__pycache__, ignored by git), even under PYTHONDONTWRITEBYTECODE=1 as on CI. Without
    it every worker of every run rewrites every test file again: collecting tests/ took 13.9
    CPU-s per process, 7.0 with the cache (.ci/run's later steps and every rerun read it)."""
    if not isinstance(collector, pytest.Module):
        yield
        return
    before, sys.dont_write_bytecode = sys.dont_write_bytecode, False
    try:
        yield
    finally:
        sys.dont_write_bytecode = before


def _children_mb() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e3  # Linux: ru_maxrss in KiB


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    config = item.config
    if not config._course_peak_rss_on:
        yield
        return
    children_before = _children_mb()
    reset_peak_rss()
    size = rss_bytes()
    start = time.perf_counter()
    yield
    peak = peak_rss_bytes()
    if peak is None:
        return
    children = _children_mb()
    config._course_peak_rss[item.nodeid] = {
        "peak_mb": round(peak / 1e6, 1),
        "start_mb": None if size is None else round(size / 1e6, 1),
        "children_mb": round(children, 1) if children > children_before else None,
        "seconds": round(time.perf_counter() - start, 2),
    }


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):  # xdist's controller: a worker's records arrive
    node.config._course_peak_rss.update(getattr(node, "workeroutput", {}).get(_KEY, {}))


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if not config._course_peak_rss_on:
        return
    if hasattr(config, "workeroutput"):  # an xdist worker: hand the records to the controller
        config.workeroutput[_KEY] = config._course_peak_rss
        return
    if not config._course_peak_rss:
        return
    path = ROOT / TEST_REPORT
    tests = {}
    if path.is_file():
        try:
            tests = json.loads(path.read_text()).get("tests", {})
        except (ValueError, AttributeError):
            tests = {}
    tests.update(config._course_peak_rss)
    path.parent.mkdir(parents=True, exist_ok=True)
    report = {"about": "peak RSS of the test process while each test ran (VmHWM reset before it), "
                       "MB = 10**6 bytes; start_mb: its RSS when the test began; children_mb: the "
                       "largest child process so far, when this test raised it; written by "
                       "tests/conftest.py",
              "tests": dict(sorted(tests.items()))}
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(report, indent=1))
    tmp.replace(path)


_BUILT: dict[tuple, bytes] = {}  # (compiler, flags, PATH, source): the bytes gcc gave, in this process
_PASSED: set[tuple[str, str | None]] = set()  # (sha256, PATH) of builds whose self-test passed here


@pytest.fixture
def shared_builds(monkeypatch):
    """For the fused kernel's tests about where its files go and which are loaded, not about
    compiling or the self-test (in tests/test_fused_decode_security.py and test_fused_decode.py):
    a build with the compiler, flags, PATH and source of one compiled earlier in this process
    gets a copy of its bytes in a temporary file of the folder (as the compiler would write it),
    and a library whose bytes passed the self-test under the same PATH passes again without
    starting another Python. The first of each runs for real, and everything around them
    (folders, records, hashes, loading) runs as it is. The tests of the compiler and of the
    self-test's process (a plain first build, a broken or wrapped compiler, a crashing library,
    a planted module, planted tools on PATH) do not use this: each build is ~1 s of gcc and
    ~2 s of a Python that imports torch."""
    from course_utils.attention import fused_decode

    real_compile, real_self_test = fused_decode._compile, fused_decode._self_test_elsewhere

    def compile_(cc, flags, folder, name, timeout_s, path=None):
        key = (tuple(cc), tuple(flags), path, fused_decode._SOURCE.read_bytes())
        if key not in _BUILT:
            built, error, outcome = real_compile(cc, flags, folder, name, timeout_s, path)
            if built is not None:
                _BUILT[key] = built.read_bytes()
            return built, error, outcome
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".so.tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(_BUILT[key])
        os.chmod(tmp, 0o700)
        return Path(tmp), "", "built"

    def self_test(library, digest, timeout_s, path=None):
        if (digest, path) in _PASSED:
            return None, "passed"
        verdict = real_self_test(library, digest, timeout_s, path)
        if verdict == (None, "passed"):
            _PASSED.add((digest, path))
        return verdict

    monkeypatch.setattr(fused_decode, "_compile", compile_)
    monkeypatch.setattr(fused_decode, "_self_test_elsewhere", self_test)
