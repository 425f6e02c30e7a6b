// diffract inspect PATH [--json]: format, architecture, head geometry and every tensor.
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands/commands.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/json_text.hpp"
#include "diffract/formats/checkpoint.hpp"

namespace diffract::cli {
namespace {

struct InspectArgs {
    std::string path;
    bool json = false;
};

std::string dtype_label(const formats::Checkpoint& ck, const TensorInfo& t) {
    auto it = ck.unsupported_types.find(t.name);
    return it != ck.unsupported_types.end() ? it->second : std::string(dtype_name(t.dtype));
}

int run_inspect(const InspectArgs& a) {
    const auto ck = formats::open_checkpoint(a.path);
    // Validate the head geometry against every attention projection now, so a bad config is
    // reported here rather than half-way through an analysis.
    for (const auto& t : ck.tensors) model::head_blocks(ck.schema, t, model::classify_tensor(t.name).role);
    for (const auto& w : ck.schema.warnings)
        std::fprintf(stderr, "diffract: warning: %s\n", one_line(ck.path + ": " + w).c_str());

    if (a.json) {
        nlohmann::ordered_json out;
        out["model"] = ck.name;
        out["path"] = ck.path;
        out["format"] = formats::format_name(ck.format);
        out["architecture"] = ck.schema.architecture;
        out["family"] = ck.schema.family;
        if (ck.schema.heads) {
            const auto& g = *ck.schema.heads;
            out["heads"] = {{"num_attention_heads", g.n_heads},
                            {"num_key_value_heads", g.n_kv_heads},
                            {"head_dim", g.head_dim},
                            {"hidden_size", g.hidden}};
        } else {
            out["heads"] = nullptr;
        }
        out["tensors"] = nlohmann::ordered_json::array();
        for (const auto& t : ck.tensors) {
            const auto r = model::classify_tensor(t.name);
            out["tensors"].push_back(
                {{"name", t.name},
                 {"dtype", dtype_label(ck, t)},
                 {"shape", t.shape},
                 {"layer", r.layer ? nlohmann::ordered_json(*r.layer) : nlohmann::ordered_json(nullptr)},
                 {"role", model::role_name(r.role)},
                 {"file", t.path()}});
        }
        std::puts(json_text(out, 2).c_str());
        return 0;
    }
    fmt::print("model:        {}\npath:         {}\nformat:       {}\narchitecture: {} (family {})\n",
               ck.name, ck.path, formats::format_name(ck.format), ck.schema.architecture, ck.schema.family);
    if (ck.schema.heads) {
        const auto& g = *ck.schema.heads;
        fmt::print("heads:        {} query, {} key/value, head_dim {}, hidden {}\n", g.n_heads, g.n_kv_heads,
                   g.head_dim, g.hidden);
    } else {
        fmt::print("heads:        not split\n");
    }
    std::uint64_t params = 0;
    for (const auto& t : ck.tensors) params += static_cast<std::uint64_t>(t.numel());
    fmt::print("tensors:      {} ({:.3f} M parameters)\n\n", ck.tensors.size(),
               static_cast<double>(params) / 1e6);
    fmt::print("{:<56} {:<8} {:<16} {:>5} {:<10} {}\n", "name", "dtype", "shape", "layer", "role", "file");
    for (const auto& t : ck.tensors) {
        const auto r = model::classify_tensor(t.name);
        fmt::print("{:<56} {:<8} {:<16} {:>5} {:<10} {}\n", t.name, dtype_label(ck, t), shape_string(t.shape),
                   r.layer ? std::to_string(*r.layer) : "-", model::role_name(r.role), t.path());
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
