// `edit rewind` as one job for every front end (the CLI, Python, the sweeps' candidates): which heads
// (a list, a heads file, or the lowest fraction of compare's ranking against the base and an optional
// reference), then the rewind of the model or, with as_lora, of its LoRA adapter. With unit experts:
// which experts of a mixture of experts (the lowest fraction of compare's expert ranking, or those the
// selection names: --layers, --experts), then their rewind. A front end fills
// the struct from its arguments and prints or returns the outcome; adding an option touches this
// struct, its docs and tests.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "diffract/analysis/head_ranking.hpp"
#include "diffract/edit/edit.hpp"
#include "diffract/run/options.hpp"

namespace diffract::run {

struct RewindJob {
    std::string out;
    const formats::Checkpoint* base = nullptr;
    const formats::Checkpoint* model = nullptr;      // BASE+ADAPTER with as_lora
    const formats::Checkpoint* reference = nullptr;  // the importance score's reference (optional)
    // Exactly one: the fraction of heads to rewind (lowest ranked), a heads file, or a list.
    std::optional<double> fraction;
    std::string heads_file;
    std::optional<std::vector<edit::RewindHead>> heads;
    analysis::HeadRankOptions ranking;
    edit::RewindUnit unit = edit::RewindUnit::heads;
    edit::RouterRows router = edit::RouterRows::keep;  // experts: their router rows
    edit::KvPolicy kv = edit::KvPolicy::all;
    edit::OBias o_bias = edit::OBias::keep;
    bool as_lora = false;  // write the adapter with the rewound heads' factors zeroed
    edit::EditCommon common;
    // The ranking's compare (threads, memory budget, store; its selection is the edit's).
    RunOptions run;
    // The choice of heads: exactly one of fraction, heads_file and heads, and a list naming at least one
    // head; of experts: the fraction or experts named by the selection, never a heads list, and not as
    // a LoRA adapter. Throws InputError otherwise. Needs only those fields and common.selection, so a
    // front end calls it before opening the checkpoints (rewind calls it again).
    void check() const;
};

struct RewindOutcome {
    edit::EditSummary summary;
    std::vector<edit::RewindHead> heads;      // rewound, in rank order (file or list order when given)
    std::vector<edit::RewindExpert> experts;  // unit experts: rewound, in rank (or layer, expert) order
};

// Throws InputError before writing anything when the choice of heads is not exactly one or a list
// names none.
RewindOutcome rewind(const RewindJob& job);

}  // namespace diffract::run
