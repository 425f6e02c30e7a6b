#!/bin/sh
# Joins the stores of slurm_array_shard.sh's tasks (shard0.sqlite ... shardN-1.sqlite) into shard0.sqlite
# and writes the whole model's tables from it: only what no shard computed (tensors without a layer:
# the embeddings and the output head) is computed here. docs/distributed.md.
#   examples/distributed/merge_shards.sh MODEL N OUT
set -eu
model=$1 n=$2 out=$3
d=${DIFFRACT:-./build/diffract}
i=1
while [ "$i" -lt "$n" ]; do
    "$d" store --store shard0.sqlite merge "shard$i.sqlite"
    i=$(( i + 1 ))
done
exec "$d" analyze "$model" --store shard0.sqlite --out "$out"
