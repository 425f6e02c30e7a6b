// diffract inspect PATH [--json]: format, architecture, head geometry and every tensor.
#include <algorithm>
#include <cstdio>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands/commands.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/json_text.hpp"
#include "diffract/formats/checkpoint.hpp"
#include "diffract/formats/checkpoint_description.hpp"

namespace diffract::cli {
namespace {

struct InspectArgs {
    std::string path;
    bool json = false;
};

// "r 8, lora_alpha 16, scale 2 (rslora)": the adapter's configured values, then what applies where
// rank_pattern / alpha_pattern give modules other values.
void print_adapter(const nlohmann::ordered_json& a) {
    auto text = [](const nlohmann::ordered_json& x) {  // 3 rather than 3.0, names unquoted
        return x.is_string() ? x.get<std::string>()
                             : (x.is_number_float() ? fmt::format("{}", x.get<double>()) : x.dump());
    };
    auto list = [&](const nlohmann::ordered_json& v) {
        std::vector<std::string> items;
        for (const auto& x : v) items.push_back(text(x));
        return fmt::format("{}", fmt::join(items, ", "));
    };
    fmt::print("adapter:      {} (PEFT LoRA on {})\n", a["path"].get<std::string>(),
               a["base"].get<std::string>());
    fmt::print("              r {}, lora_alpha {}{}{}; {} modules (ranks {}; alphas {})\n", text(a["r"]),
               text(a["lora_alpha"]), a["use_rslora"].get<bool>() ? ", rslora" : "",
               a["fan_in_fan_out"].get<bool>() ? ", fan_in_fan_out" : "", a["targets"].size(),
               list(a["ranks"]), list(a["alphas"]));
    const auto& tm = a["target_modules"];
    fmt::print("              target_modules: {}\n",
               tm.is_null() ? "(all)" : (tm.is_array() ? list(tm) : tm.get<std::string>()));
    if (!a["replaced"].empty()) fmt::print("              replaced whole: {}\n", list(a["replaced"]));
}

int run_inspect(const InspectArgs& a) {
    const auto ck = formats::open_checkpoint(a.path);
    for (const auto& w : ck.schema.warnings)
        std::fprintf(stderr, "diffract: warning: %s\n", one_line(ck.path + ": " + w).c_str());
    for (const auto& w : ck.warnings) std::fprintf(stderr, "diffract: warning: %s\n", one_line(w).c_str());
    const auto d = formats::describe_checkpoint(ck);
    if (a.json) {
        std::puts(json_text(d, 2).c_str());
        return 0;
    }
    fmt::print("model:        {}\npath:         {}\nformat:       {}\narchitecture: {} (family {})\n",
               ck.name, ck.path, formats::format_name(ck.format), ck.schema.architecture, ck.schema.family);
    if (ck.schema.heads) {
        const auto& g = *ck.schema.heads;
        fmt::print("heads:        {} query, {} key/value, head_dim {}, hidden {}\n", g.n_heads, g.n_kv_heads,
                   g.head_dim, g.hidden);
        if (g.latent)
            fmt::print("              latent attention: qk_nope {} + qk_rope {}, v_head_dim {}\n",
                       g.key_nope_dim(), g.qk_rope_head_dim, g.value_dim());
    } else {
        fmt::print("heads:        not split\n");
    }
    for (const auto& [component, tower] : ck.schema.towers) {
        const auto* g = tower.heads ? &*tower.heads : nullptr;
        fmt::print("{:<14}{}\n", fmt::format("{}:", model::component_name(component)),
                   g ? fmt::format("{} heads, head_dim {}, width {}", g->n_heads, g->head_dim, g->hidden)
                     : std::string("heads not split"));
    }
    if (const auto& e = d["experts"]; !e.is_null())
        fmt::print("experts:      {} routed in {} layers{}\n", e["routed"].get<int>(), e["layers"].get<int>(),
                   e["shared"].get<bool>() ? ", and shared experts" : "");
    if (const auto& q = d["quantization"]; !q.is_null()) {
        std::vector<std::string> kinds;
        for (const auto& [kind, n] : q["matrices"].items())
            kinds.push_back(fmt::format("{} × {}", n.dump(), kind));
        fmt::print("quantization: {}{}{}\n", q["scheme"].get<std::string>(), kinds.empty() ? "" : ": ",
                   fmt::join(kinds, "; "));
        if (!q["undecoded"].is_null())
            fmt::print("              not decoded: {}\n", q["undecoded"].get<std::string>());
    }
    if (d.contains("adapter")) print_adapter(d["adapter"]);
    fmt::print("tensors:      {} ({:.3f} M parameters)\n\n", ck.tensors.size(),
               static_cast<double>(d["parameters"].get<std::uint64_t>()) / 1e6);
    std::size_t dtype_width = 8;
    for (const auto& t : d["tensors"])
        dtype_width = std::max(dtype_width, t["dtype"].get<std::string>().size());
    fmt::print("{:<56} {:<{}} {:<16} {:<9} {:>5} {:<18} {:>6} {}\n", "name", "dtype", dtype_width, "shape",
               "component", "layer", "role", "expert", "file");
    for (const auto& t : d["tensors"]) {
        const auto kind = t["expert_kind"].get<std::string>();
        const std::string expert = !t["expert"].is_null() ? t["expert"].dump() : (kind.empty() ? "-" : kind);
        fmt::print("{:<56} {:<{}} {:<16} {:<9} {:>5} {:<18} {:>6} {}\n", t["name"].get<std::string>(),
                   t["dtype"].get<std::string>(), dtype_width,
                   shape_string(t["shape"].get<std::vector<std::int64_t>>()),
                   t["component"].get<std::string>(), t["layer"].is_null() ? "-" : t["layer"].dump(),
                   t["role"].get<std::string>(), expert, t["file"].get<std::string>());
    }
    return 0;
}

}  // namespace

void add_inspect(CLI::App& app) {
    auto args = std::make_shared<InspectArgs>();
    auto* sub =
        app.add_subcommand("inspect", "Format, architecture, head geometry and every tensor of a checkpoint");
    sub->add_option("path", args->path,
                    "safetensors, torch.save (.bin/.pt) or GGUF file, HF model directory, or org/name[@rev] "
                    "in the HF cache")
        ->required();
    sub->add_flag("--json", args->json, "Print one JSON object (format, architecture, tensors)");
    on_run(sub, [args] { return run_inspect(*args); });
}

}  // namespace diffract::cli
