// spectral_fit_tool: runs the spectral fits on one ESD for the Python parity tests.
//
// stdin: {"esd": [...], "esd_rand": [...], "weights_std": s, "Q": q, "N": n, "M": m, "p": 0.005,
//         "p_value_boot": 0, "min_tail": 50}      (only "esd" is required; min_tail: runner-up x_min)
// stdout: one JSON object: pl_*, tpl_*, expon_* always; mp_*, tw_esd_bound, w1 when esd_rand, weights_std,
// Q, N and M are all given; tw1_quantile_0995 always. NaN is written as null. Exit 2 on bad input.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "diffract/analysis/spectral_fits.hpp"

namespace da = diffract::analysis;
using nlohmann::json;

namespace {

json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

std::vector<double> read_array(const json& in, const char* key) {
    const json& a = in.at(key);
    if (!a.is_array()) throw std::runtime_error(std::string(key) + " must be an array");
    std::vector<double> out;
    out.reserve(a.size());
    for (const auto& v : a) {
        if (v.is_null()) {
            out.push_back(std::nan(""));
        } else if (v.is_number()) {
            out.push_back(v.get<double>());
        } else {
            throw std::runtime_error(std::string(key) + " must hold numbers");
        }
    }
    return out;
}

}  // namespace

int main() {
    json in;
    std::vector<double> esd, esd_rand;
    try {
        const std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
        in = json::parse(text);
        if (!in.is_object() || !in.contains("esd"))
            throw std::runtime_error("expected an object with \"esd\"");
        esd = read_array(in, "esd");
        if (in.contains("esd_rand")) esd_rand = read_array(in, "esd_rand");
        for (const char* k : {"weights_std", "Q", "p"})
            if (in.contains(k) && !in[k].is_number())
                throw std::runtime_error(std::string(k) + " must be a number");
        for (const char* k : {"N", "M", "p_value_boot", "min_tail"})
            if (in.contains(k) && !in[k].is_number_integer())
                throw std::runtime_error(std::string(k) + " must be an integer");
        for (const char* k : {"N", "M"})
            if (in.contains(k) && in[k].get<long long>() < 1)
                throw std::runtime_error(std::string(k) + " must be >= 1");
    } catch (const std::exception& e) {
        std::cerr << "spectral_fit_tool: bad input: " << e.what() << "\n";
        return 2;
    }

    json out;
    const da::TailFit pl = da::fit_power_law(esd);
    const da::TailFit tpl = da::fit_truncated_power_law(esd);
    const da::TailFit ex = da::fit_exponential(esd);
    out["pl_alpha"] = num(pl.alpha);
    out["pl_esd_xmin"] = num(pl.xmin);
    out["pl_ks"] = num(pl.ks);
    out["pl_n_tail"] = pl.n_tail;
    out["tpl_alpha"] = num(tpl.alpha);
    out["tpl_lambda"] = num(tpl.lambda);
    out["tpl_esd_xmin"] = num(tpl.xmin);
    out["tpl_ks"] = num(tpl.ks);
    out["expon_lambda"] = num(ex.lambda);
    out["expon_esd_xmin"] = num(ex.xmin);
    out["expon_ks"] = num(ex.ks);
    out["expon_n_tail"] = ex.n_tail;
    out["tpl_n_tail"] = tpl.n_tail;
    out["tpl_converged"] = tpl.converged;
    out["expon_converged"] = ex.converged;
    const da::XminRunnerUp second =
        da::power_law_runner_up(esd, static_cast<std::size_t>(std::max(0, in.value("min_tail", 50))));
    out["pl_alpha_xmin2"] = num(second.alpha);
    out["pl_esd_xmin2"] = num(second.xmin);
    out["pl_ks_gap"] = num(second.ks_gap);
    out["pl_n_tail_xmin2"] = second.n_tail;
    if (const int boot = in.value("p_value_boot", 0); boot > 0) {
        out["pl_p_value"] = num(da::tail_p_value(pl, esd, da::kTailPowerLaw, boot, 42));
        out["expon_p_value"] = num(da::tail_p_value(ex, esd, da::kTailExponential, boot, 42));
    }
    const double p = in.value("p", 0.005);
    out["tw1_quantile_0995"] = num(da::tracy_widom1_quantile(0.995));
    if (in.contains("esd_rand") && in.contains("weights_std") && in.contains("Q") && in.contains("N") &&
        in.contains("M")) {
        const double q = in["Q"].get<double>();
        const auto n = static_cast<std::size_t>(in["N"].get<long long>());
        const auto m = static_cast<std::size_t>(in["M"].get<long long>());
        const da::MarchenkoPasturFit mp =
            da::fit_marchenko_pastur(esd, esd_rand, in["weights_std"].get<double>(), q, m);
        out["mp_esd_max"] = num(mp.esd_max);
        out["mp_esd_min"] = num(mp.esd_min);
        out["mp_bulk_std"] = num(mp.bulk_std);
        out["mp_ks"] = num(da::mp_ks_distance(esd, mp, q));
        out["tw_esd_bound"] = num(da::tw_esd_bound(n, m, mp.bulk_std, p));
        out["w1"] = num(da::wasserstein1(esd, esd_rand));
    }
    std::cout << out.dump() << "\n";
    return 0;
}
