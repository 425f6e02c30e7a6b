// Every sweep's options as the CLI and Python spell them, turned into the library's structures in
// one place: both front ends validate and word errors alike, and fingerprint the resume journal
// alike, so a sweep started from one resumes from the other.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "diffract/sweep/sweep.hpp"

namespace diffract::sweep {

struct SweepOptions {
    std::string out, eval, select_eval, report_eval, score_key;
    // The interpreter `{python}` stands for in the evaluation commands (EvalCommand::python): the front
    // end's own (Python's sys.executable; the CLI's $DIFFRACT_PYTHON, else python3 found on PATH).
    std::string python;
    double eval_timeout = kDefaultEvalTimeout;  // seconds per evaluation; 0: no limit
    bool keep = false;
    std::string max_shard_size = "5G";
    std::int64_t max_candidates = edit::kDefaultMaxCandidates;  // refuse larger grids and sweeps
    bool per_head = false;
    run::RunOptionText run;
    // rewind and rewind-each
    std::string base, model, reference, orders = "importance,random", scale_scope = "global",
                                        kv_policy = "all";
    // heads, or experts (a mixture of experts' routed experts); empty: edit::rewind_unit_of.
    std::string unit;
    int seeds = 5;
    std::uint64_t seed = 0;
    std::string fractions = std::string(kind_info(Kind::rewind).grid);
    // validate (with the rewind options above; seeds and seed: the random sets)
    std::string second_reference;
    int k = 0;  // heads per set; 0: a quarter of the heads
    // The score's direction, "higher" or "lower" is better; empty: the one the score key implies
    // (score_direction.hpp), required by validate and by a sweep that picks a best x.
    std::string direction;
    // truncate
    std::string keeps = std::string(kind_info(Kind::truncate).grid);
    // interpolate
    std::string a, b, omegas = std::string(kind_info(Kind::interpolate).grid);
};

// The configuration carries the journal fingerprint: the kind, the evaluations, the selection and that
// kind's own inputs.
SweepConfig sweep_config(const SweepOptions& o, Kind kind);
// Each kind's parameters with its checkpoints, which the front end opened from o.base, o.model,
// o.reference (or o.a, o.b) after sweep_config: those strings stay the journal's fingerprint.
RewindSweep rewind_sweep(const SweepOptions& o, formats::Checkpoint base, formats::Checkpoint model,
                         std::optional<formats::Checkpoint> reference);
ValidateSweep validate_sweep(const SweepOptions& o, formats::Checkpoint base, formats::Checkpoint model,
                             std::optional<formats::Checkpoint> reference,
                             std::optional<formats::Checkpoint> second_reference);
TruncateSweep truncate_sweep(const SweepOptions& o, formats::Checkpoint base, formats::Checkpoint model);
InterpolateSweep interpolate_sweep(const SweepOptions& o, formats::Checkpoint a, formats::Checkpoint b);

}  // namespace diffract::sweep
