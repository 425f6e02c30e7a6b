// Heatmap figures of (row, column) cells, one panel per model: the heads' (layer × head) and the experts'
// atlas (layer × expert, expert × expert).
#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "figure_util_impl.hpp"

namespace diffract::report {

Figure heatmap_figure(const std::string& id, const std::string& title, const std::string& caption,
                      const std::string& value_label, const std::vector<HeatPanel>& panels,
                      bool low_means_change, const HeatAxes& axes) {
    std::set<int> layers, heads;  // the rows' and the columns' categories
    Range seq, div;
    for (const auto& hp : panels)
        for (const auto& [k, v] : hp.cells) {
            layers.insert(k.first);
            heads.insert(k.second);
            (hp.difference ? div : seq).add(v);
        }
    const std::vector<int> layer_list(layers.begin(), layers.end()), head_list(heads.begin(), heads.end());
    const double pw = std::clamp(18.0 * static_cast<double>(head_list.size()), 150.0, 280.0);
    const double ph = std::clamp(16.0 * static_cast<double>(layer_list.size()), 130.0, 300.0);
    // Models on the first row, difference panels below them.
    const auto n_plain =
        std::count_if(panels.begin(), panels.end(), [](const auto& hp) { return !hp.difference; });
    const auto layout = grid_layout(static_cast<int>(panels.size()),
                                    static_cast<int>(std::max<long>(n_plain, 1)), pw, ph, 110);
    Svg svg(layout.width(), layout.height(), "figure", title);
    const auto seq_map = make_colour_map(ColourMapKind::sequential, seq.lo, seq.hi, low_means_change);
    const auto div_map = make_colour_map(ColourMapKind::diverging, div.lo, div.hi, low_means_change);
    for (std::size_t i = 0; i < panels.size(); ++i) {
        const auto& hp = panels[i];
        Axis x{axes.columns, {}, false, {}, false}, y{axes.rows, {}, false, {}, false};
        for (int h : head_list) x.categories.push_back(std::to_string(h));
        for (int l : layer_list) y.categories.push_back(std::to_string(l));
        const auto p = draw_axes(svg, layout.frame(static_cast<int>(i)), hp.title, x, y);
        std::vector<std::vector<double>> cells(layer_list.size(), std::vector<double>(head_list.size(), NAN));
        for (std::size_t r = 0; r < layer_list.size(); ++r)
            for (std::size_t c = 0; c < head_list.size(); ++c)
                if (auto it = hp.cells.find({layer_list[r], head_list[c]}); it != hp.cells.end())
                    cells[r][c] = it->second;
        draw_heatmap(svg, p, cells, hp.difference ? div_map : seq_map, [&](int r, int c) {
            return fmt::format("{} · {} {}, {} {}: {:.4g}", hp.title, axes.rows,
                               layer_list[static_cast<std::size_t>(r)], axes.columns,
                               head_list[static_cast<std::size_t>(c)],
                               cells[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)]);
        });
    }
    const bool has_div = !div.empty();
    const double bar_h = has_div ? layout.panel_h * 0.38 : layout.panel_h;
    const double bx = layout.width() - layout.legend_w + 8;
    if (!seq.empty()) draw_colour_bar(svg, bx, layout.margin_top, bar_h, seq_map, value_label);
    if (has_div)
        draw_colour_bar(svg, bx, layout.margin_top + layout.panel_h - bar_h, bar_h, div_map, "difference");
    return {id, title, caption, svg.str()};
}

}  // namespace diffract::report
