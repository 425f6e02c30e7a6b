// diffract generate --out DIR: the deterministic synthetic model family (see synthetic_family.hpp).
#include <map>
#include <set>
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

}  // namespace

void add_generate(CLI::App& app) {
    auto a = std::make_shared<GenerateArgs>();
    auto* sub = app.add_subcommand("generate",
                                   "Write the deterministic synthetic model family with planted structure");
    sub->add_option("--out", a->out, "Output directory (must not exist)")->required();
    sub->add_option(
        "--preset", a->preset,
        "Shapes: tiny (default), 1b or 7b (OLMo-2 shapes; a shape flag given too overrides its value)");
    std::map<std::string, const CLI::Option*> shape_flags;  // field name -> its flag
    shape_flags["layers"] =
        sub->add_option("--layers", a->o.layers, "Transformer blocks")->capture_default_str();
    shape_flags["hidden"] = sub->add_option("--hidden", a->o.hidden, "Hidden size")->capture_default_str();
    shape_flags["heads"] = sub->add_option("--heads", a->o.heads, "Attention heads")->capture_default_str();
    shape_flags["kv_heads"] =
        sub->add_option("--kv-heads", a->o.kv_heads, "Key/value heads (fewer than --heads: GQA)")
            ->capture_default_str();
    shape_flags["intermediate"] =
        sub->add_option("--intermediate", a->o.intermediate, "MLP width")->capture_default_str();
    shape_flags["vocab"] = sub->add_option("--vocab", a->o.vocab, "Vocabulary size")->capture_default_str();
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
        std::set<std::string> given;
        for (const auto& [field, flag] : shape_flags)
            if (flag->count()) given.insert(field);
        synth::apply_preset(a->o, a->preset, given);
        a->o.dtype = synth::parse_family_dtype(a->dtype);
        a->o.max_shard_bytes = synth::family_shard_bytes(a->shard_mb);
        synth::generate_family(a->out, a->o);
        return 0;
    });
}

}  // namespace diffract::cli
