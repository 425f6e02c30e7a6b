// Content identity: what stored results are keyed by.
//
// A tensor's content id is "<dtype>/<shape>/<XXH3-128 of every byte of its data>": two tensors share
// results exactly when the bytes an analysis reads are equal. Hashing reads the whole model once, at
// memory bandwidth when it is in the page cache and at disk speed when not (docs/store.md gives the
// measured cost). Every run hashes its inputs: a file's (device, inode, size, mtime, ctime) does not prove
// its bytes (a write through a shared memory map can leave all five unchanged), so the stat-keyed hash
// cache is used only when DIFFRACT_REUSE_FILE_HASHES=1 (docs/store.md). A result is stored only if the
// tensors it was computed from still hash to the ids the run started with (check_unchanged): a file
// rewritten in place while it is read ends the run as bad input instead of storing the new bytes'
// results under the old bytes' id.
//
// A LoRA-merged tensor (TensorInfo::low_rank: bytes computed from a base tensor and two factors) is
// identified by what its bytes are computed from: "<dtype>/<shape>/lora-merge-v1:<XXH3-128 of the base
// tensor's, B's and A's content ids, the scale and the layout>". Its bytes are a function of those
// inputs and of the merge's arithmetic (versioned in the prefix), so the id is as exact as a hash of
// the bytes, and costs O(r·(m + n)) instead of forming the m × n merge; it is never equal to the id of a
// merged file's bytes, so results of the two are never shared either way.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "diffract/core/tensor.hpp"

namespace diffract::formats {
struct Checkpoint;
}

namespace diffract::store {
class Store;
}

namespace diffract::run {

using ContentIds = std::unordered_map<const TensorInfo*, std::string>;

// The content id of each of `tensors` (duplicates allowed), hashed on `threads` threads, with the
// hashes of file-backed tensors cached in `cache` when given. `progress`: show a progress line.
ContentIds content_ids(const std::vector<const TensorInfo*>& tensors, store::Store* cache, int threads,
                       bool progress);

// The content id of `t`'s bytes as they are now (one thread, no cache).
std::string content_id_now(const TensorInfo& t);

// Throws InputError naming the file and tensor unless `t` still has content id `id`. (A read past the end
// of a truncated file is caught separately: core/mapped_file.hpp, check_mapped_inputs_intact.)
void check_unchanged(const TensorInfo& t, const std::string& id);

// Hashes `tensors` of `ck` and records in `db` that the model, under this run's name, holds them.
ContentIds identify_model(store::Store& db, const formats::Checkpoint& ck,
                          const std::vector<const TensorInfo*>& tensors, int threads, bool progress);

}  // namespace diffract::run
