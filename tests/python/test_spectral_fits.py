"""Parity of the C++ spectral fits (tests/tools/spectral_fit_tool) with powerlaw 1.5, scipy and metrics.md.

ESDs are eigenvalues of W^T W / N (N the greater dimension) of seeded random matrices: Gaussian,
Student-t (heavy-tailed) entries, and a Gaussian with planted Pareto-strength spikes.
"""

import contextlib
import io
import json
import math
import os
import subprocess
import warnings

import numpy as np
import pytest

from conftest import tool

powerlaw = pytest.importorskip("powerlaw")
scipy_stats = pytest.importorskip("scipy.stats")
scipy_integrate = pytest.importorskip("scipy.integrate")

# Found from this file, not the working directory (run from tests/python, a relative path skipped every
# test here); a missing tool fails the tests instead of skipping them: the default build makes it.
TOOL = tool("spectral_fit_tool")


@pytest.fixture(scope="module", autouse=True)
def built_tool():
    assert os.path.exists(TOOL), f"{TOOL} not built (cmake --build build, or set DIFFRACT_TOOLS_DIR)"

SHAPES = [(64, 64), (128, 512), (300, 1000)]
KINDS = ["gauss", "student_t", "planted_pareto"]


def make_weights(kind, shape, seed):
    rng = np.random.default_rng(seed)
    m, n = shape
    if kind == "gauss":
        return rng.normal(0.0, 0.02, size=shape)
    if kind == "student_t":
        return 0.02 * rng.standard_t(df=3.0, size=shape)
    if kind == "planted_pareto":
        w = rng.normal(0.0, 0.02, size=shape)
        k = max(4, min(m, n) // 8)
        strengths = 0.02 * math.sqrt(max(m, n)) * (1.0 + rng.pareto(1.5, size=k))
        u = np.linalg.qr(rng.normal(size=(m, k)))[0]
        v = np.linalg.qr(rng.normal(size=(n, k)))[0]
        return w + (u * strengths) @ v.T
    raise ValueError(kind)


def esd_of(w):
    big = max(w.shape)
    s = np.linalg.svd(w, compute_uv=False)
    return np.sort(s * s / big)


def run_tool(payload):
    proc = subprocess.run([TOOL], input=json.dumps(payload), capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def quiet_fit(esd, xmin_distribution):
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        fit = powerlaw.Fit(esd, xmin_distribution=xmin_distribution, discrete=False, verbose=False)
        if xmin_distribution == "power_law":
            dists = (fit.power_law, fit.truncated_power_law)
        else:
            dists = (fit.exponential,)
    return fit, dists


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-300)


CASES = [(kind, shape, seed) for kind in KINDS for shape in SHAPES for seed in (1, 2)]


@pytest.fixture(scope="module")
def results():
    """Run the tool and powerlaw once per case; collect relative errors for the summary test."""
    out = {}
    for kind, shape, seed in CASES:
        w = make_weights(kind, shape, seed)
        esd = esd_of(w)
        rng = np.random.default_rng(seed + 1000)
        w_rand = rng.permutation(w.ravel()).reshape(w.shape)
        esd_rand = esd_of(w_rand)
        big, small = max(shape), min(shape)
        payload = {"esd": esd.tolist(), "esd_rand": esd_rand.tolist(), "weights_std": float(w.std()),
                   "Q": big / small, "N": big, "M": small, "p": 0.005}
        out[(kind, shape, seed)] = (esd, esd_rand, payload, run_tool(payload))
    return out


@pytest.mark.parametrize("case", CASES, ids=[f"{k}-{s[0]}x{s[1]}-{z}" for k, s, z in CASES])
def test_power_law_and_tpl_match_powerlaw(results, case):
    esd, _, _, got = results[case]
    fit, (pl, tpl) = quiet_fit(esd, "power_law")
    # Same x_min exactly: both scan the same candidates and take the first argmin of the same D.
    assert got["pl_esd_xmin"] == fit.xmin
    assert got["tpl_esd_xmin"] == fit.xmin
    # Closed-form alpha and KS at the same x_min: only summation order differs (1e-9 is ample; ~1e-14 seen).
    assert rel(got["pl_alpha"], pl.alpha) < 1e-9
    assert rel(got["pl_ks"], pl.D) < 1e-9
    # TPL: the same Nelder-Mead path from the same start; our incomplete gamma (~1e-14) and sufficient
    # statistics perturb the objective at ~1e-13 relative. As for the exponential, the last simplex
    # decisions can be taken on rounding noise (fmin's absolute xtol vs Lambda ~ 1e3), moving the vertex
    # within the flat optimum by ~sqrt(eps): 1e-6 relative for alpha. Lambda sits on the flatter axis
    # of that optimum: 1.25e-6 relative was measured (student_t 300x1000 seed 1, numpy 2.x ESDs), so
    # its bound is 1e-5; the KS distance below shows both vertices fit the tail alike to 1e-6.
    assert rel(got["tpl_alpha"], tpl.alpha) < 1e-6
    assert rel(got["tpl_lambda"], tpl.Lambda) < 1e-5
    assert abs(got["tpl_ks"] - tpl.D) < 1e-6


@pytest.mark.parametrize("case", CASES, ids=[f"{k}-{s[0]}x{s[1]}-{z}" for k, s, z in CASES])
def test_exponential_matches_powerlaw(results, case):
    esd, _, _, got = results[case]
    fit, (ex,) = quiet_fit(esd, "exponential")
    assert got["expon_esd_xmin"] == fit.xmin
    # Lambda is fmin's vertex on both sides (ported step for step). fmin's xtol is absolute (1e-4) while
    # Lambda ~ 1e3-1e4 here, so the last simplex steps compare log-likelihoods that differ by less than
    # their rounding (~1e-13 relative): a flipped comparison moves the vertex within the flat optimum by
    # up to ~sqrt(eps) relative. 1e-6 relative covers that noise floor (worst measured 2.3e-8).
    assert rel(got["expon_lambda"], ex.Lambda) < 1e-6
    assert abs(got["expon_ks"] - ex.D) < 1e-6


def mp_pdf(x, ratio, sigma):
    a = sigma**2 * (1 - math.sqrt(ratio)) ** 2
    b = sigma**2 * (1 + math.sqrt(ratio)) ** 2
    if x <= a or x >= b:
        return 0.0
    return math.sqrt((b - x) * (x - a)) / (2 * math.pi * sigma**2 * ratio * x)


def mp_cdf_numeric(x, ratio, sigma):
    """MP CDF by adaptive quadrature of the density (independent of the C++ closed form). With
    lam = a + t^2 the inverse-square-root edges become smooth; the boundary layer of width sqrt(a) at t = 0
    (a ~ 1e-18 when Q = 1) is given to quad as a break point."""
    a = sigma**2 * (1 - math.sqrt(ratio)) ** 2
    b = sigma**2 * (1 + math.sqrt(ratio)) ** 2
    if x <= a:
        return 0.0
    if x >= b:
        return 1.0

    def integrand(t):
        lam = a + t * t
        return 2 * t * mp_pdf(lam, ratio, sigma) if lam < b else 0.0

    t_max = math.sqrt(x - a)
    pts = [p for p in (math.sqrt(a), 10 * math.sqrt(a), 1e3 * math.sqrt(a)) if 0 < p < t_max]
    return scipy_integrate.quad(integrand, 0.0, t_max, points=pts or None, epsabs=1e-14, epsrel=1e-13,
                                limit=400)[0]


def mp_reference(esd, esd_rand, weights_std, Q, M):
    """metrics.md, written out in numpy: marchenko_pastur_fit and mp_ks."""
    s2 = weights_std**2
    lam0 = s2 * (1 + 1 / math.sqrt(Q)) ** 2
    if np.any(esd_rand > lam0):
        s2 = esd_rand[esd_rand <= lam0].sum() / M
        lam_plus = s2 * (1 + 1 / math.sqrt(Q)) ** 2
    else:
        lam_plus = lam0
    esd_max = min(lam_plus, esd.max())
    esd_min = s2 * (1 - 1 / math.sqrt(Q)) ** 2
    s = math.sqrt(s2)
    inside = np.sort(esd[(esd > esd_min) & (esd < esd_max)])
    ratio = 1 / (Q + 1e-8)
    f_lo, f_hi = mp_cdf_numeric(esd_min, ratio, s), mp_cdf_numeric(esd_max, ratio, s)
    if inside.size == 0 or f_hi - f_lo <= 1e-16:
        ks = 1.0
    else:
        n = inside.size
        fc = np.array([(mp_cdf_numeric(v, ratio, s) - f_lo) / (f_hi - f_lo) for v in inside])
        i = np.arange(1, n + 1)
        ks = float(np.max(np.maximum(i / n - fc, fc - (i - 1) / n)))
    return esd_max, esd_min, s, ks


# Tracy-Widom beta=1 quantiles as tabulated to 4 decimals in the literature (Painleve II computations, e.g.
# A. Bejan 2005, "Largest eigenvalues and sample covariance matrices", tables of F1 percentiles; Johnstone
# 2001, Ann. Statist. 29, uses the same values to 2 decimals): F1^-1(0.90) = 0.4501, F1^-1(0.95) = 0.9793,
# F1^-1(0.99) = 2.0234. scipy has no Tracy-Widom, so these are the independent reference. Our quadrature
# gives 0.450143, 0.979316, 2.023449. The gtest suite also checks the F1 mean -1.2065335745820 and
# variance 1.6077810345810 (Bornemann 2010), which pin the whole distribution to ~1e-10.
TW1_QUANTILES = {0.90: 0.4501, 0.95: 0.9793, 0.99: 2.0234}


@pytest.mark.parametrize("case", CASES, ids=[f"{k}-{s[0]}x{s[1]}-{z}" for k, s, z in CASES])
def test_mp_tw_w1(results, case):
    esd, esd_rand, payload, got = results[case]
    esd_max, esd_min, s, ks = mp_reference(esd, esd_rand, payload["weights_std"], payload["Q"], payload["M"])
    # Same arithmetic on the same inputs: 1e-12 relative.
    assert rel(got["mp_esd_max"], esd_max) < 1e-12
    assert abs(got["mp_esd_min"] - esd_min) <= 1e-12 * esd_max
    assert rel(got["mp_bulk_std"], s) < 1e-12
    # Closed-form CDF vs adaptive quadrature (quad tolerance 1e-12; the conditioning divides by the
    # window mass, ~1): 1e-9 absolute on the KS distance.
    assert abs(got["mp_ks"] - ks) < 1e-9
    # W1 against scipy (same merged-CDF formula; summation order only): 1e-12 relative.
    assert rel(got["w1"], scipy_stats.wasserstein_distance(esd, esd_rand)) < 1e-12
    # tw_esd_bound from metrics.md with our quantile (the quantile itself is checked below).
    N, M, p = payload["N"], payload["M"], payload["p"]
    a = math.sqrt(N - 1) + math.sqrt(M)
    b = 1 / math.sqrt(N - 1) + 1 / math.sqrt(M)
    c = got["mp_bulk_std"] ** 2 / N
    bound = c * a * a + c * a * b ** (1 / 3) * got["tw1_quantile_0995"]
    assert rel(got["tw_esd_bound"], bound) < 1e-12


def test_tw1_quantile_against_literature():
    got = run_tool({"esd": [1.0, 2.0]})
    # 0.995 quantile (the default p = 0.005 of tw_esd_bound): 2.4223 to 4 decimals; our Bornemann
    # quadrature gives 2.42232658590, unchanged to 1e-12 between 96 and 160 nodes (self-consistency, 1e-8).
    assert abs(got["tw1_quantile_0995"] - 2.4223) < 6e-5
    assert abs(got["tw1_quantile_0995"] - 2.4223265859) < 1e-8


@pytest.mark.parametrize("q,expected", sorted(TW1_QUANTILES.items()))
def test_tw1_quantiles_table(q, expected):
    # The tool prints only the 0.995 quantile; the others are recovered from tw_esd_bound (p = 1 - q),
    # which is affine in the quantile: bound = mu + s * F1^-1(1 - p).
    N, M, std = 101, 100, 1.0
    got = run_tool({"esd": [1.0, 2.0], "esd_rand": [1.0], "weights_std": std, "Q": N / M, "N": N, "M": M,
                    "p": 1 - q})
    a = math.sqrt(N - 1) + math.sqrt(M)
    b = 1 / math.sqrt(N - 1) + 1 / math.sqrt(M)
    bulk = got["mp_bulk_std"]
    c = bulk**2 / N
    quantile = (got["tw_esd_bound"] - c * a * a) / (c * a * b ** (1 / 3))
    # Table values have 4 decimals: agree to half a unit in the last place (+ rounding of the inversion).
    assert abs(quantile - expected) < 6e-5


def test_degenerate_inputs_give_nan():
    for esd in ([], [0.0, 0.0, 0.0], [1.0], [2.0, 2.0, 2.0]):
        got = run_tool({"esd": esd})
        for key in ("pl_alpha", "pl_esd_xmin", "pl_ks", "tpl_alpha", "tpl_lambda", "expon_lambda", "expon_ks"):
            assert got[key] is None, (esd, key)
    # powerlaw agrees: fewer than 2 distinct positive values -> NaN.
    _, (pl, _) = quiet_fit(np.array([0.0, 0.0, 3.0]), "power_law")
    assert math.isnan(pl.alpha)


def test_bad_input_exits_2():
    for text in ("not json", "[1, 2]", '{"esd": "x"}', '{"esd": [1, 2], "N": 0}', '{"esd": ["a"]}'):
        proc = subprocess.run([TOOL], input=text, capture_output=True, text=True, check=False)
        assert proc.returncode == 2, text
