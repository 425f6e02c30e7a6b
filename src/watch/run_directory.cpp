#include "diffract/watch/run_directory.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "diffract/core/error.hpp"
#include "diffract/core/json_bounded.hpp"
#include "diffract/core/output_path.hpp"
#include "diffract/core/pattern.hpp"
#include "diffract/core/step_name.hpp"

namespace diffract::watch {
namespace fs = std::filesystem;
namespace {

// trainer_state.json is a small file; anything much larger is not one.
constexpr std::uintmax_t kMaxTrainerState = 256u << 20;

const std::set<std::string> kWeightFiles = {"model.safetensors",         "model.safetensors.index.json",
                                            "pytorch_model.bin",         "pytorch_model.bin.index.json",
                                            "adapter_model.safetensors", "adapter_model.bin"};
const std::set<std::string> kOneFileExtensions = {".safetensors", ".gguf", ".bin", ".pt", ".pth"};

// Nanoseconds since the Unix epoch (file_clock's own epoch is not: its times can be negative).
std::int64_t mtime_ns(const fs::file_time_type& t) {
    const auto sys = std::chrono::file_clock::to_sys(t);
    return std::chrono::duration_cast<std::chrono::nanoseconds>(sys.time_since_epoch()).count();
}

}  // namespace

std::optional<std::int64_t> step_in_name(const std::string& name) {
    const auto key = parse_step(name);
    if (!key || key->unit != "step") return std::nullopt;
    return key->exact;
}

bool is_model_directory(const fs::path& dir) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        const auto name = e.path().filename().string();
        if (kWeightFiles.count(name) || e.path().extension() == ".safetensors" ||
            e.path().extension() == ".gguf")
            return true;
    }
    return false;
}

namespace {

// "model-00001-of-00004.safetensors": a shard of one checkpoint, not a checkpoint of the run.
bool is_shard_name(const std::string& name) {
    static const Pattern shard(R"(\d+-of-\d+)", "shard name");
    return shard.search(name);
}

// The step as its digits say (never through a double, which merges steps above 2^53); a step too large
// for 64 bits is no step (a name, not a training run's counter).

// global_step of a trainer_state.json; nullopt when the file does not parse or holds none.
std::optional<std::int64_t> trainer_global_step(const fs::path& file) {
    std::error_code ec;
    const auto size = fs::file_size(file, ec);
    if (ec || size > kMaxTrainerState) return std::nullopt;
    std::ifstream in(file, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return parse_trainer_state(text);
}

}  // namespace

std::optional<std::int64_t> parse_trainer_state(std::string_view text) {
    if (json_depth(text) > kMaxJsonDepth) return std::nullopt;
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("global_step")) return std::nullopt;
    const auto& g = j["global_step"];
    // An unsigned value above INT64_MAX is an integer to nlohmann too: refused, not wrapped.
    if (g.is_number_unsigned()) {
        const auto u = g.get<std::uint64_t>();
        if (u > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
        return static_cast<std::int64_t>(u);
    }
    if (!g.is_number_integer() || g.get<std::int64_t>() < 0) return std::nullopt;
    return g.get<std::int64_t>();
}

FileSignature file_signature(const fs::path& path) {
    FileSignature s;
    std::error_code ec;
    const auto add = [&](const fs::directory_entry& e) {
        std::error_code fe;
        if (!e.is_regular_file(fe)) return;
        const auto identity = file_identity(e.path().string());
        if (!identity) return;
        s.files.push_back({e.path().filename().string(), *identity});
        s.newest_ns = std::max({s.newest_ns, identity->mtime_ns, identity->ctime_ns});
    };
    if (fs::is_directory(path, ec)) {
        for (const auto& e : fs::directory_iterator(path, ec)) add(e);
    } else if (fs::exists(path, ec)) {
        add(fs::directory_entry(path, ec));
    }
    std::sort(s.files.begin(), s.files.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    return s;
}

double seconds_since_change(const FileSignature& signature) {
    const auto now = mtime_ns(fs::file_time_type::clock::now());
    return static_cast<double>(now - signature.newest_ns) * 1e-9;
}

std::vector<FoundCheckpoint> find_checkpoints(const std::string& run_dir, double settle_seconds) {
    std::error_code ec;
    if (!fs::is_directory(run_dir, ec))
        throw InputError(
            fmt::format("{}: not a directory (watch takes the directory a training run writes "
                        "its checkpoints into)",
                        run_dir));
    static const Pattern trainer_name(R"(checkpoint-(\d+))", "trainer checkpoint name");
    std::vector<FoundCheckpoint> found;
    std::vector<std::string> groups;
    const auto run = physical_path(run_dir);
    for (const auto& e : fs::directory_iterator(run_dir, ec)) {
        FoundCheckpoint c;
        c.name = e.path().filename().string();
        c.path = e.path().string();
        std::error_code fe;
        if (e.is_directory(fe)) {
            c.trainer = trainer_name.full_match(c.name);
            const auto step = step_in_name(c.name);  // checkpoint-<N>: N, as for every name
            if (!step) continue;
            c.step = *step;
            // A link up the tree (to "/", to "..") holds the run itself: never a checkpoint, and it
            // would hold any --out too. Left out with a warning rather than blocking the watch.
            if (const auto target = physical_path(c.path);
                std::mismatch(target.begin(), target.end(), run.begin(), run.end()).first == target.end()) {
                c.ignored =
                    fmt::format("links to {}, which holds the run directory: not a checkpoint; left out",
                                target.string());
                found.push_back(std::move(c));
                continue;
            }
            const bool weights = is_model_directory(e.path());
            if (!c.trainer && !weights) continue;  // a directory named like a step, but not a model (yet)
            c.adapter = fs::exists(e.path() / "adapter_config.json", fe);
            c.signature = file_signature(e.path());
            if (!weights) {
                c.not_ready = "no weights yet";
            } else if (c.trainer) {
                const auto state = e.path() / "trainer_state.json";
                if (!fs::exists(state, fe)) {
                    c.not_ready = "no trainer_state.json yet (Trainer writes it after the weights)";
                } else if (const auto g = trainer_global_step(state)) {
                    c.step = *g;
                } else if (seconds_since_change(file_signature(state)) < settle_seconds) {
                    c.not_ready = "trainer_state.json is being written";
                } else {
                    throw InputError(
                        fmt::format("{}: not a trainer_state.json with a global_step (a JSON "
                                    "object whose global_step is a non-negative integer)",
                                    state.string()));
                }
            }
        } else if (e.is_regular_file(fe)) {
            if (!kOneFileExtensions.count(e.path().extension().string()) || is_shard_name(c.name)) continue;
            const auto step = step_in_name(e.path().stem().string());
            if (!step) continue;
            c.step = *step;
            c.signature = file_signature(e.path());
        } else {
            continue;
        }
        found.push_back(std::move(c));
    }
    std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
        return a.step != b.step ? a.step < b.step : a.name < b.name;
    });
    return found;
}

}  // namespace diffract::watch
