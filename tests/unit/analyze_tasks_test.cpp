// analyze's two task shapes give the same results: one task per matrix (the CPU default) and one
// per stored tensor (the device default: the whole matrix and its heads, their singular values
// computed in advance as one batch by Backend::block_singular_values, the entries read only for
// the metrics that need them). Run here on the CPU backend, which executes the same batch plan.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include <unistd.h>

#include "diffract/formats/memory_checkpoint.hpp"
#include "diffract/run/analyze.hpp"

#include "random_matrix.hpp"

using namespace diffract;
using diffract::test_data::random_matrix;

namespace {

formats::MemoryTensor bf16_tensor(const std::string& name, std::int64_t r, std::int64_t c,
                                  std::uint64_t seed) {
    const auto w = random_matrix(r, c, seed);
    const std::vector<float> narrow(w.data.begin(), w.data.end());
    auto owner = std::make_shared<std::vector<std::byte>>(narrow.size() * 2);
    convert_from_f32(narrow.data(), DType::BF16, narrow.size(), owner->data());
    formats::MemoryTensor t;
    t.name = name, t.dtype = DType::BF16, t.shape = {r, c};
    t.data = owner->data(), t.nbytes = owner->size(), t.owner = owner;
    return t;
}

}  // namespace

TEST(AnalyzeTasks, PerTensorBatchesEqualPerMatrixTasks) {
    const nlohmann::json config = {{"model_type", "llama"},
                                   {"hidden_size", 64},
                                   {"num_attention_heads", 4},
                                   {"num_key_value_heads", 2},
                                   {"num_hidden_layers", 1}};
    const formats::Checkpoint model(
        formats::memory_checkpoint("m",
                                   {bf16_tensor("model.embed_tokens.weight", 300, 64, 1),
                                    bf16_tensor("model.layers.0.self_attn.q_proj.weight", 64, 64, 2),
                                    bf16_tensor("model.layers.0.self_attn.k_proj.weight", 32, 64, 3),
                                    bf16_tensor("model.layers.0.self_attn.o_proj.weight", 64, 64, 4),
                                    bf16_tensor("model.layers.0.mlp.up_proj.weight", 160, 64, 5)},
                                   config));
    const auto dir =
        std::filesystem::temp_directory_path() / ("diffract_tasks_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    auto run = [&](bool by_tensor, analysis::Precision precision) {
        run::AnalyzeOptions o;
        o.models = {model};
        // Values-only norms and ranks, plus Marchenko–Pastur (which reads the entries as well).
        o.metrics = analysis::resolve_metrics(
            "frob_norm,nuclear_norm,l2_norm,stable_rank,effective_rank,"
            "hard_rank,mp_bulk_std,mp_num_spikes");
        o.kernel.precision = precision;
        o.kernel.min_fit_size = 0;  // head blocks are smaller than the default minimum: compare every fit
        o.run.store_path = (dir / (std::string(by_tensor ? "t" : "m") +
                                   (precision == analysis::Precision::f64 ? "64" : "32") + ".sqlite"))
                               .string();
        o.run.progress = false;
        o.run.threads = 2;
        o.tensor_tasks = by_tensor;
        return run::analyze(o);
    };
    for (auto precision : {analysis::Precision::f32, analysis::Precision::f64}) {
        const auto per_matrix = run(false, precision), per_tensor = run(true, precision);
        ASSERT_EQ(per_tensor.rows.size(), per_matrix.rows.size());
        EXPECT_EQ(per_tensor.computed, per_matrix.computed);
        std::size_t heads = 0;
        for (std::size_t i = 0; i < per_matrix.rows.size(); ++i) {
            const auto &a = per_matrix.rows[i], &b = per_tensor.rows[i];
            ASSERT_EQ(a.tensor, b.tensor);
            ASSERT_EQ(a.head, b.head);
            heads += a.head.has_value();
            for (const auto& [field, v] : a.values)
                // The same f64 Gram products summed in another order (syrk on the block vs on the
                // tensor at an offset): 1e-12 relative; counts exactly.
                EXPECT_NEAR(b.values.at(field), v, 1e-12 * std::max(1.0, std::abs(v)))
                    << a.tensor << " head " << (a.head ? *a.head : -1) << " " << field;
        }
        EXPECT_EQ(heads, 4u + 2u + 4u);  // q, k (GQA: 2 KV heads), o
        // A re-run reuses every stored result whatever the task shape.
        EXPECT_EQ(run(true, precision).computed, 0u);
    }
    std::filesystem::remove_all(dir);
}
