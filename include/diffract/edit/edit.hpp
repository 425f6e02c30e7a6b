// `edit`: writing modified checkpoints — rewind, truncate, transplant, permute, interpolate, merge.
//
// Every edit runs through one driver (run_edit): the output has the primary input's tensors, in its
// order, dtypes and shapes; a tensor the edit touches (selected, and of the kind the edit works on) is
// produced by the edit's callback, every other tensor is copied byte for byte. The driver streams
// through the checkpoint writer, one tensor at a time, so memory stays bounded by a few copies of the
// largest tensor whatever the model's size; the output directory appears only once complete, and never
// over an input. Values are computed in f64 and stored in the tensor's own dtype (bf16/f16/f8: round to
// nearest even).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "diffract/analysis/expert_ranking.hpp"
#include "diffract/analysis/head_ranking.hpp"
#include "diffract/analysis/selection.hpp"
#include "diffract/core/matrix.hpp"
#include "diffract/core/names.hpp"
#include "diffract/core/progress.hpp"
#include "diffract/core/table.hpp"
#include "diffract/edit/rewind_unit.hpp"
#include "diffract/formats/checkpoint.hpp"
#include "diffract/linalg/backend.hpp"

namespace diffract::edit {

// ---- The shared driver ----------------------------------------------------------------------------

// Which tensors an edit can touch (within the selection).
enum class Editable {
    none,             // copy everything (e.g. interpolation at ω = 0 or 1)
    any_float,        // every floating tensor (elementwise edits: interpolate, merge)
    matrices,         // floating tensors of two or more dimensions, viewed as shape[0] × rest (SVD edits)
    attention_heads,  // 2-D attention projections whose heads are known (rewind)
};

// One tensor being edited: the primary's tensor, the same-named tensor of each aligned input.
struct EditTensor {
    const TensorInfo* tensor = nullptr;
    std::vector<const TensorInfo*> inputs;  // in the order of EditJob::aligned
    model::TensorRole role;
    const model::ModelSchema* schema = nullptr;
    // With EditCommon::allow_nonfinite: the positions where the primary's tensor or an input holds
    // NaN/Inf (1 = masked), null when there are none. Edits read values through decode_masked.
    const std::vector<char>* nonfinite = nullptr;
};

using TensorEditFn = std::function<void(const EditTensor& t, std::span<std::byte> out)>;

struct EditCommon {
    analysis::Selection selection;                     // which tensors are edited (the rest is copied)
    bool per_head = false;                             // matrix edits: per head block of attention tensors
    std::uint64_t max_shard_bytes = 5'000'000'000ULL;  // output shard size
    std::map<std::string, std::string> extra_files;    // small files placed next to the weights
    linalg::Device device = linalg::Device::cpu;       // SVD backend
    // NaN/Inf in an edited tensor (of any input): refused (InputError naming file and tensor) unless
    // set; then such positions are left out of the edit (0 in every input while it computes) and the
    // output keeps the primary's stored value there (--allow-nonfinite). Either way no output entry
    // is NaN/Inf where the primary's was finite: an edited value overflowing the dtype is refused.
    bool allow_nonfinite = false;
    ProgressSink progress;  // when set: told of each tensor written (Python's progress=True)
};

// The options every edit takes as the CLI and Python spell them: the selection flags, --per-head,
// --max-shard-size 5G, --device, --allow-nonfinite (Python's EditArgs is this struct plus its progress).
struct EditCommonText : analysis::SelectionText {
    std::string max_shard_size = "5G";
    bool per_head = false;
    bool allow_nonfinite = false;
    std::string device = "cpu";
};

// EditCommon from its text (InputError naming the flag).
EditCommon parse_edit_common(const EditCommonText& text);

// What made an edited checkpoint (written to its diffract_edit.json with the inputs and counts).
struct EditRecord {
    std::string edit;           // "rewind", "truncate", ...
    nlohmann::json parameters;  // the edit's own parameters
};

struct EditJob {
    EditRecord record;
    const formats::Checkpoint* primary = nullptr;     // output layout; untouched tensors come from it
    std::vector<const formats::Checkpoint*> aligned;  // must hold each edited tensor with the same shape
    Editable editable = Editable::matrices;
    TensorEditFn edit;
    // Optional: whether the edit may change a planned tensor (given before anything is read). A tensor
    // it leaves as is is copied as stored instead of rewritten (a GGUF tensor keeps its quantised type)
    // and counted as copied, and a job that leaves every tensor as is writes an honest copy.
    std::function<bool(const EditTensor&)> touches;
    EditCommon common;
};

// Inputs whose tensor sets differ (a buffer one transformers version saves and another does not)
// follow one rule in every edit: a tensor the primary input has and another input lacks is carried
// from the primary unedited; a tensor only another input has is left out. Both are listed here and
// in diffract_edit.json. (Interpolation's primary is A, and B at omega = 1, so each endpoint is its
// input byte for byte.)
struct EditSummary {
    std::size_t edited = 0, copied = 0;
    // Of the edited (rewritten) tensors, those whose written bytes differ from the primary's (its plain
    // view for a quantised GGUF tensor): a rewind of heads whose update is zero rewrites a tensor without
    // changing it.
    std::size_t changed = 0;
    std::vector<std::string> only_in_primary;  // carried as is
    std::vector<std::string> only_in_other;    // "tensor (input name)": left out
};

// Writes `out_dir`: an HF model directory (safetensors) or, for a GGUF primary, a directory holding the
// edited GGUF under the primary's file name (formats/gguf_writer.hpp: metadata and untouched tensors
// byte for byte, edited tensors F32/F16/BF16/F64 in the stored RoPE layout), with the primary's
// other files and diffract_edit.json either way. Inputs may mix formats and namings: an aligned tensor
// is the primary's tensor of the same name or its counterpart (formats::counterpart); every tensor is
// read as its plain view (dequantised, logical row order). Throws InputError for a missing or
// differently-shaped aligned tensor (naming file and tensor), or an output that exists or would
// overwrite an input; on any failure no output directory is left behind.
EditSummary run_edit(const std::string& out_dir, const EditJob& job);

// EditJob::touches of the edits that combine their inputs elementwise (interpolate, merge): a tensor
// whose every aligned input holds the primary's stored bytes combines to itself, so it is copied.
bool inputs_differ(const EditTensor& e);

// Tensor values in f64 (into `out`, of t.numel() values), and back into a storage dtype.
std::vector<double> decode(const TensorInfo& t);
void decode_into(const TensorInfo& t, std::span<double> out);
// decode(t) for `t` = e.tensor or one of e.inputs, with 0 at the positions e.nonfinite masks.
std::vector<double> decode_masked(const EditTensor& e, const TensorInfo& t);
void decode_masked_into(const EditTensor& e, const TensorInfo& t, std::span<double> out);
void encode(std::span<const double> values, DType dtype, std::span<std::byte> out);

// A matrix edit: `inputs` are the primary's matrix, then each aligned input's (same shape, stored
// orientation); `unit` names the matrix ("tensor" or "tensor#attn_q:3") for seeding. Returns the new
// matrix (same shape). SVD edits are transpose-equivariant, so the stored orientation serves.
using MatrixFn =
    std::function<Matrix<double>(const std::vector<Matrix<double>>& inputs, const std::string& unit)>;
// Applies `fn` to the whole matrix, or with `per_head` to each head block of an attention tensor
// (non-attention tensors whole), and encodes the result into `out`.
void edit_matrices(const EditTensor& t, bool per_head, const MatrixFn& fn, std::span<std::byte> out);

// Runs an edit of Editable::matrices that applies `fn` through edit_matrices (per head with
// common.per_head).
EditSummary run_matrix_edit(const std::string& out_dir, const EditRecord& record,
                            const formats::Checkpoint& primary,
                            std::vector<const formats::Checkpoint*> aligned, const EditCommon& common,
                            const MatrixFn& fn);
// Adds Σ_{c ≥ first} s[c] u_c v_cᵀ into `out` (m × n): the SVD edits' reconstruction, with the
// singular vectors of `f` and the singular values `s` (paired by index, ascending order).
void add_components(const linalg::Svd& f, const std::vector<double>& s, std::size_t first,
                    Matrix<double>& out);

// "start:stop:step" (inclusive of stop within step/1e6), or a comma-separated list; throws InputError
// naming the flag, also when the grid has more than `max_count` values (counted before any is made).
inline constexpr std::int64_t kDefaultMaxCandidates = 1000;  // --max-candidates
std::vector<double> parse_grid(const std::string& text, const std::string& flag,
                               std::int64_t max_count = kDefaultMaxCandidates);
// --max-candidates: at least 1; throws InputError otherwise.
std::int64_t check_max_candidates(std::int64_t max_count);
// "Too many candidates" as the grid and sweep checks word it.
[[noreturn]] void throw_too_many_candidates(std::string_view what, double count, std::int64_t max_count);

// The bytes a checkpoint's tensors occupy (what a same-shaped edited copy writes).
std::uint64_t checkpoint_bytes(const formats::Checkpoint& ck);
// Throws InputError naming the nearest existing directory of `out_path` when its file system has
// fewer than `bytes` available ("<dir>: not enough free space for <what> (expected at least X bytes
// available, found Y)").
void check_free_space(const std::string& out_path, std::uint64_t bytes, std::string_view what);

// ---- LoRA (see formats/lora_adapter.hpp and docs/formats/lora.md) --------------------------------

// Writes `merged` (a BASE+ADAPTER checkpoint) as a plain checkpoint laid out as `base`: the merged
// tensors rounded into the base's dtypes, every other file carried from the base.
EditSummary merge_lora(const std::string& out_dir, const formats::Checkpoint& base,
                       const formats::Checkpoint& merged, const EditCommon& common);

struct LoraExportSummary {
    std::size_t modules = 0;                  // projection matrices in the adapter
    std::vector<std::string> not_in_adapter;  // floating tensors it does not represent
};
// Writes a PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors, F32) whose
// B·A is, for every selected 2-D projection (attention and MLP; not embeddings, heads or norms), the
// best rank-`rank` approximation of model - base (lora_alpha = r, so the scale is 1; matrices smaller
// than the rank keep their full rank through rank_pattern/alpha_pattern; GPT-2's Conv1D gives
// fan_in_fan_out). base_model_name_or_path is the base's absolute path.
// Refuses a missing rank and --per-head (no LoRA form) before reading anything.
LoraExportSummary truncate_as_lora(const std::string& out_dir, const formats::Checkpoint& base,
                                   const formats::Checkpoint& model, std::optional<int> rank,
                                   const EditCommon& common);

// merge_lora of a PEFT adapter directory and its base (`base_spec`; "": the adapter's
// base_model_name_or_path), both opened here.
EditSummary merge_lora_adapter(const std::string& out_dir, const std::string& base_spec,
                               const std::string& adapter_dir, const EditCommon& common);

// ---- Rewind ---------------------------------------------------------------------------------------

// GQA: a K/V block is shared by the query heads of its kv group. `all`: rewind it only when every
// query head of the group is rewound (default: a partly rewound group keeps the CPT K/V); `any`: when
// at least one is.
enum class KvPolicy { all, any };
inline constexpr NameTable<KvPolicy, 2> kKvPolicyNames{{{KvPolicy::all, "all"}, {KvPolicy::any, "any"}}};
KvPolicy parse_kv_policy(const std::string& text);

// The output projection's bias is added once for all heads, so no head owns a slice of it. `keep`
// (default): it stays the model's; `base`: a layer with at least one rewound head takes the base's.
enum class OBias { keep, base };
inline constexpr NameTable<OBias, 2> kOBiasNames{{{OBias::keep, "keep"}, {OBias::base, "base"}}};
OBias parse_o_bias(const std::string& text);

struct RewindHead {
    int layer = 0, head = 0;
    analysis::RankedHead ranked;  // rank and scores (NaN with --heads FILE)
    std::string source;           // the --heads file it was read from ("" otherwise)
    int line = 0;                 // its line there (0 otherwise)
};

// What a head rewind puts back: query heads, key/value blocks (under `kv`), and the weight entries of
// every rewound head block (Q/K/V rows, O columns), counted with the rewind's own head set.
struct RewoundAmount {
    std::int64_t query_heads = 0, kv_blocks = 0, parameters = 0;
};
RewoundAmount rewound_amount(const formats::Checkpoint& model, const std::vector<RewindHead>& heads,
                             KvPolicy kv, const analysis::Selection& selection);

// A random head set matched to `like`: as many query heads in each of as many key/value groups (the
// groups, and the heads within each, drawn with `seed`), so that it rewinds the same number of query
// heads, K/V blocks (under either K/V policy) and weight entries as `like`. Under MHA (groups of one)
// it is a random set of the same size. `scores` gives the heads and their groups (compare's rows).
std::vector<RewindHead> matched_random_heads(const std::vector<analysis::HeadRow>& scores,
                                             const std::vector<RewindHead>& like, std::uint64_t seed);

// Rewind takes its heads from exactly one of a fraction (ranked by compare) and a heads list; else
// InputError.
void check_rewind_heads_choice(bool fraction_given, bool heads_given);
// Ranks the heads (analysis::rank_heads) and returns the round(fraction · n) lowest-ranked, by rank.
std::vector<RewindHead> lowest_heads(const std::vector<analysis::HeadRow>& scores,
                                     const analysis::HeadRankOptions& ranking, double fraction);
// A CSV of layer,head rows, validated strictly: an optional header whose first fields are
// `layer,head`; rows whose first two fields are decimal integers (no sign, fraction or exponent);
// further columns ignored (so rewound_heads.csv reads back); '#' comment lines and blank lines
// skipped; no binary data or non-ASCII text outside comments; no row listed twice; at least one row.
// Errors name `label` and the line. read_heads_file also requires a regular file of at most 16 MiB.
std::vector<RewindHead> parse_heads_csv(std::string_view text, const std::string& label);
std::vector<RewindHead> read_heads_file(const std::string& path);
// Every head must exist in `model` (a layer with attention projections, a head index below the
// head count) and its layer must be one the selection edits; errors name the heads file and line
// (or the model, for heads not read from a file). rewind() checks this before writing anything.
void check_heads(const std::vector<RewindHead>& heads, const formats::Checkpoint& model,
                 const analysis::Selection& selection);
// rewound_heads.csv: layer,head,kv_head,kv_rewound,rank,key,importance,update_norm,ref_update_norm,
// o_bias (keep or base: what the layer's shared output-projection bias holds); _csv: its text.
Table rewound_heads_table(const std::vector<RewindHead>& heads, const formats::Checkpoint& model, KvPolicy kv,
                          OBias o_bias = OBias::keep);
std::string rewound_heads_csv(const std::vector<RewindHead>& heads, const formats::Checkpoint& model,
                              KvPolicy kv, OBias o_bias = OBias::keep);

// Copies `model` and overwrites the Q, K, V, O blocks of `heads` with `base`'s bytes (same dtype
// required), and the head's slices of the Q, K and V biases with them (separate, fused and
// interleaved layouts alike: a bias slice follows its weight block's output rows); the O bias as
// `o_bias` says. Writes rewound_heads.csv next to the weights.
EditSummary rewind(const std::string& out_dir, const formats::Checkpoint& base,
                   const formats::Checkpoint& model, const std::vector<RewindHead>& heads, KvPolicy kv,
                   const EditCommon& common, OBias o_bias = OBias::keep);

// Rewind written as a LoRA adapter (`rewind --as-lora`): `model` is BASE+ADAPTER; the output is the
// adapter directory (its files carried) with the factors of the rewound heads zeroed — B's rows of a
// Q/K/V head (A's columns under fan_in_fan_out), A's columns of an O head — and the Q/K/V bias slices
// of trained biases set to `base`'s, so that `base` + the written adapter has the base's values in
// every rewound block. Attention matrices the adapter does not touch already hold the base's values.
EditSummary rewind_adapter(const std::string& out_dir, const formats::Checkpoint& base,
                           const formats::Checkpoint& model, const std::vector<RewindHead>& heads,
                           KvPolicy kv, const EditCommon& common, OBias o_bias = OBias::keep);

// ---- Expert rewind (docs/experts.md) ----------------------------------------------------------------

// A layer's router holds one row (and bias entry) per routed expert: the logits that send tokens to
// it. `keep` (default): a rewound expert keeps the model's row, so the rewind changes only the
// experts' own bytes; `base`: the rewound experts' rows take the base's too.
enum class RouterRows { keep, base };
inline constexpr NameTable<RouterRows, 2> kRouterRowsNames{
    {{RouterRows::keep, "keep"}, {RouterRows::base, "base"}}};
RouterRows parse_router_rows(const std::string& text);

struct RewindExpert {
    int layer = 0;
    std::optional<int> expert;    // a routed expert's index; none: the layer's shared experts
    analysis::RankedHead ranked;  // rank and scores (NaN when chosen by the selection)
};

// The experts the selection names (--layers, --experts 0-7,shared, ...): each routed expert, and each
// layer's shared experts, one of whose matrices the selection admits, in (layer, expert) order.
std::vector<RewindExpert> selected_experts(const formats::Checkpoint& model,
                                           const analysis::Selection& selection);
// The routed experts ranked (analysis::rank_heads over compare's expert rows) and the
// round(fraction · n) lowest-ranked, by rank. Shared experts are never ranked against routed ones.
std::vector<RewindExpert> lowest_experts(const std::vector<analysis::ExpertRow>& scores,
                                         const analysis::HeadRankOptions& ranking, double fraction);
// What an expert rewind puts back: experts, and the weight entries of their selected tensors.
struct RewoundExperts {
    std::int64_t experts = 0, parameters = 0;
};
RewoundExperts rewound_expert_amount(const formats::Checkpoint& model,
                                     const std::vector<RewindExpert>& experts,
                                     const analysis::Selection& selection);
// A random set of routed experts matched to `like`: as many experts of each size (weight entries under
// the selection) as `like` has, drawn with `seed` from `pool`, so that it rewinds the same number of
// experts and weight entries.
std::vector<RewindExpert> matched_random_experts(const formats::Checkpoint& model,
                                                 const std::vector<RewindExpert>& pool,
                                                 const std::vector<RewindExpert>& like, std::uint64_t seed,
                                                 const analysis::Selection& selection);
// Copies `model` and gives every selected tensor of `experts` (their gate/up/down matrices and biases,
// written back into a packed tensor's slices) `base`'s values, and with RouterRows::base their router
// rows and bias entries. Every expert must exist in the model and the selection (InputError naming it
// otherwise, before anything is written). Writes rewound_experts.csv next to the weights: layer,
// expert,expert_kind,rank,key,importance,update_norm,ref_update_norm,parameters,router (keep or base).
EditSummary rewind_experts(const std::string& out_dir, const formats::Checkpoint& base,
                           const formats::Checkpoint& model, const std::vector<RewindExpert>& experts,
                           RouterRows router, const EditCommon& common);

// ---- SVD edits ------------------------------------------------------------------------------------

// How many singular values of the delta truncation keeps.
struct TruncateRule {
    enum class Kind { keep, rank, energy } kind = Kind::keep;
    double value = 1.0;  // keep: fraction f (k = ceil(f · min(m, n))); rank: k; energy: E
    int k_for(const std::vector<double>& s_ascending) const;
};
// The rule from the options as the front ends take them: exactly one of keep, rank and energy, else
// InputError.
TruncateRule truncate_rule(std::optional<double> keep, std::optional<int> rank, std::optional<double> energy);

// W = W_base + best rank-k approximation of (W − W_base).
EditSummary truncate(const std::string& out_dir, const formats::Checkpoint& base,
                     const formats::Checkpoint& model, const TruncateRule& rule, const EditCommon& common);
// W = U_model diag(σ_base) V_modelᵀ.
EditSummary transplant(const std::string& out_dir, const formats::Checkpoint& base,
                       const formats::Checkpoint& model, const EditCommon& common);
// W = U diag(π(σ)) Vᵀ, π a permutation seeded by (seed, matrix name).
EditSummary permute(const std::string& out_dir, const formats::Checkpoint& model, std::uint64_t seed,
                    const EditCommon& common);

// ---- Elementwise edits ----------------------------------------------------------------------------

// W = (1 − ω) A + ω B; ω = 0 and ω = 1 copy A's and B's bytes.
EditSummary interpolate(const std::string& out_dir, const formats::Checkpoint& a,
                        const formats::Checkpoint& b, double omega, const EditCommon& common);
// One interpolation per ω of `grid` ("START:STOP:STEP", parse_grid, at most max_candidates), each in
// OUT/omega_X.XX, written as one directory (all or nothing) after checking the free space. Returns
// the ωs.
std::vector<double> interpolate_grid(const std::string& out_dir, const formats::Checkpoint& a,
                                     const formats::Checkpoint& b, const std::string& grid,
                                     std::int64_t max_candidates, const EditCommon& common);
// "omega_0.25": the directory of one ω of a grid (two decimals when they are exact).
std::string omega_dir(double omega);

// mergekit's generalized task arithmetic.
enum class MergeMethod { task_arithmetic, ties, dare_linear, dare_ties };
inline constexpr NameTable<MergeMethod, 4> kMergeMethodNames{
    {{MergeMethod::task_arithmetic, "task_arithmetic"},
     {MergeMethod::ties, "ties"},
     {MergeMethod::dare_linear, "dare_linear"},
     {MergeMethod::dare_ties, "dare_ties"}}};
MergeMethod parse_merge_method(const std::string& text);

struct MergeOptions {
    MergeMethod method = MergeMethod::task_arithmetic;
    std::vector<double> weights;  // one per model
    double density = 1.0;         // ties: fraction kept by magnitude; dare: keep probability
    double lambda = 1.0;          // scale of the merged delta
    // Divide by the sum of the (agreeing) weights: the method's default (ties: on; others: off), or
    // on or off as asked (--normalize / --no-normalize).
    enum class Normalize { method_default, on, off } normalize = Normalize::method_default;
    std::uint64_t seed = 0;  // dare
};

// W = base + λ · merged(sparsified deltas), per tensor:
//   task_arithmetic: Σ wᵢ δᵢ;  ties: δᵢ trimmed to the top `density` by |δ|, sign elected by the sign of
//   Σ wᵢ δᵢ, agreeing entries summed and divided by the sum of their weights;  dare_linear: δᵢ kept with
//   probability `density` and rescaled by 1/density, then Σ wᵢ δᵢ;  dare_ties: the same dropping, then
//   the ties sign consensus (no division unless normalize).
EditSummary merge(const std::string& out_dir, const formats::Checkpoint& base,
                  const std::vector<const formats::Checkpoint*>& models, const MergeOptions& options,
                  const EditCommon& common);

}  // namespace diffract::edit
