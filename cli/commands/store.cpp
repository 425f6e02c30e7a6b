// diffract store list|erase|merge, and diffract export: the results store from the command line.
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands/commands.hpp"
#include "diffract/core/atomic_file.hpp"
#include "diffract/core/csv_field.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/json_text.hpp"
#include "diffract/core/output_path.hpp"
#include "diffract/run/analyze.hpp"
#include "diffract/store/store.hpp"

namespace diffract::cli {
namespace {

struct StoreArgs {
    std::string store = store::kDefaultStorePath;
    std::string model;
    std::vector<std::string> fields;
    std::string other;
    std::string format = "csv";
    std::string out;
};

int run_export(const StoreArgs& a) {
    if (a.format != "csv" && a.format != "jsonl")
        throw InputError(fmt::format("--format: expected csv or jsonl, found '{}'", a.format));
    if (!a.out.empty() && a.out != "-") {
        check_output_path(a.out, {a.store});
        check_output_kind(a.out, OutputKind::file);
    }
    store::Store db(a.store, store::StoreMode::read_only);
    // Nor over a checkpoint the store has read (exporting next to a model is fine; over it is not).
    if (!a.out.empty() && a.out != "-") check_output_path(a.out, db.input_paths());
    std::string out = a.format == "csv" ? "model,other,tensor,block,field,config,value,vector\n" : "";
    db.for_each_result([&](const store::ResultRow& r) {
        if (a.format == "csv") {
            std::string vec;
            for (std::size_t i = 0; i < r.vec.size(); ++i) vec += (i ? " " : "") + format_value(r.vec[i]);
            out += fmt::format("{},{},{},{},{},{},{},{}\n", csv_field(r.model), csv_field(r.other),
                               csv_field(r.tensor), r.block, r.field, csv_field(r.config),
                               r.vec.empty() ? format_value(r.value.value_or(std::nan(""))) : "", vec);
        } else {
            nlohmann::ordered_json j = {{"model", r.model}, {"other", r.other}, {"tensor", r.tensor},
                                        {"block", r.block}, {"field", r.field}, {"config", r.config}};
            if (!r.vec.empty())
                j["vector"] = r.vec;
            else
                j["value"] = r.value ? nlohmann::ordered_json(*r.value) : nlohmann::ordered_json(nullptr);
            out += json_text(j) + "\n";  // non-UTF-8 names: U+FFFD, never a failed dump
        }
    });
    if (a.out.empty() || a.out == "-")
        fmt::print("{}", out);
    else
        write_file_atomically(a.out, out);
    return 0;
}

}  // namespace

void add_store(CLI::App& app) {
    auto a = std::make_shared<StoreArgs>();
    auto* sub = app.add_subcommand("store", "List, erase or merge results in the store");
    sub->require_subcommand(1);
    sub->add_option("--store", a->store, "Results store")->capture_default_str();
    // `store list --store S` as well as `store --store S list`: the subcommands (which inherit this)
    // hand options they do not know to `store`.
    sub->fallthrough();
    auto* list = sub->add_subcommand("list", "Models and fields in the store");
    on_run(list, [a] {
        store::Store db(a->store, store::StoreMode::read_only);
        fmt::print("models:\n");
        for (const auto& m : db.models())
            fmt::print("  {:<24} {:>6} tensors {:>8} results  {}\n", m.name, m.tensors, m.results, m.path);
        fmt::print("fields:\n");
        for (const auto& [f, n] : db.field_counts()) fmt::print("  {:<24} {:>8}\n", f, n);
        return 0;
    });
    auto* erase =
        sub->add_subcommand("erase", "Erase a model's results, or fields and what was computed from them");
    erase->add_option("--model", a->model, "Model name (exact)");
    erase->add_option("--fields", a->fields, "Fields to erase (with their dependents)")->delimiter(',');
    on_run(erase, [a] {
        store::Store db(a->store);
        if (a->fields.empty() && a->model.empty())
            throw InputError("store erase: give --model and/or --fields");
        const auto n = a->fields.empty() ? db.erase_model(a->model)
                                         : db.erase_fields(analysis::dependents_of(a->fields), a->model);
        fmt::print("erased {} results\n", n);
        return 0;
    });
    auto* merge = sub->add_subcommand("merge", "Merge another store into this one");
    merge->add_option("other", a->other, "The store to merge from")->required();
    on_run(merge, [a] {
        store::Store db(a->store);
        fmt::print("merged {} results\n", db.merge_from(a->other));
        return 0;
    });
}

void add_export(CLI::App& app) {
    auto a = std::make_shared<StoreArgs>();
    auto* sub = app.add_subcommand("export", "Write every stored result as CSV or JSON Lines");
    sub->add_option("--store", a->store, "Results store")->capture_default_str();
    sub->add_option("--format", a->format, "csv or jsonl")->capture_default_str();
    sub->add_option("--out", a->out, "Output file (default: stdout)");
    on_run(sub, [a] { return run_export(*a); });
}

}  // namespace diffract::cli
