"""The fused kernel's build directory: only a library this user built there is ever loaded.

A shared library runs its constructor the moment it is loaded, so a file planted where the
kernel is looked for (a temp folder on a shared JupyterHub) would run inside the learner's
process. Each test plants such a library, whose constructor writes a marker file, where it
must not be loaded, and checks that the marker never appears.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from course_utils.attention import fused_decode
from course_utils.attention.fused_decode import (
    fused_decode_attention,
    fused_decode_build,
    fused_decode_status,
)

# Skipped where the kernel cannot be built (no compiler, say); a kernel that builds but fails its
# self-test fails these tests instead, and so does any call that falls back to PyTorch unasked.
_WHY_NOT = fused_decode_status()
needs_kernel = pytest.mark.skipif(_WHY_NOT is not None and "self-test" not in _WHY_NOT,
                                  reason=f"fused kernel unavailable: {_WHY_NOT}")
pytestmark = pytest.mark.filterwarnings("error:the fused decode kernel is unavailable:RuntimeWarning")
needs_posix = pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX owners and modes")

PLANTED_SOURCE = r"""
#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen("%s", "w");
    if (f) { fputs("the planted library's code ran", f); fclose(f); }
}
int fused_decode(void) { return 0; }
"""


@pytest.fixture
def place(monkeypatch, tmp_path):
    """The user cache and the temp folder, both under tmp_path; the kernel forgotten before
    and after; a marker file that only a planted library's constructor would write."""
    cache, tmp = tmp_path / "cache", tmp_path / "tmp"
    cache.mkdir()
    tmp.mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    fused_decode._library.cache_clear()
    yield SimpleNamespace(root=tmp_path, cache=cache / "course_utils",
                          tmp=lambda: tmp / f"course_utils-{fused_decode._uid()}",
                          marker=tmp_path / "planted-code-ran")
    fused_decode._library.cache_clear()


def _planted_library(place) -> bytes:
    """A library whose constructor writes place.marker (what an attacker would plant)."""
    cc = fused_decode._compiler()
    source = place.root / "planted.c"
    source.write_text(PLANTED_SOURCE % place.marker)
    built = place.root / "planted.so"
    subprocess.run([*cc, "-shared", "-fPIC", "-o", str(built), str(source)], check=True)
    return built.read_bytes()


def _kernel_names() -> list[str]:
    """The file names the kernel is looked up under (one per set of flags), as an attacker
    can compute them: source, compiler, flags and /proc/cpuinfo."""
    cc = fused_decode._compiler()
    source = fused_decode._SOURCE.read_bytes()
    return [fused_decode._kernel_name(cc, (*fused_decode._FLAGS, *options), source)
            for options in fused_decode._OPTIONS]


def _plant(folder: Path, library: bytes, *, with_record: bool) -> None:
    """The planted library under every name the kernel is looked for, with a matching sha256
    record if asked (an attacker who can write the folder can write that too)."""
    for name in _kernel_names():
        (folder / f"{name}.so").write_bytes(library)
        if with_record:
            (folder / f"{name}.so.sha256").write_text(hashlib.sha256(library).hexdigest() + "\n")


def _give_away(folder: Path, monkeypatch) -> int:
    """Make ``folder`` someone else's: really (as root), else by pretending to be another user."""
    if os.getuid() == 0:
        os.chown(folder, 65534, 65534)
        return 65534
    real = os.getuid()
    monkeypatch.setattr(fused_decode, "_uid", lambda: real + 1)
    return real


def _assert_falls_back_to_pytorch():
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 8, 1, 64, generator=gen)
    k, v = torch.randn(1, 2, 40, 64, generator=gen), torch.randn(1, 2, 40, 64, generator=gen)
    with pytest.warns(RuntimeWarning, match="unavailable .*computing the same result"):
        out = fused_decode_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                               atol=2e-6, rtol=1e-5)


@needs_kernel
@needs_posix
@pytest.mark.slow
def test_the_directory_is_created_private_and_the_build_recorded(place):
    assert fused_decode_status() is None
    assert stat.S_IMODE(place.cache.stat().st_mode) == 0o700
    (library,) = place.cache.glob("fused_decode-*.so")
    record = place.cache / f"{library.name}.sha256"
    assert record.read_text() == (f"{hashlib.sha256(library.read_bytes()).hexdigest()}  {library.name}\n"
                                  "self-test v5 passed\n")  # in a separate process, before it was loaded
    assert sorted(p.name for p in place.cache.iterdir()) == [library.name, record.name]  # no temp files
    assert not place.tmp().exists()  # the temp folder is not needed


@needs_kernel
@needs_posix
@pytest.mark.slow
def test_an_existing_directory_of_yours_readable_by_others_is_made_private(place, shared_builds):
    place.cache.mkdir(mode=0o755)
    place.cache.chmod(0o755)
    assert fused_decode_status() is None
    assert stat.S_IMODE(place.cache.stat().st_mode) == 0o700


@needs_kernel
@needs_posix
@pytest.mark.slow
def test_a_planted_library_without_a_record_is_never_loaded(place, shared_builds):
    place.cache.mkdir(mode=0o700)
    planted = _planted_library(place)
    _plant(place.cache, planted, with_record=False)
    with pytest.warns(RuntimeWarning, match="has no recorded sha256"):
        assert fused_decode_status() is None
    assert not place.marker.exists()
    assert "rebuilt" in fused_decode_build() and "no recorded sha256" in fused_decode_build()
    (library,) = [place.cache / f"{name}.so" for name in _kernel_names()[:1]]
    assert library.read_bytes() != planted
    assert fused_decode._recorded_sha256(library) == hashlib.sha256(library.read_bytes()).hexdigest()


