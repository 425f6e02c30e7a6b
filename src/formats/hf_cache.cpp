#include "diffract/formats/hf_cache.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "diffract/core/error.hpp"

namespace fs = std::filesystem;

namespace diffract::formats {

std::string hf_cache_root() {
    if (const char* c = std::getenv("HF_HUB_CACHE"); c && *c) return c;
    if (const char* h = std::getenv("HF_HOME"); h && *h) return (fs::path(h) / "hub").string();
    const char* home = std::getenv("HOME");
    return (fs::path(home ? home : "/") / ".cache" / "huggingface" / "hub").string();
}

bool looks_like_model_id(std::string_view spec) {
    if (spec.empty() || spec.front() == '/' || spec.front() == '.' || spec.front() == '~') return false;
    const auto at = spec.find('@');
    const auto id = spec.substr(0, at);
    const auto slash = id.find('/');
    if (slash == std::string_view::npos || id.find('/', slash + 1) != std::string_view::npos) return false;
    std::error_code ec;
    if (fs::exists(fs::path(std::string(spec)), ec)) return false;
    // A path that looks local is one: its first component is a directory here ("fam/pretrainde"), or it
    // names a weight file ("org/model.safetensors"). Its absence is "no such file", not a cache miss.
    if (fs::is_directory(fs::path(std::string(id.substr(0, slash))), ec)) return false;
    for (const std::string_view ext : {".safetensors", ".gguf", ".bin", ".pt", ".pth", ".json"})
        if (id.ends_with(ext)) return false;
    return true;
}

std::string resolve_hf_cache(std::string_view model_id) {
    const auto at = model_id.find('@');
    const std::string id(model_id.substr(0, at));
    const std::string revision = at == std::string_view::npos ? "main" : std::string(model_id.substr(at + 1));
    if (revision.empty() || revision.find('/') != std::string::npos ||
        revision.find("..") != std::string::npos)
        throw_input_error(std::string(model_id), "", "invalid revision");
    std::string folder = "models--";
    for (char c : id) {
        if (c == '/')
            folder.append("--");
        else
            folder.push_back(c);
    }
    const fs::path root = hf_cache_root();
    const fs::path repo = root / folder;
    std::error_code ec;
    if (!fs::is_directory(repo, ec))
        throw_input_error(
            std::string(model_id), "",
            fmt::format(
                "model is not in the Hugging Face cache (looked in {}; no network access is attempted)",
                repo.string()));
    std::string commit = revision;
    const fs::path ref = repo / "refs" / revision;
    if (fs::is_regular_file(ref, ec)) {
        std::ifstream in(ref);
        std::getline(in, commit);
        while (!commit.empty() && (commit.back() == '\n' || commit.back() == '\r' || commit.back() == ' '))
            commit.pop_back();
    }
    const fs::path snapshot = repo / "snapshots" / commit;
    if (commit.empty() || commit.find('/') != std::string::npos || !fs::is_directory(snapshot, ec))
        throw_input_error(std::string(model_id), "",
                          fmt::format("revision '{}' is not in the Hugging Face cache ({})", revision,
                                      (repo / "snapshots").string()));
    return snapshot.string();
}

}  // namespace diffract::formats
