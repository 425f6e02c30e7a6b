// What `inspect` shows of a checkpoint, as one JSON object that the CLI prints (--json, or as text)
// and Python returns: format, architecture, head geometry, every tensor, and for a model with a LoRA
// adapter merged (BASE+ADAPTER) the adapter: its directory, its base, rank, alpha and targets.
#pragma once

#include <nlohmann/json.hpp>

#include "diffract/formats/checkpoint.hpp"

namespace diffract::formats {

// Keys: model, path, format, architecture, family, heads (null when not split), adapter (only with an
// adapter: path, base, base_model_name_or_path, r, lora_alpha, use_rslora, fan_in_fan_out,
// target_modules as configured, ranks and alphas in use, targets [{module, tensor, rank, alpha,
// scale}], replaced [tensor]), quantization (null, or {scheme, matrices: {kind: count}, undecoded}),
// packed_experts (how many packed expert tensors were split per expert), parameters, tensors [{name,
// dtype, shape, layer, role, expert (null outside mixtures of experts), quantization, file}] (a quantized
// matrix's dtype is its scheme, e.g. "fp8 e4m3, block 128×128"). Throws InputError when the head geometry
// does not divide an attention projection.
nlohmann::ordered_json describe_checkpoint(const Checkpoint& ck);

}  // namespace diffract::formats
