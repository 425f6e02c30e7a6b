// diffract generate --out DIR: the deterministic synthetic model family (see synthetic_family.hpp).
#include <map>
#include <string>

#include <fmt/format.h>

#include "commands/commands.hpp"
#include "commands/run_options.hpp"
#include "diffract/core/error.hpp"
#include "diffract/synth/synthetic_family.hpp"

namespace diffract::cli {
namespace {

struct GenerateArgs {
    std::string out;
    synth::FamilyOptions o;
    std::string dtype = "BF16";
    std::string preset;
    double shard_mb = 0;
};

// The preset's shapes, except where a shape flag was given: `--preset 7b --layers 2` is the 7B's
// matrices in two blocks (what a quick benchmark wants), not a flag silently dropped.
void apply_preset(GenerateArgs& a, const std::map<std::string, const CLI::Option*>& flags) {
    auto& o = a.o;
    if (a.preset.empty() || a.preset == "tiny") return;
    struct Shape {
        int layers, hidden, heads, kv_heads, intermediate, vocab;
    };
    Shape p{};
    if (a.preset == "1b")  // OLMo-2 1B shapes
        p = {16, 2048, 16, 16, 8192, 100352};
    else if (a.preset == "7b")  // OLMo-2 7B shapes
        p = {32, 4096, 32, 32, 11008, 100352};
    else
        throw InputError(fmt::format("--preset: unknown preset '{}' (expected tiny, 1b or 7b)", a.preset));
    auto set = [&](const char* flag, auto& field, int value) {
        if (flags.at(flag)->count() == 0) field = value;
    };
    set("--layers", o.layers, p.layers), set("--hidden", o.hidden, p.hidden),
        set("--heads", o.heads, p.heads);
    // --heads without --kv-heads keeps full attention (0: as many key/value heads as heads).
    set("--kv-heads", o.kv_heads, flags.at("--heads")->count() ? 0 : p.kv_heads);
    set("--intermediate", o.intermediate, p.intermediate), set("--vocab", o.vocab, p.vocab);
}

}  // namespace

void add_generate(CLI::App& app) {
    auto a = std::make_shared<GenerateArgs>();
    auto* sub = app.add_subcommand("generate",
                                   "Write the deterministic synthetic model family with planted structure");
    sub->add_option("--out", a->out, "Output directory (must not exist)")->required();
    sub->add_option(
        "--preset", a->preset,
        "Shapes: tiny (default), 1b or 7b (OLMo-2 shapes; a shape flag given too overrides its value)");
    std::map<std::string, const CLI::Option*> shape_flags;
    shape_flags["--layers"] =
        sub->add_option("--layers", a->o.layers, "Transformer blocks")->capture_default_str();
    shape_flags["--hidden"] = sub->add_option("--hidden", a->o.hidden, "Hidden size")->capture_default_str();
    shape_flags["--heads"] = sub->add_option("--heads", a->o.heads, "Attention heads")->capture_default_str();
    shape_flags["--kv-heads"] =
        sub->add_option("--kv-heads", a->o.kv_heads, "Key/value heads (fewer than --heads: GQA)")
            ->capture_default_str();
    shape_flags["--intermediate"] =
        sub->add_option("--intermediate", a->o.intermediate, "MLP width")->capture_default_str();
    shape_flags["--vocab"] = sub->add_option("--vocab", a->o.vocab, "Vocabulary size")->capture_default_str();
    sub->add_option("--domains", a->o.domains, "CPT domains")->delimiter(',')->capture_default_str();
    sub->add_option("--reference", a->o.reference, "Reference domain (generic drift only)")
        ->capture_default_str();
    sub->add_option("--domain-heads", a->o.domain_heads_per_layer, "Rotated heads per layer per domain")
        ->capture_default_str();
    sub->add_option("--generic-heads", a->o.generic_heads_per_layer, "Generic-drift heads per layer")
        ->capture_default_str();
    sub->add_option("--dtype", a->dtype, "Storage dtype: BF16, F16 or F32")->capture_default_str();
    sub->add_option("--shard-mb", a->shard_mb, "Shard size in MB (0: one file per model)");
    sub->add_option("--seed", a->o.seed, "Seed")->capture_default_str()->check(unsigned_seed());
    sub->add_option("--models", a->o.only, "Write only these models (e.g. pretrained,math); default all")
        ->delimiter(',');
    on_run(sub, [a, shape_flags] {
        apply_preset(*a, shape_flags);
        const auto dt = dtype_from_name(a->dtype);
        if (!dt || (*dt != DType::BF16 && *dt != DType::F16 && *dt != DType::F32))
            throw InputError(fmt::format("--dtype: expected BF16, F16 or F32, found '{}'", a->dtype));
        a->o.dtype = *dt;
        a->o.max_shard_bytes = static_cast<std::uint64_t>(a->shard_mb * 1e6);
        synth::generate_family(a->out, a->o);
        return 0;
    });
}

}  // namespace diffract::cli
