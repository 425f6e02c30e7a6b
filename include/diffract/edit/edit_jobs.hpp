// The edit command families as jobs (rewind, which ranks heads with compare, is run::RewindJob): one
// option struct each, filled by the CLI from its flags and by Python from its keywords, checked and
// run here. check() refuses what needs no input, so a front end calls it before opening a model;
// run_job() checks again and writes the output. Adding an option to an edit touches its struct,
// run_job, the docs and the tests; each front end binds the one field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "diffract/edit/edit.hpp"

namespace diffract::edit {

// What an edit job wrote: one checkpoint's summary, or the ωs of an interpolation grid (one checkpoint
// each, OUT/omega_X.XX), or a LoRA adapter's summary (truncate as_lora).
struct EditOutcome {
    std::optional<EditSummary> summary;
    std::vector<double> omegas;
    std::optional<LoraExportSummary> adapter;
};

// W = W_base + the best rank-k approximation of (W − W_base); k by exactly one of keep, rank, energy.
// as_lora: the rank-k deltas of the projections written as a PEFT adapter (rank required).
struct TruncateJob {
    std::string out;
    const formats::Checkpoint* base = nullptr;
    const formats::Checkpoint* model = nullptr;
    std::optional<double> keep, energy;
    std::optional<int> rank;
    bool as_lora = false;
    EditCommon common;
    void check() const;
};

// W = U_model diag(σ_base) V_modelᵀ.
struct TransplantJob {
    std::string out;
    const formats::Checkpoint* base = nullptr;
    const formats::Checkpoint* model = nullptr;
    EditCommon common;
    void check() const {}
};

// W = U diag(π(σ)) Vᵀ.
struct PermuteJob {
    std::string out;
    const formats::Checkpoint* model = nullptr;
    std::uint64_t seed = 42;
    EditCommon common;
    void check() const {}
};

// W = (1 − ω) A + ω B at one ω, or one checkpoint per ω of `grid` ("START:STOP:STEP"): exactly one.
struct InterpolateJob {
    std::string out;
    const formats::Checkpoint* a = nullptr;
    const formats::Checkpoint* b = nullptr;
    std::optional<double> omega;
    std::string grid;
    std::int64_t max_candidates = kDefaultMaxCandidates;
    EditCommon common;
    void check() const;
};

// mergekit's generalized task arithmetic of models' deltas from a base.
struct MergeJob {
    std::string out;
    const formats::Checkpoint* base = nullptr;
    std::vector<const formats::Checkpoint*> models;
    MergeOptions options;
    EditCommon common;
    void check() const {}
};

// A PEFT LoRA adapter merged into its base (`base`: a spec; "": the adapter's base_model_name_or_path).
struct MergeLoraJob {
    std::string out;
    std::string adapter, base;
    EditCommon common;
    void check() const {}
};

EditOutcome run_job(const TruncateJob& job);
EditOutcome run_job(const TransplantJob& job);
EditOutcome run_job(const PermuteJob& job);
EditOutcome run_job(const InterpolateJob& job);
EditOutcome run_job(const MergeJob& job);
EditOutcome run_job(const MergeLoraJob& job);

}  // namespace diffract::edit
