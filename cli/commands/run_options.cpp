#include "commands/run_options.hpp"

#include <charconv>
#include <cstdint>

namespace diffract::cli {

void add_selection_options(CLI::App* sub, run::RunOptionText& a) {
    sub->add_option("--roles", a.roles,
                    "Only these roles (comma-separated: "
                    "attn_q,attn_k,attn_v,attn_o,attn_qkv,mlp_gate,mlp_up,mlp_down,mlp_gate_up,embed,lm_head,"
                    "norm,attn_q_a,attn_kv_a,attn_kv_b,router,shared_expert_gate,other)");
    sub->add_option("--layers", a.layers, "Only these layers (e.g. 0-3,7)");
    sub->add_option("--experts", a.experts,
                    "Only these mixture-of-experts experts (e.g. 0-7,12; 'shared' for the shared experts)");
    sub->add_option("--component", a.components,
                    "Only these components (comma-separated: language,vision,audio,projector)");
    sub->add_option("--match", a.match, "Only tensors whose name matches this regex");
    sub->add_option("--exclude", a.exclude, "Skip tensors whose name matches this regex");
}

void add_run_options(CLI::App* sub, run::RunOptionText& a) {
    sub->add_option("--threads", a.threads, "Worker threads (default, or 0: all cores)");
    sub->add_option("--max-memory", a.max_memory, "Working-memory budget, e.g. 8G (default: half of RAM)");
    sub->add_option("--store", a.store, "Results store (default .diffract/results.sqlite)");
    sub->add_option("--device", a.device, "cpu or cuda")->capture_default_str();
    sub->add_flag("--quiet", a.quiet, "No progress display (twice: no summary line either)");
    add_selection_options(sub, a);
}

void add_distribution_options(CLI::App* sub, run::RunOptionText& a) {
    sub->add_flag("--ship-inputs", a.ship_inputs,
                  "Under mpirun: rank 0 sends each rank the bytes of its share of the inputs (for hosts "
                  "without them: docs/distributed.md)");
}

CLI::Validator unsigned_seed() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            std::uint64_t v = 0;
            const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
            if (text.empty() || ec != std::errc() || end != text.data() + text.size())
                return "expected an integer in 0..2^64-1, found '" + text + "'";
            return "";
        },
        "UINT");
}

}  // namespace diffract::cli
