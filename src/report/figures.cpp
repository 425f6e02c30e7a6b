#include "diffract/report/figures.hpp"

namespace diffract::report {

std::vector<Figure> build_figures(FigureContext& ctx) {
    std::vector<Figure> out;
    add_head_heatmaps(ctx, out);
    add_expert_atlas(ctx, out);
    add_agreement_boxes(ctx, out);
    add_layer_curves(ctx, out);
    add_role_boxes(ctx, out);
    add_esd(ctx, out);
    add_delta_spectra(ctx, out);
    add_sweeps(ctx, out);
    add_head_effects(ctx, out);
    add_evolution(ctx, out);
    add_trajectories(ctx, out);
    add_metric_scatter(ctx, out);
    return out;
}

}  // namespace diffract::report
