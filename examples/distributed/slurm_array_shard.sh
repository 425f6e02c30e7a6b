#!/bin/sh
# One shard of an analysis as a Slurm array task (no MPI): task I of N analyses its share of the layers
# into its own store. Submit with `sbatch --array=0-3 examples/distributed/slurm_array_shard.sh MODEL LAYERS`
# and join the shards with merge_shards.sh. docs/distributed.md.
#   MODEL: the checkpoint; LAYERS: its number of layers
set -eu
model=$1 layers=$2
i=${SLURM_ARRAY_TASK_ID:?run as a Slurm array task} n=${SLURM_ARRAY_TASK_COUNT:?run as a Slurm array task}
per=$(( (layers + n - 1) / n ))
first=$(( i * per )) last=$(( (i + 1) * per - 1 ))
[ "$last" -lt "$layers" ] || last=$(( layers - 1 ))
[ "$first" -le "$last" ] || exit 0
exec "${DIFFRACT:-./build/diffract}" analyze "$model" --layers "$first-$last" --store "shard$i.sqlite" \
    --out "an$i" --quiet
