"""Issue 51: a custom metric is never served stale from the store. Its default version hashes its code,
defaults, closure and the globals it reads, and is taken again before each analyze: a changed closure
or global is recomputed; an unchanged function in a new session is read back (the hash holds no address)."""
import subprocess
import sys

import numpy as np
import pytest

import diffract_spectral as diffract
from diffract_spectral._metric_version import metric_version

SCALE = 1.0  # read by a metric below through the module's globals


@pytest.fixture(scope="module")
def matrix():
    return {"w.weight": np.random.default_rng(3).standard_normal((40, 30))}


def top_share(s, k):
    return float((s[-k:] ** 2).sum() / (s ** 2).sum())


def values(res, name):
    return list(res.metrics[name])


def test_a_changed_closure_is_recomputed(matrix, tmp_path):
    store = tmp_path / "s.sqlite"
    s = np.linalg.svd(matrix["w.weight"], compute_uv=False)[::-1]

    def make(k):
        @diffract.metric(name="top_k_share")
        def f(svals):
            return top_share(svals, k)
        return f

    try:
        r1 = diffract.analyze(matrix, metrics=["l2_norm", make(1)], store=store)
        r3 = diffract.analyze(matrix, metrics=["l2_norm", make(3)], store=store)
        assert values(r1, "top_k_share") == pytest.approx([top_share(s, 1)], rel=1e-12)
        assert values(r3, "top_k_share") == pytest.approx([top_share(s, 3)], rel=1e-12)
        again = diffract.analyze(matrix, metrics=["l2_norm", make(3)], store=store)
        assert values(again, "top_k_share") == values(r3, "top_k_share") and again.computed == 0
    finally:
        diffract.unregister_metric("top_k_share")


def test_a_changed_global_is_recomputed_without_registering_again(matrix, tmp_path):
    global SCALE
    store = tmp_path / "s.sqlite"

    @diffract.metric(name="scaled_top")
    def scaled_top(svals):
        return SCALE * float(svals[-1])

    try:
        SCALE = 1.0
        a = diffract.analyze(matrix, metrics=[scaled_top], store=store)
        SCALE = 2.0  # after registration: the next analyze sees a new version
        b = diffract.analyze(matrix, metrics=[scaled_top], store=store)
        assert values(b, "scaled_top") == pytest.approx([2 * values(a, "scaled_top")[0]], rel=1e-12)
    finally:
        SCALE = 1.0
        diffract.unregister_metric(scaled_top)


def test_explicit_version_is_kept(matrix, tmp_path):
    global SCALE

    @diffract.metric(name="pinned", version="1")
    def pinned(svals):
        return SCALE * float(svals[-1])

    try:
        a = diffract.analyze(matrix, metrics=[pinned], store=tmp_path / "s.sqlite")
        SCALE = 5.0  # version="1" says the results stand: read back, as documented
        b = diffract.analyze(matrix, metrics=[pinned], store=tmp_path / "s.sqlite")
        assert values(a, "pinned") == values(b, "pinned")
    finally:
        SCALE = 1.0
        diffract.unregister_metric(pinned)


SCRIPT = r'''
import sys, numpy as np, diffract_spectral as diffract
WEIGHTS = np.linspace(0.0, 1.0, 5)
def make(k):
    @diffract.metric(name="session_metric")
    def f(s):
        parts = [float(x) for x in s[-k:]]          # a comprehension: a nested code object
        return sum(parts) * float(WEIGHTS[k])
    return f
res = diffract.analyze({"w.weight": np.random.default_rng(3).standard_normal((40, 30))},
                       metrics=[make(2)], store=sys.argv[1])
print(res.computed, res.reused, diffract._METRICS["session_metric"][3])
'''


def test_an_unchanged_metric_is_read_back_in_a_new_session(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    runs = [subprocess.run([sys.executable, str(script), str(tmp_path / "s.sqlite")], capture_output=True, text=True)
            for _ in range(2)]
    for p in runs:
        assert p.returncode == 0, p.stderr
    (c1, r1, v1), (c2, r2, v2) = (p.stdout.split() for p in runs)
    assert v1 == v2  # no address in the hash
    assert int(c1) == 1 and int(c2) == 0 and int(r2) == 1


def test_the_version_hash_follows_values_not_addresses():
    def make(v):
        def f(s):
            return v
        return f

    assert metric_version(make(np.arange(3))) == metric_version(make(np.arange(3)))
    assert metric_version(make(np.arange(3))) != metric_version(make(np.arange(4)))
    assert metric_version(make({"a": 1})) != metric_version(make({"a": 2}))

    class Opaque:
        pass

    # no stable description: the same object hashes alike in this session (recomputed in the next one)
    o = Opaque()
    assert metric_version(make(o)) == metric_version(make(o))
