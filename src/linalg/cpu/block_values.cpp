// Batched singular values on the CPU: the tensor is decoded once (f64, or f32 under --precision f32:
// the values the routes see), each batched block's Gram matrix is one syrk straight from that copy at
// the offset and leading dimension the plan gives, then syevd. Single blocks (a whole matrix) and
// the gesdd route keep the per-matrix path, so their results do not change with batching.
#include <algorithm>

#include "block_values_impl.hpp"
#include "diffract/linalg/gram_batch.hpp"
#include "diffract/linalg/gram_pair.hpp"
#include "lapack_impl.hpp"

namespace diffract::linalg::cpu {

std::vector<Spectrum> block_spectra(Backend& self, const TensorInfo& t, std::span<const MatrixBlock> blocks,
                                    bool f64, SvdRoute route) {
    for (const auto& b : blocks) check_block_inside(t, b);  // the batches index the tensor directly
    const auto batches = plan_gram_batches(blocks, stored_cols(t));
    const bool any_batch =
        std::any_of(batches.begin(), batches.end(), [](const GramBatch& b) { return b.members.size() > 1; });
    // One block by the plain route: in f64, always f64; in f32, as f32_spectrum says.
    auto one = [&](std::size_t i, SvdRoute r) -> Spectrum {
        if (!f64) return block_spectra_one_by_one(self, t, blocks.subspan(i, 1), r).front();
        return {self.singular_values(read_matrix<double>(t, blocks[i]), r), false};
    };
    std::vector<Spectrum> out(blocks.size());
    if (route == SvdRoute::gesdd || !any_batch) {
        for (std::size_t i = 0; i < blocks.size(); ++i) out[i] = one(i, route);
        return out;
    }
    // --precision f32 reads the tensor as f32, what the guarded f32 products read (an f64 copy beside it
    // doubled the batch's time, bench_analyze); a block the guard refuses goes one by one.
    const MatrixBlock all{0, stored_rows(t), 0, stored_cols(t), false};
    const auto whole_f32 = f64 ? Matrix<float>() : read_matrix<float>(t, all);
    const auto whole = f64 ? read_matrix<double>(t, all) : Matrix<double>();
    for (const auto& batch : batches) {
        if (batch.members.size() == 1) {
            out[batch.members.front()] = one(batch.members.front(), route);
            continue;
        }
        const int n = lapack::checked_int(batch.order, "dimension");
        const int k = lapack::checked_int(batch.depth, "dimension");
        const int lda = lapack::checked_int(batch.lda, "leading dimension");
        for (std::size_t p = 0; p < batch.members.size(); ++p) {
            const std::size_t i = batch.members[p];
            if (!f64) {
                auto s = guarded_f32_gram_values(batch.trans, n, k,
                                                 whole_f32.data.data() + batch.offset_of(p), lda);
                out[i] = s ? Spectrum{std::move(*s), true} : one(i, route);
                continue;
            }
            auto s = singular_values_from_gram(
                gram_eigenvalues(batch.trans, n, k, whole.data.data() + batch.offset_of(p), lda), route);
            out[i] = s ? Spectrum{std::move(*s), false} : one(i, SvdRoute::gesdd);
        }
    }
    return out;
}

}  // namespace diffract::linalg::cpu
