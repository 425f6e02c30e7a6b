"""Issue 32: the C++ API from another project. `cmake --install` of the build writes the CLI, the
layers' libraries, the headers and a package config; tests/consumer (find_package(diffract),
target_link_libraries(consumer diffract::diffract)) builds against the installed tree alone and
analyses a planted matrix whose fields have closed forms."""
import math
import shutil
import subprocess

from conftest import ROOT


def test_an_installed_diffract_serves_a_consumer_project(tmp_path):
    build = ROOT / "build"
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", str(build), "--prefix", str(prefix)], check=True, capture_output=True)
    assert (prefix / "bin" / "diffract").is_file()
    assert (prefix / "include" / "diffract" / "analysis" / "catalog.hpp").is_file()
    assert (prefix / "lib" / "cmake" / "diffract" / "diffractConfig.cmake").is_file()
    # The consumer sees only the installed tree: a copy of its sources outside the repository.
    src = tmp_path / "consumer"
    shutil.copytree(ROOT / "tests" / "consumer", src)
    out = tmp_path / "out"
    cfg = subprocess.run(["cmake", "-S", str(src), "-B", str(out), "-G", "Ninja", f"-DCMAKE_PREFIX_PATH={prefix}"],
                         capture_output=True, text=True)
    assert cfg.returncode == 0, cfg.stdout + cfg.stderr
    b = subprocess.run(["cmake", "--build", str(out)], capture_output=True, text=True)
    assert b.returncode == 0, b.stdout + b.stderr
    assert str(ROOT / "include") not in (out / "build.ninja").read_text()  # headers from the prefix only
    run = subprocess.run([str(out / "consumer")], capture_output=True, text=True, check=True)
    values = dict(line.split() for line in run.stdout.splitlines())
    # W = diag(4, 3, 2, 1) padded to 6 x 4: ‖W‖_F = √30, stable rank 30 / 16, σ_max 4.
    assert math.isclose(float(values["frob_norm"]), math.sqrt(30), rel_tol=1e-14)
    assert math.isclose(float(values["stable_rank"]), 30 / 16, rel_tol=1e-14)
    assert float(values["max_weights_sval"]) == 4.0
