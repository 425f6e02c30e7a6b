// What a report shows: metrics, roles, layers, models, colours and the figure-specific choices.
// The same keys come from `diffract report` flags or from a JSON file (--config); flags win.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace diffract::report {

struct ReportConfig {
    std::string title = "diffract report";
    std::vector<std::string> metrics{"pl_alpha", "stable_rank"};  // layer curves, boxes, evolution
    std::string roles;                                            // selection grammar ("attn_q,mlp_down")
    std::string layers;                                           // selection grammar ("0-3,7")
    std::vector<std::string> models;                              // subset and order; empty: all
    std::map<std::string, std::string> colours;                   // model or role → colour
    std::string heatmap_role = "attn_q";                          // heads' block in the agreement heatmap
    std::string agreement_field = "avg_l_agreement";              // compare.csv field of that heatmap
    std::string reference;                                        // difference panels; "": heads.csv's
    std::string esd_tensor;                                       // "": attn_q of the middle layer
    std::vector<std::string> scatter{"pl_alpha", "stable_rank"};  // x, y
    std::optional<bool> evolution;                                // empty: when every name has a step
    std::optional<int> overlap_layer;  // the expert overlap map's layer; empty: the most changed one
};

// Reads a JSON object with the keys above (title, metrics, roles, layers, models, colours,
// heatmap_role, agreement_field, reference, esd_tensor, scatter, evolution, overlap_layer) into `config`.
// Lists may be JSON arrays or comma-separated strings. Throws InputError (file, key) on anything else.
void read_config_file(const std::string& path, ReportConfig& config);
// The same from JSON text; `source` names it in errors (the Python keyword arguments, a file).
void read_config_json(const std::string& text, const std::string& source, ReportConfig& config);

}  // namespace diffract::report
