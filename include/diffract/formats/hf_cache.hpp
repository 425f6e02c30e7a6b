// Resolving a Hugging Face model id in the local cache, offline, as huggingface_hub lays it out:
//   $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub
//     models--ORG--NAME/refs/REVISION      a file holding a commit hash
//     models--ORG--NAME/snapshots/COMMIT/  the files of that commit
// "org/name" means revision "main"; "org/name@rev" names a ref or a commit hash.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace diffract::formats {

// True when `spec` has the shape of a model id (org/name[@rev]) and is not an existing path.
bool looks_like_model_id(std::string_view spec);

// The snapshot directory for the id. Throws InputError when the model or revision is not cached.
std::string resolve_hf_cache(std::string_view model_id);

// The cache root in use (for messages and tests).
std::string hf_cache_root();

}  // namespace diffract::formats