@needs_kernel
@needs_posix
@pytest.mark.slow
def test_a_library_whose_bytes_changed_is_never_loaded(place, shared_builds):
    assert fused_decode_status() is None
    (library,) = place.cache.glob("fused_decode-*.so")
    built = library.read_bytes()
    replacement = place.root / "replacement.so"
    replacement.write_bytes(_planted_library(place))
    os.replace(replacement, library)  # a new file: the one loaded in this process stays intact
    fused_decode._library.cache_clear()
    with pytest.warns(RuntimeWarning, match="does not match its recorded sha256"):
        assert fused_decode_status() is None
    assert not place.marker.exists()
    assert library.read_bytes() == built  # rebuilt from the source


@needs_kernel
@needs_posix
@pytest.mark.slow
def test_a_truncated_library_is_refused_before_it_is_mapped(place, shared_builds):
    """Loading a library cut to half its size crashes the process with SIGBUS: the hash must be
    checked before dlopen. Run in a fresh process, as a learner's next session would."""
    assert fused_decode_status() is None
    (library,) = place.cache.glob("fused_decode-*.so")
    half = place.root / "half.so"
    half.write_bytes(library.read_bytes()[: library.stat().st_size // 2])
    os.replace(half, library)
    code = ("import warnings; warnings.simplefilter('ignore')\n"
            "from course_utils.attention.fused_decode import fused_decode_status, fused_decode_build\n"
            "print(fused_decode_status()); print(fused_decode_build())\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(place.cache.parent), "TMPDIR": str(place.tmp().parent)}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=Path(fused_decode.__file__).parent.parent, timeout=300)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])  # -7: SIGBUS
    status, build = run.stdout.splitlines()[:2]
    assert status == "None"
    assert "does not match its recorded sha256" in build and "truncated" in build


@needs_posix
@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="needs a C compiler")
def test_directories_owned_by_someone_else_are_refused_and_pytorch_computes(place, monkeypatch):
    """The attack of the issue: someone creates course_utils-<uid> in the shared temp folder
    first and puts a library (and a matching record) in it."""
    planted = _planted_library(place)
    for folder in (place.cache, place.tmp()):
        folder.mkdir(mode=0o700)
        _plant(folder, planted, with_record=True)
    owner = {_give_away(folder, monkeypatch) for folder in (place.cache, place.tmp())}.pop()
    why = fused_decode_status()
    assert why.startswith("no private directory to build the fused kernel in: ")
    for folder in (place.cache, place.tmp()):
        assert f"{folder} is owned by uid {owner}" in why
    assert f"not by you (uid {fused_decode._uid()}" in why and "refused" in why
    _assert_falls_back_to_pytorch()
    assert not place.marker.exists()


@needs_posix
@pytest.mark.parametrize("mode", [0o777, 0o770, 0o720, 0o703, 0o702], ids=lambda m: f"{m:04o}")
def test_directories_writable_by_group_or_others_are_refused_and_pytorch_computes(place, mode):
    planted = _planted_library(place)
    for folder in (place.cache, place.tmp()):
        folder.mkdir()
        folder.chmod(mode)
        _plant(folder, planted, with_record=True)
    why = fused_decode_status()
    for folder in (place.cache, place.tmp()):
        assert (f"{folder} is writable by its group or by others (mode {mode:04o}, expected 0700)"
                in why)
        assert stat.S_IMODE(folder.stat().st_mode) == mode  # refused, not silently trusted
    _assert_falls_back_to_pytorch()
    assert not place.marker.exists()


@needs_kernel
@needs_posix
@pytest.mark.slow
def test_a_refused_cache_directory_falls_back_to_a_private_temp_directory(place, shared_builds):
    place.cache.mkdir()
    place.cache.chmod(0o777)
    _plant(place.cache, _planted_library(place), with_record=True)
    with pytest.warns(RuntimeWarning, match=f"refused {place.cache} is writable .* using {place.tmp()}"):
        assert fused_decode_status() is None
    assert not place.marker.exists()
    assert stat.S_IMODE(place.tmp().stat().st_mode) == 0o700
    assert len(list(place.tmp().glob("fused_decode-*.so"))) == 1
    assert f"refused {place.cache} is writable" in fused_decode_build()


@needs_kernel
@needs_posix
@pytest.mark.slow
def test_a_symbolic_link_in_place_of_the_directory_is_refused(place, shared_builds):
    elsewhere = place.root / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    _plant(elsewhere, _planted_library(place), with_record=True)
    place.cache.symlink_to(elsewhere)
    with pytest.warns(RuntimeWarning, match="is a symbolic link"):
        assert fused_decode_status() is None
    assert not place.marker.exists()
    assert list(place.tmp().glob("fused_decode-*.so"))


@needs_kernel
@needs_posix
@pytest.mark.parametrize("sticky", [False, True])
@pytest.mark.slow
def test_a_parent_writable_by_everyone_needs_the_sticky_bit(place, shared_builds, monkeypatch, sticky):
    """In a world-writable parent without the sticky bit (unlike /tmp), anyone could rename
    the private directory away and put their own in its place."""
    parent = place.root / "open"
    parent.mkdir()
    parent.chmod(0o1777 if sticky else 0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(parent))
    place.tmp().parent.chmod(0o777)  # the same for the temp folder
    why = fused_decode_status()
    if sticky:
        assert why is None
        assert list((parent / "course_utils").glob("fused_decode-*.so"))
    else:
        assert f"{parent} is writable by everyone without the sticky bit" in why
        assert f"{place.tmp().parent} is writable by everyone without the sticky bit" in why
        # checked before anything is made there: no folder of ours left in either shared one
        assert list(parent.iterdir()) == [] and list(place.tmp().parent.iterdir()) == []


@needs_kernel
@needs_posix
@pytest.mark.parametrize("script", [
    'for a; do [ "$prev" = -o ] && printf "half a library" > "$a"; prev=$a; done\nexit 1\n',
    'for a; do [ "$prev" = -o ] && printf "not a library" > "$a"; prev=$a; done\nexit 0\n',
], ids=["fails after writing part of its output", "succeeds with a file that is no library"])
@pytest.mark.slow
def test_a_broken_build_leaves_nothing_under_the_kernels_name(place, monkeypatch, script):
    """The compiler writes a temporary file; only a build that loads and passes the self-test
    is moved (os.replace) to the name that later processes load."""
    cc = place.root / "broken-cc"
    cc.write_text("#!/bin/sh\n" + script)
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    why = fused_decode_status()
    assert "could not build fused_decode.c" in why
    names = sorted(p.name for p in place.cache.iterdir())
    assert names and all(name.endswith(".failed") for name in names), names


# --- what else may sit where the kernel keeps its files --------------------------------------


@pytest.fixture
def hang_guard():
    """Fail instead of hanging: opening a FIFO for reading waits for a writer forever."""
    import signal

    class Hung(BaseException):  # not an OSError, which the kernel's setup turns into a status
        pass

    def hung(signum, frame):
        raise Hung("hung for 60 s (opening a FIFO?)")

    before = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, before)


def _suffixes():
    return {"library": ".so", "record": ".so.sha256", "failure marker": ".failed"}


@needs_kernel
@needs_posix
@pytest.mark.parametrize("what", ["library", "record", "failure marker"])
@pytest.mark.parametrize("kind", ["FIFO (named pipe)", "directory"])
def test_something_other_than_a_file_under_a_kernel_name_is_refused_by_name(place, hang_guard, what,
                                                                          kind):
    """A FIFO hung os.open forever; a directory gave "[Errno 21] Is a directory" and left a
    .so.tmp behind in every process. Both are refused at once, named, and nothing is left."""
    place.cache.mkdir(mode=0o700)
    for name in _kernel_names():
        path = place.cache / f"{name}{_suffixes()[what]}"
        os.mkfifo(path) if kind.startswith("FIFO") else path.mkdir()
    why = fused_decode_status()
    assert why is not None and f"is a {kind}, where the kernel keeps a file: remove it" in why, why
    assert why.startswith(f"the fused kernel cannot be built or kept in {place.cache}: "), why
    assert "could not build" not in why and "remembered" not in why, why  # not the compiler's doing
    assert "Errno" not in why
    assert not list(place.cache.glob(".*.tmp"))  # no temporary file left behind
    _assert_falls_back_to_pytorch()


@needs_posix
def test_reading_a_fifo_does_not_wait_for_a_writer(place, hang_guard):
    place.cache.mkdir(mode=0o700)
    os.mkfifo(place.cache / "pipe")
    expected = r"pipe is a FIFO \(named pipe\), expected a regular file"
    with pytest.raises(fused_decode._Untrusted, match=expected):
        fused_decode._read_own_file(place.cache / "pipe")


SEGV_SOURCE = r"""
int fused_decode(const float *q, const float *K, const float *V, float *out, long B, long h,
                 long g, long T, const long *ks, const long *vs, int threads) {
    *(volatile int *)0 = 1;
    return 0;
}
"""


@needs_kernel
@needs_posix
@pytest.mark.slow
def test_a_library_that_crashes_in_its_self_test_leaves_this_process_alive(place, monkeypatch):
    """Self-tested in this process, a library that segfaults killed the learner's kernel."""
    source = place.root / "segv.c"
    source.write_text(SEGV_SOURCE)
    real = fused_decode._compiler()[0]
    cc = place.root / "segv-cc"
    cc.write_text('#!/bin/sh\nout=""; prev=""\nfor a; do [ "$prev" = -o ] && out="$a"; prev="$a"; done\n'
                  f'exec {real} -shared -fPIC -o "$out" {source}\n')
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    why = fused_decode_status()
    crashed = "its self-test crashed the separate process it ran in (SIGSEGV)"
    assert why is not None and why.count(crashed) == 3
    assert "this process was not affected" in why
    assert not list(place.cache.glob("*.so*"))
    _assert_falls_back_to_pytorch()


@needs_kernel
@needs_posix
@pytest.mark.parametrize("record", ["sha256 alone", "self-test v3 passed", "self-test v4 passed"])
@pytest.mark.slow
def test_a_record_in_an_older_format_is_never_loaded_not_even_to_test_it(place, shared_builds, record):
    """The review: a library planted with a record of its sha256 alone (the format before the
    separate self-test) was loaded in the self-test's process, and its constructor ran there.
    A record of an older self-test is treated alike: the library is built again, unloaded."""
    place.cache.mkdir(mode=0o700)
    planted = _planted_library(place)
    for name in _kernel_names():
        (place.cache / f"{name}.so").write_bytes(planted)
        extra = "" if record == "sha256 alone" else f"{record}\n"
        (place.cache / f"{name}.so.sha256").write_text(
            f"{hashlib.sha256(planted).hexdigest()}  {name}.so\n{extra}")
    assert fused_decode_status() is None
    assert not place.marker.exists(), "the planted library's constructor ran"
    assert "its record does not say it passed the current self-test" in fused_decode_build()
    library = place.cache / f"{_kernel_names()[0]}.so"  # the threaded build, used first
    assert library.read_bytes() != planted
    assert fused_decode._record(library)[1]  # the new build's record says it passed
    out = fused_decode_attention(torch.ones(1, 2, 1, 64), torch.zeros(1, 1, 3, 64), torch.ones(1, 1, 3, 64))
    assert (out == 1).all()  # the kernel, not the planted library (whose fused_decode does nothing)


@needs_kernel
@needs_posix
@pytest.mark.skipif(os.getuid() != 0, reason="gives the parent folder to another user: needs root")
@pytest.mark.parametrize("mode", [0o1777, 0o755])
@pytest.mark.slow
def test_a_parent_owned_by_someone_else_is_refused_whatever_its_mode(place, shared_builds, monkeypatch, mode):
    """The owner of the parent may rename the private directory away (even with the sticky bit)
    and put their own in its place."""
    parent = place.root / "theirs"
    parent.mkdir()
    os.chown(parent, 65534, 65534)
    parent.chmod(mode)
    os.mkdir(parent / "course_utils", 0o700)  # made for us, as root could
    monkeypatch.setenv("XDG_CACHE_HOME", str(parent))
    with pytest.warns(RuntimeWarning, match=f"refused {parent} is owned by uid 65534"):
        assert fused_decode_status() is None
    assert list(place.tmp().glob("fused_decode-*.so"))


@needs_posix
def test_a_parent_writable_by_its_group_without_the_sticky_bit_is_refused(place, monkeypatch):
    parent = place.root / "group"
    parent.mkdir()
    parent.chmod(0o775)
    monkeypatch.setenv("XDG_CACHE_HOME", str(parent))
    group_writable = f"{parent} is writable by its group without the sticky bit (mode 0775)"
    assert group_writable in fused_decode._private_dir(
        parent / "course_utils")


@needs_posix
def test_a_self_test_process_that_hangs_is_stopped_and_not_held_against_the_library(place, monkeypatch):
    """A loaded machine can make the separate process slow: stopped after the timeout, and a
    timeout, not the library's verdict (not remembered)."""
    place.cache.mkdir(mode=0o700)
    monkeypatch.setattr(fused_decode, "_CHILD_CODE", "import time\ntime.sleep(60)\n")
    import time

    start = time.monotonic()
    why, verdict = fused_decode._self_test_elsewhere(place.cache / "x.so", "0" * 64, 1.0)
    assert time.monotonic() - start < 8
    assert verdict == "timeout" and "did not finish within 1 s" in why and fused_decode.TIMEOUT_ENV in why


# --- the file checked is the file loaded -----------------------------------------------------


@needs_kernel
@needs_posix
@pytest.mark.parametrize("by", ["/proc/self/fd", "a private copy"])
@pytest.mark.slow
def test_a_library_swapped_in_between_the_hash_and_the_load_is_never_loaded(place, shared_builds, monkeypatch,
                                                                           by):
    """The hash was checked on the name and dlopen looked the name up again: a file swapped in
    between ran. Now the bytes hashed are the bytes loaded (through the descriptor, or from a
    private copy where there is no /proc, as on macOS)."""
    assert fused_decode_status() is None
    (library,) = place.cache.glob("fused_decode-*.so")
    planted = place.root / "planted-swap.so"
    planted.write_bytes(_planted_library(place))
    real_load, loaded = fused_decode._load, []

    def swap_then_load(path, **kw):
        os.replace(planted, library)  # the attacker wins the race: the name now holds their library
        loaded.append(str(path))
        return real_load(path, **kw)

    monkeypatch.setattr(fused_decode, "_load", swap_then_load)
    if by == "a private copy":
        monkeypatch.setattr(fused_decode, "_fd_path", lambda fd: None)
    fused_decode._library.cache_clear()
    assert fused_decode_status() is None
    assert not place.marker.exists()  # the planted library's constructor never ran
    assert len(loaded) == 1 and (loaded[0].startswith("/proc/self/fd/") if by == "/proc/self/fd" else
                                 loaded[0].endswith(".load.so") and not os.path.exists(loaded[0]))
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(2, 8, 1, 64, generator=gen)
    k, v = torch.randn(2, 2, 100, 64, generator=gen), torch.randn(2, 2, 100, 64, generator=gen)
    torch.testing.assert_close(fused_decode_attention(q, k, v), F.scaled_dot_product_attention(
        q, k, v, enable_gqa=True), atol=2e-6, rtol=1e-5)  # the kernel, not the planted stub
    assert sorted(p.name for p in place.cache.iterdir()) == [library.name, f"{library.name}.sha256"]


NUMBERED_SOURCE = r"""
int fused_decode(const float *q, const float *K, const float *V, float *out, long B, long h,
                 long g, long T, const long *ks, const long *vs, int threads) { return %d; }
"""


@needs_posix
@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="needs a C compiler")
def test_libraries_loaded_one_after_another_are_each_themselves(tmp_path):
    """The loader remembers a library by the name it was loaded under: a descriptor closed after
    loading would let the next library, opened under the same number, be answered with the
    first. Each loaded descriptor stays open."""
    cc = fused_decode._compiler()
    tmp_path.chmod(0o700)
    for number in (11, 22, 33):
        source = tmp_path / f"n{number}.c"
        source.write_text(NUMBERED_SOURCE % number)
        built = tmp_path / f"n{number}.so"
        subprocess.run([*cc, "-shared", "-fPIC", "-o", str(built), str(source)], check=True)
        built.chmod(0o700)
        lib = fused_decode._load_verified(built, hashlib.sha256(built.read_bytes()).hexdigest())
        none = ctypes.c_void_p()
        assert lib.fused_decode(none, none, none, none, 0, 0, 0, 0, None, None, 1) == number


