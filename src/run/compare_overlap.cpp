// compare's expert-redundancy stage (compare_overlap_impl.hpp).
#include "compare_overlap_impl.hpp"

#include <array>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "diffract/core/progress.hpp"
#include "diffract/linalg/backend.hpp"
#include "diffract/run/scheduler.hpp"

namespace diffract::run {
namespace {

using analysis::SubspaceSide;
constexpr std::array<SubspaceSide, 2> kSides{SubspaceSide::read, SubspaceSide::write};

std::size_t index_of(SubspaceSide s) { return s == SubspaceSide::read ? 0 : 1; }

std::optional<SubspaceSide> side_of(model::Role r) {
    if (r == model::Role::mlp_down) return SubspaceSide::write;
    if (r == model::Role::mlp_gate || r == model::Role::mlp_up || r == model::Role::mlp_gate_up)
        return SubspaceSide::read;
    return std::nullopt;
}

// One compared matrix of an expert: its tensor job (the base's tensor and each model's) and unit.
struct Part {
    const analysis::TensorJob* job;
    const analysis::MatrixUnit* unit;
};
using ExpertParts = std::array<std::vector<Part>, 2>;            // per side, in plan order
using LayerExperts = std::map<int, std::map<int, ExpertParts>>;  // layer → expert → parts

LayerExperts routed_experts(const ComparePlan& plan) {
    LayerExperts out;
    for (const auto& tj : plan.jobs)
        for (const auto& u : tj.units) {
            if (u.head || !u.layer || !u.expert || u.expert_kind != model::ExpertKind::routed ||
                u.component != model::Component::language)
                continue;
            if (const auto side = side_of(u.role))
                out[*u.layer][*u.expert][index_of(*side)].push_back({&tj, &u});
        }
    return out;
}

// An expert's matrix on one side, from the base (no model) or model `m`: read parts stacked by rows (they
// share the hidden width), write parts by columns (the hidden height). nullopt when the model lacks a
// part or the parts do not stack.
std::optional<Matrix<double>> side_matrix(const std::vector<Part>& parts, SubspaceSide side,
                                          std::optional<std::size_t> m) {
    std::vector<Matrix<double>> blocks;
    for (const auto& p : parts) {
        const TensorInfo* t = m ? p.job->in_model[*m] : p.job->tensor;
        if (!t) return std::nullopt;
        blocks.push_back(read_matrix<double>(*t, p.unit->block));
        t->release_pages();  // read once here: resident memory stays one expert's matrices per task
    }
    if (blocks.size() == 1) return std::move(blocks.front());
    const bool by_rows = side == SubspaceSide::read;
    std::int64_t rows = by_rows ? 0 : blocks.front().rows, cols = by_rows ? blocks.front().cols : 0;
    for (const auto& b : blocks) {
        if ((by_rows ? b.cols != cols : b.rows != rows)) return std::nullopt;
        (by_rows ? rows : cols) += by_rows ? b.rows : b.cols;
    }
    Matrix<double> out(rows, cols);
    std::int64_t at = 0;  // the next block's first row (by rows) or column
    for (const auto& b : blocks) {
        for (std::int64_t r = 0; r < b.rows; ++r)
            for (std::int64_t c = 0; c < b.cols; ++c)
                by_rows ? out(at + r, c) = b(r, c) : out(r, at + c) = b(r, c);
        at += by_rows ? b.rows : b.cols;
    }
    return out;
}

}  // namespace

std::vector<analysis::ExpertOverlapRow> expert_overlaps(const ComparePlan& plan, int k, std::uint64_t seed,
                                                        const RunOptions& run) {
    using analysis::Subspace;
    // Sources: the base, then each model that is not the reference.
    std::vector<std::optional<std::size_t>> sources{std::nullopt};
    for (std::size_t m = 0; m < plan.models.size(); ++m)
        if (static_cast<int>(m) != plan.ref_index) sources.emplace_back(m);
    const auto layers = routed_experts(plan);
    std::vector<std::vector<analysis::ExpertOverlapRow>> per_model(sources.size() - 1);
    std::map<std::pair<std::int64_t, std::int64_t>, analysis::ChanceFloor> floors;  // (n, k) → floor
    auto backend = linalg::make_backend(linalg::Device::cpu);
    Progress progress("overlap", layers.size(), run.progress, run.progress_sink);
    for (const auto& [layer, experts] : layers) {
        // Every (source, side, expert) subspace of the layer, as a task; an expert without parts on a
        // side has none there.
        struct Item {
            std::size_t source, side;
            int expert;
            const std::vector<Part>* parts;
        };
        std::vector<Item> items;
        std::vector<TaskCost> costs;
        for (std::size_t s = 0; s < sources.size(); ++s)
            for (const auto side : kSides)
                for (const auto& [e, parts] : experts) {
                    const auto& p = parts[index_of(side)];
                    if (p.empty()) continue;
                    items.push_back({s, index_of(side), e, &p});
                    double values = 0;
                    for (const auto& part : p)
                        values += static_cast<double>(part.unit->block.rows * part.unit->block.cols);
                    // The f64 matrix, its Gram product (at most as large) and the stacking's copy.
                    costs.push_back({values, static_cast<std::uint64_t>(3 * 8 * values)});
                }
        std::vector<Subspace> spaces(items.size());
        run_tasks(costs, run.resolved_threads(), run.resolved_max_memory(), [&](std::size_t i) {
            const auto& it = items[i];
            const auto side = kSides[it.side];
            auto w = side_matrix(*it.parts, side, sources[it.source]);
            if (!w) return;
            auto thread_backend = linalg::make_backend(linalg::Device::cpu);
            spaces[i] = analysis::top_singular_subspace(*w, k, side == SubspaceSide::read, *thread_backend);
        });
        // (source, side, expert) → its subspace.
        std::map<std::tuple<std::size_t, std::size_t, int>, const Subspace*> space_of;
        for (std::size_t i = 0; i < items.size(); ++i)
            space_of[{items[i].source, items[i].side, items[i].expert}] = &spaces[i];
        for (const auto side : kSides) {
            std::vector<int> ids;
            for (const auto& [e, parts] : experts)
                if (!parts[index_of(side)].empty()) ids.push_back(e);
            const auto space = [&](std::size_t s, int e) { return space_of.at({s, index_of(side), e}); };
            for (std::size_t a = 0; a < ids.size(); ++a)
                for (std::size_t b = a + 1; b < ids.size(); ++b) {
                    const auto* base_a = space(0, ids[a]);
                    const auto key = std::pair(base_a->n, base_a->k);
                    if (!floors.count(key))
                        floors[key] = analysis::chance_floor(key.first, key.second, seed,
                                                             analysis::kChanceDraws, *backend);
                    const auto in_base = analysis::subspace_overlap(*base_a, *space(0, ids[b]), *backend);
                    for (std::size_t s = 1; s < sources.size(); ++s) {
                        analysis::ExpertOverlapRow row;
                        row.model = plan.models[*sources[s]]->name;
                        row.base = plan.base->name;
                        row.layer = layer, row.expert_a = ids[a], row.expert_b = ids[b], row.side = side;
                        row.floor = floors[key];
                        row.in_base = in_base;
                        row.in_model =
                            analysis::subspace_overlap(*space(s, ids[a]), *space(s, ids[b]), *backend);
                        per_model[s - 1].push_back(std::move(row));
                    }
                }
        }
        progress.advance();
    }
    progress.finish();
    std::vector<analysis::ExpertOverlapRow> out;
    for (auto& rows : per_model) out.insert(out.end(), rows.begin(), rows.end());
    return out;
}

}  // namespace diffract::run
