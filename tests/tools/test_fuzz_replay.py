"""Replay the fuzz corpus and every saved crash input under ASan + UBSan.

The fuzz target (tests/fuzz/fuzz_rope.c) drives the C entry points with
arbitrary dims, strides, positions and frequencies, and aborts if the scalar
and SIMD kernels disagree, if an error leaves a write behind, or (through the
sanitizers) on any access outside the buffers. Here it is compiled with gcc
and a plain main() so it runs without libFuzzer; `make fuzz` explores further.
"""
import glob
import os
import shutil
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FUZZ = os.path.join(ROOT, "tests", "fuzz")
# float-cast-overflow: not part of gcc's `undefined` (a NaN or infinity converted to an integer)
SANITIZE = ["-fsanitize=address,undefined,float-cast-overflow", "-fno-sanitize-recover=all"]


def _inputs():
    files = []
    for folder in ("corpus", "regressions"):
        path = os.path.join(FUZZ, folder)
        files += sorted(os.path.join(path, f) for f in os.listdir(path) if not f.startswith("."))
    return files


def test_corpus_replays_clean_under_sanitizers(tmp_path):
    cc = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    assert cc, "a C compiler is needed to replay the fuzz corpus"
    exe = tmp_path / "replay"
    sources = [os.path.join(FUZZ, "fuzz_rope.c"), os.path.join(FUZZ, "replay.c")]
    sources += sorted(glob.glob(os.path.join(ROOT, "csrc", "**", "*.c"), recursive=True))
    # -O0: the sanitizers check the same accesses, and the compile of the whole
    # C core takes 8 s instead of 19 (the replay 9 s instead of 8)
    build = subprocess.run(
        [cc, "-std=c11", "-O0", "-g", "-Wall", "-Wextra", "-ffp-contract=off", *SANITIZE,
         "-I", os.path.join(ROOT, "csrc"), *sources, "-lm", "-lpthread", "-o", str(exe)],
        capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    inputs = _inputs()
    assert len(inputs) >= 50, "the seed corpus is missing"
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1", UBSAN_OPTIONS="halt_on_error=1")
    run = subprocess.run([str(exe), *inputs], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