@needs_posix
def test_a_library_writable_by_others_is_not_loaded(place):
    place.cache.mkdir(mode=0o700)
    library = place.cache / "x.so"
    library.write_bytes(b"whatever")
    library.chmod(0o766)
    with pytest.raises(fused_decode._Untrusted, match=r"x.so is writable by its group or by others "
                                                      r"\(mode 0766\): its bytes could change"):
        fused_decode._load_verified(library, hashlib.sha256(b"whatever").hexdigest())


# --- the self-test's separate process runs nothing from the working directory ------------------


PLANTED_MODULE = 'open({marker!r}, "w").write("planted module ran")\n'


@needs_kernel
@needs_posix
@pytest.mark.slow
def test_a_module_planted_in_the_working_directory_does_not_run_in_the_self_test(place, monkeypatch):
    """`python -c` puts the working directory first on the module path: a typing_extensions.py
    planted in a shared working directory ran (torch imports it). The child runs with -I, in the
    library's private folder, and imports this package from where it is."""
    assert fused_decode_status() is None
    (library,) = place.cache.glob("fused_decode-*.so")
    digest = hashlib.sha256(library.read_bytes()).hexdigest()
    shared = place.root / "shared-workdir"
    (shared / "course_utils").mkdir(parents=True)
    for module in ("typing_extensions.py", "course_utils/__init__.py"):
        (shared / module).write_text(PLANTED_MODULE.format(marker=str(place.marker)))
    # The plant works: a plain `python -c` started there runs it.
    subprocess.run([sys.executable, "-c", "import typing_extensions"], cwd=shared, capture_output=True,
                   timeout=120)
    assert place.marker.exists()
    place.marker.unlink()
    monkeypatch.chdir(shared)
    monkeypatch.syspath_prepend(str(shared))  # as a notebook started there has it, by absolute name
    assert fused_decode._self_test_elsewhere(library, digest, 300.0) == (None, "passed")
    assert not place.marker.exists()


