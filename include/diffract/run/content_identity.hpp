// Content identity: what stored results are keyed by.
//
// A tensor's content id is "<dtype>/<shape>/<XXH3-128 of every byte of its data>": two tensors share
// results exactly when the bytes an analysis reads are equal. Hashing reads the whole model once, at
// memory bandwidth when it is in the page cache and at disk speed when not (docs/store.md gives the
// measured cost); the hash of each tensor's byte range is cached in the store by the file's
// (device, inode, size, mtime_ns, ctime_ns), so a re-run over unchanged files reads nothing.
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

// Hashes `tensors` of `ck` and records in `db` that the model, under this run's name, holds them.
ContentIds identify_model(store::Store& db, const formats::Checkpoint& ck,
                          const std::vector<const TensorInfo*>& tensors, int threads, bool progress);

}  // namespace diffract::run
