"""CPU vs CUDA backend parity (runs where a GPU is lent: scripts/gpu_check.sh sets DIFFRACT_CUDA_BIN
to a binary built with -DDIFFRACT_CUDA=ON). Elsewhere it is skipped, and reported as skipped."""
import csv
import os
import shutil
import subprocess

import numpy as np
import pytest

from conftest import run

CUDA_BIN = os.environ.get("DIFFRACT_CUDA_BIN")
pytestmark = pytest.mark.skipif(not CUDA_BIN or not shutil.which("nvidia-smi"), reason="no CUDA build or no GPU here")


def test_cuda_matches_cpu(family_f32, tmp_path):
    run(["analyze", family_f32 / "math", "--out", tmp_path / "cpu", "--store", tmp_path / "cpu.sqlite", "--quiet"])
    p = subprocess.run([CUDA_BIN, "analyze", str(family_f32 / "math"), "--out", str(tmp_path / "gpu"), "--store",
                        str(tmp_path / "gpu.sqlite"), "--quiet", "--device", "cuda"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    cpu = list(csv.DictReader(open(tmp_path / "cpu" / "metrics.csv")))
    gpu = list(csv.DictReader(open(tmp_path / "gpu" / "metrics.csv")))
    assert len(cpu) == len(gpu)
    # Both f64 Gram routes: identical in exact arithmetic; summation order differs, so 1e-9 relative
    # on singular-value fields, and integer counts equal.
    for a, b in zip(cpu, gpu):
        for f in ("frob_norm", "l2_norm", "nuclear_norm", "stable_rank", "esd_max", "pl_alpha"):
            np.testing.assert_allclose(float(b[f]), float(a[f]), rtol=1e-9, err_msg=f"{a['tensor']} {a['head']} {f}")
        assert a["hard_rank"] == b["hard_rank"] and a["mp_num_spikes"] == b["mp_num_spikes"]