# --- every folder on the way to the private one ------------------------------------------------


@needs_posix
@pytest.mark.parametrize("mode", [0o775, 0o777])
def test_a_grandparent_writable_by_others_is_refused_with_a_clear_message(place, monkeypatch, mode):
    """Only the parent was checked: a group-writable folder two levels up let another user swap
    the folder below it."""
    shared = place.root / "shared"
    (shared / "alice" / "cache").mkdir(parents=True)
    shared.chmod(mode)
    folder = shared / "alice" / "cache" / "course_utils"
    why = fused_decode._private_dir(folder)
    who = "its group" if mode == 0o775 else "everyone"
    assert why is not None and why.startswith(
        f"{shared} is writable by {who} without the sticky bit (mode {mode:04o}): others could replace "
        f"alice in it, on the way to {folder}, so {folder} is refused"), why
    assert "chmod go-w" in why
    shared.chmod(0o1777)  # the sticky bit: others cannot rename what is yours
    assert fused_decode._private_dir(folder) is None


@needs_kernel
@needs_posix
@pytest.mark.slow
def test_a_cache_reached_through_a_link_into_a_shared_folder_is_refused(place, shared_builds, monkeypatch):
    """The review's attack: ~/.cache, a symbolic link into a folder others can write. The folders
    the link leads through are checked too; the private temp folder is used instead."""
    home, shared = place.root / "home", place.root / "shared"
    home.mkdir()
    (shared / "real-cache").mkdir(parents=True)
    shared.chmod(0o777)
    (home / ".cache").symlink_to(shared / "real-cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    expected = f"refused {shared} is writable by everyone without the sticky bit .*using {place.tmp()}"
    with pytest.warns(RuntimeWarning, match=expected):
        assert fused_decode_status() is None
    assert not list(shared.rglob("*.so"))
    assert list(place.tmp().glob("fused_decode-*.so"))


@needs_posix
@pytest.mark.skipif(os.getuid() != 0, reason="gives a link or a folder to another user: needs root")
@pytest.mark.parametrize("what", ["link", "grandparent"])
def test_a_link_or_a_grandparent_owned_by_someone_else_is_refused(place, what):
    theirs = place.root / "theirs"
    theirs.mkdir()
    (theirs / "mine" / "cache").mkdir(parents=True)
    if what == "link":
        (place.root / "sticky").mkdir(mode=0o1777)
        (place.root / "sticky").chmod(0o1777)
        link = place.root / "sticky" / "cache"
        link.symlink_to(theirs / "mine" / "cache")
        os.lchown(link, 65534, 65534)
        folder = link / "course_utils"
        expected = f"{link} is a symbolic link owned by uid 65534"
    else:
        os.chown(theirs, 65534, 65534)
        folder = theirs / "mine" / "cache" / "course_utils"
        expected = f"{theirs} is owned by uid 65534"
    why = fused_decode._private_dir(folder)
    assert why is not None and why.startswith(expected) and f"so {folder} is refused" in why, why


# --- a read-only cache, a FIFO or a directory under a kernel name ------------------------------


def _read_only(monkeypatch, folder: Path) -> None:
    """Make ``folder`` read as on a filesystem mounted read-only (os.access and os.statvfs)."""
    real_access, real_statvfs = os.access, os.statvfs

    def access(path, mode, **kw):
        return False if Path(path) == folder and mode & os.W_OK else real_access(path, mode, **kw)

    def statvfs(path):
        st = real_statvfs(path)
        if Path(path) != folder:
            return st
        return SimpleNamespace(f_flag=st.f_flag | os.ST_RDONLY, f_bavail=st.f_bavail, f_frsize=st.f_frsize)

    monkeypatch.setattr(os, "access", access)
    monkeypatch.setattr(os, "statvfs", statvfs)


@needs_kernel
@needs_posix
@pytest.mark.slow
def test_a_read_only_cache_is_named_as_such_and_a_private_temp_folder_used(place, shared_builds, monkeypatch):
    """It blamed "mode 0700" for a read-only filesystem."""
    place.cache.mkdir(mode=0o700)
    _read_only(monkeypatch, place.cache)
    expected = (f"refused {place.cache} is on a read-only filesystem: the kernel cannot be built or "
                f"recorded there \\(its mode is not the cause\\); using {place.tmp()} instead \\(a folder "
                "of yours, mode 0700, that no one else can write or replace\\)")
    with pytest.warns(RuntimeWarning, match=expected):
        assert fused_decode_status() is None
    assert stat.S_IMODE(place.tmp().stat().st_mode) == 0o700
    assert "0700" not in fused_decode._private_dir(place.cache)


@needs_posix
def test_a_cache_you_cannot_write_names_its_mode(place, monkeypatch):
    place.cache.mkdir(mode=0o500)
    place.cache.chmod(0o500)
    if os.getuid() == 0:  # root writes anywhere: pretend the mode holds
        real = os.access
        monkeypatch.setattr(os, "access",
                            lambda p, m, **kw: False if Path(p) == place.cache else real(p, m, **kw))
    why = fused_decode._private_dir(place.cache)
    assert why == (f"{place.cache} is yours but its mode 0500 does not let you write to it "
                   f"(chmod 700 {place.cache} to use it)")
    place.cache.chmod(0o700)


@needs_kernel
@needs_posix
@pytest.mark.parametrize("kind", ["FIFO (named pipe)", "directory"])
def test_a_record_that_is_not_a_file_does_not_quietly_downgrade_the_build(place, hang_guard, kind):
    """A FIFO or a directory under the threaded build's record name gave the one-thread build,
    silently. Now it is named, and nothing else is built in its place."""
    place.cache.mkdir(mode=0o700)
    record = place.cache / f"{_kernel_names()[0]}.so.sha256"
    os.mkfifo(record) if kind.startswith("FIFO") else record.mkdir()
    why = fused_decode_status()
    assert why is not None and f"{record} is a {kind}, where the kernel keeps a file: remove it" in why, why
    assert not list(place.cache.glob("*.so"))  # no build without threads instead
    with pytest.warns(RuntimeWarning, match=f"unavailable .*{record.name} is a "):
        fused_decode_attention(torch.zeros(1, 2, 1, 64), torch.zeros(1, 1, 3, 64), torch.zeros(1, 1, 3, 64))


def test_a_compiler_planted_in_the_working_directory_is_not_found_through_a_relative_path(
        tmp_path, monkeypatch):
    planted = tmp_path / "cc"
    planted.write_text("#!/bin/sh\ntouch ran\n")
    planted.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", os.pathsep.join([".", "", os.environ.get("PATH", os.defpath)]))
    found = fused_decode._compiler()
    assert isinstance(found, list) and Path(found[0]).parent != tmp_path  # a real compiler, or none
    assert "." not in fused_decode._trusted_path()[0].split(os.pathsep)
    assert "" not in fused_decode._trusted_path()[0].split(os.pathsep)
    monkeypatch.setenv("CC", "cc")
    assert fused_decode._compiler() != [str(planted)]
    monkeypatch.setenv("PATH", ".")  # nothing absolute left: no compiler, said in words
    assert isinstance(fused_decode._compiler(), str)


def test_the_kernel_runs_no_more_threads_than_the_cpus_its_self_test_covered(monkeypatch):
    seen = []

    class Recorder:
        def fused_decode(self, *args):
            seen.append(args[-1])
            return 0

    monkeypatch.setattr(fused_decode, "_library", lambda: Recorder())
    monkeypatch.setattr(fused_decode, "usable_cpus", lambda: 3)
    q = torch.randn(1, 2, 1, fused_decode.HEAD_WIDTH)
    k = v = torch.randn(1, 1, 40, fused_decode.HEAD_WIDTH)
    with torch.no_grad():
        fused_decode.fused_decode_attention(q, k, v, num_threads=200)
    assert seen == [3]



# --- PATH folders others can write, a noexec cache, what the status quotes ----------------------


_TOOLS = ("cc", "gcc", "clang", "as", "ld")


def _plant_tools(folder: Path, marker: Path) -> None:
    """A cc, gcc, clang, as and ld in ``folder`` that each leave a marker, then run the real one
    (what an attacker who can write a PATH folder would plant: the build still works)."""
    real_path = fused_decode._trusted_path()[0]
    for name in _TOOLS:
        real = shutil.which(name, path=real_path)
        script = folder / name
        script.write_text(f"#!/bin/sh\necho {name} >> {marker}\n"
                          + (f'exec {real} "$@"\n' if real else "exit 1\n"))
        script.chmod(0o755)


@needs_kernel
@needs_posix
@pytest.mark.slow
def test_a_compiler_and_an_assembler_in_a_path_folder_everyone_can_write_never_run(place, monkeypatch):
    """A cc and an as planted in a mode-0777 folder first on PATH ran (gcc finds as and ld on
    PATH); a cc there that also compiled in a constructor passed the self-test and was loaded."""
    shared = place.root / "shared-bin"
    shared.mkdir()
    _plant_tools(shared, place.marker)
    shared.chmod(0o777)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", os.pathsep.join([str(shared), os.environ.get("PATH", os.defpath)]))
    assert fused_decode_status() is None
    assert not place.marker.exists(), place.marker.read_text()  # none of the planted tools ran
    build = fused_decode_build()
    assert (f"PATH entry {shared} skipped: it is writable by everyone (mode 0777), so everyone could "
            "add a compiler, as or ld to it") in build, build
    assert str(shared) not in fused_decode._trusted_path()[0].split(os.pathsep)


@needs_posix
@pytest.mark.parametrize("how", ["sticky 1777", "group-writable 0775", "owned by another user",
                                 "a link to a folder everyone can write",
                                 "inside a folder everyone can write"])
def test_a_path_folder_another_user_could_plant_a_program_in_is_skipped_and_named(place, monkeypatch, how):
    if how == "owned by another user" and os.getuid() != 0:
        pytest.skip("gives a folder to another user: needs root")
    folder = place.root / "bin"
    folder.mkdir()
    _plant_tools(folder, place.marker)
    entry, expected = folder, f"PATH entry {folder} skipped: "
    if how.startswith("sticky"):
        folder.chmod(0o1777)  # others cannot replace your files in it, but can add an `as`
        expected += "it is writable by everyone (mode 1777)"
    elif how.startswith("group"):
        folder.chmod(0o775)
        expected += "it is writable by its group (mode 0775)"
    elif how.startswith("owned"):
        os.chown(folder, 65534, 65534)
        expected += "it is owned by uid 65534"
    elif how.startswith("a link"):
        folder.chmod(0o777)
        entry = place.root / "link-bin"
        entry.symlink_to(folder)
        expected = f"PATH entry {entry} skipped: it leads to {folder}, which is writable by everyone"
    else:
        outer = place.root / "open"
        outer.mkdir()
        folder = folder.rename(outer / "bin")
        outer.chmod(0o777)
        entry = folder
        expected = (f"PATH entry {folder} skipped: {outer} is writable by everyone without the sticky "
                    f"bit (mode 0777): others could replace bin in it")
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", os.pathsep.join([str(entry), "/nonexistent-k07c", os.environ.get("PATH", "")]))
    kept, skipped = fused_decode._trusted_path()
    assert str(entry) not in kept.split(os.pathsep)
    assert any(why.startswith(expected) for why in skipped), skipped
    assert not any("nonexistent-k07c" in why for why in skipped)  # a missing folder: left out quietly
    found = fused_decode._compiler()
    assert not (isinstance(found, list) and Path(found[0]).parent in (folder, entry)), found
    monkeypatch.setenv("CC", "cc")
    found = fused_decode._compiler()
    assert not (isinstance(found, list) and Path(found[0]).parent in (folder, entry)), found
    monkeypatch.setenv("PATH", str(entry))  # nothing else: no compiler, and the status says why
    assert fused_decode_status() == ("CC=cc: no program 'cc' found on PATH; "
                                     + "; ".join(fused_decode._trusted_path()[1]))
    assert expected in fused_decode_status()
    assert not place.marker.exists()


@needs_posix
def test_the_system_folders_on_path_stay_in_use():
    kept = fused_decode._trusted_path()[0].split(os.pathsep)
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if folder in ("/usr/bin", "/bin", "/usr/local/bin") and os.path.isdir(folder):
            st = os.stat(folder)
            if st.st_uid == 0 and not st.st_mode & 0o022:
                assert folder in kept


@needs_posix
@pytest.mark.parametrize("chosen", ["CC holding its path", "found on PATH"])
def test_a_compiler_file_others_can_write_is_refused(place, monkeypatch, chosen):
    folder = place.root / "private-bin"
    folder.mkdir(mode=0o700)
    _plant_tools(folder, place.marker)
    (folder / "cc").chmod(0o777)
    if chosen.startswith("CC"):
        monkeypatch.setenv("CC", str(folder / "cc"))
        why = fused_decode_status()
        assert why == (f"CC={folder / 'cc'}: {folder / 'cc'} is writable by its group or by others (mode "
                       "0777): anyone could replace what it runs, so it is refused as the compiler"), why
    else:
        monkeypatch.delenv("CC", raising=False)
        monkeypatch.setenv("PATH", str(folder))
        why = fused_decode._compiler()
        # its cc refused, the gcc beside it (a file only you can write) taken instead
        assert why == [str(folder / "gcc")], why
        (folder / "gcc").chmod(0o757)
        (folder / "clang").chmod(0o775)
        why = fused_decode._compiler()
        assert isinstance(why, str) and why.startswith("no C compiler found"), why
        assert why.count("refused as the compiler") == 3, why
    assert not place.marker.exists()


def _noexec(monkeypatch, folder: Path) -> None:
    """Make ``folder`` read as on a filesystem mounted noexec (os.statvfs)."""
    real_statvfs = os.statvfs

    def statvfs(path):
        st = real_statvfs(path)
        if Path(path) != folder:
            return st
        return SimpleNamespace(f_flag=st.f_flag | os.ST_NOEXEC, f_bavail=st.f_bavail, f_frsize=st.f_frsize)

    monkeypatch.setattr(os, "statvfs", statvfs)


@needs_kernel
@needs_posix
@pytest.mark.skipif(not hasattr(os, "ST_NOEXEC"), reason="no ST_NOEXEC flag here")
@pytest.mark.slow
def test_a_cache_on_a_noexec_filesystem_is_refused_up_front_and_the_temp_folder_used(place, shared_builds,
                                                                                    monkeypatch):
    """Three builds were made there, none could be loaded, and each was remembered for an hour
    as the compiler's failure; the temp folder was never tried."""
    place.cache.mkdir(mode=0o700)
    _noexec(monkeypatch, place.cache)
    expected = (f"refused {place.cache} is on a filesystem mounted noexec: a library built there could "
                "not be loaded")
    with pytest.warns(RuntimeWarning, match=expected):
        assert fused_decode_status() is None
    assert list(place.cache.iterdir()) == []  # nothing built, nothing remembered there
    assert list(place.tmp().glob("fused_decode-*.so"))
    assert expected in fused_decode_build()


@needs_posix
def test_a_library_the_system_will_not_map_is_not_remembered_as_a_failure(place, monkeypatch):
    """Where the noexec flag is not seen (a filesystem that refuses to map code without it), the
    load fails with "failed to map segment": not the compiler's fault, not remembered, and no
    other flags tried (they would fail alike)."""
    compiled = []

    def compile_(cc, flags, folder, name, timeout_s, path=None):
        built = folder / f".{name}.test.so.tmp"
        built.write_bytes(b"a library")
        compiled.append(flags)
        return built, "", "built"

    def run_limited(command, timeout_s, folder, cwd=None, env=None):
        said = f"could not load it: /proc/self/fd/3: {fused_decode._MAP_FAILED} from shared object"
        return 1, fused_decode._CHILD_FAILED + said + "\n"

    monkeypatch.setattr(fused_decode, "_compile", compile_)
    monkeypatch.setattr(fused_decode, "_run_limited", run_limited)
    monkeypatch.delenv("CC", raising=False)
    why = fused_decode_status()
    assert why is not None, why
    assert ("is its filesystem mounted noexec? Not the compiler's or the library's fault, so not "
            "remembered") in why, why
    assert len(compiled) == 1
    assert list(place.cache.iterdir()) == []  # no .failed file, no library left


@needs_posix
def test_compiler_output_quoted_in_the_status_cannot_redraw_the_terminal(place, monkeypatch):
    cc = place.root / "noisy-cc"
    cc.write_text("#!/bin/sh\nprintf 'bin\\001\\002ary\\n\\033[2J\\033[31mFAKE: all good\\007\\n'\nexit 1\n")
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    why = fused_decode_status()
    assert "bin??ary | ?[2J?[31mFAKE: all good?" in why, why
    assert all(c.isprintable() for c in why), repr(why)
    assert all(c.isprintable() for c in fused_decode_build())


def test_the_default_thread_count_is_capped_not_refused(monkeypatch):
    """After torch.set_num_threads(300), a call that passed no num_threads was refused with
    "num_threads must be at most 256 ..., got 300"."""
    seen = []

    class Recorder:
        def fused_decode(self, *args):
            seen.append(args[-1])
            return 0

    monkeypatch.setattr(fused_decode, "_library", lambda: Recorder())
    monkeypatch.setattr(fused_decode, "usable_cpus", lambda: 3)
    q = torch.randn(1, 2, 1, fused_decode.HEAD_WIDTH)
    k = v = torch.randn(1, 1, 40, fused_decode.HEAD_WIDTH)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(fused_decode.MAX_THREADS + 44)
        with torch.no_grad():
            fused_decode.fused_decode_attention(q, k, v)
    finally:
        torch.set_num_threads(before)
    assert seen == [3]
    with pytest.raises(ValueError, match=f"num_threads must be at most {fused_decode.MAX_THREADS}.*got "
                                         f"{fused_decode.MAX_THREADS + 44}"):
        fused_decode.fused_decode_attention(q, k, v, num_threads=fused_decode.MAX_THREADS + 44)


@needs_kernel
@needs_posix
@pytest.mark.slow
def test_a_weaker_build_says_which_builds_were_not_used_and_why(place, monkeypatch):
    """A CC wrapper adding -ffinite-math-only: both -march=native builds fail the self-test, the
    generic one passes; fused_decode_build() said only "built with generic CPU"."""
    real = fused_decode._compiler()
    wrapper = place.root / "finite-cc"
    wrapper.write_text(f'#!/bin/sh\ncase "$*" in *-march=native*) exec {real[0]} -ffinite-math-only "$@";; '
                       f'esac\nexec {real[0]} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    assert fused_decode_status() is None
    build = fused_decode_build()
    assert build.startswith("built with generic CPU; not used: [-march=native -fopenmp] the built kernel "
                            "disagrees with F.scaled_dot_product_attention"), build
    assert "; not used: [-march=native] the built kernel disagrees" in build, build
    assert "NaN in " in build
    fused_decode._library.cache_clear()  # a later process: the failures remembered, still said
    assert fused_decode_build().startswith("built with generic CPU; not used: [-march=native -fopenmp] ")
    assert "remembered in" in fused_decode_build()
