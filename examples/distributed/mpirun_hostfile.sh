#!/bin/sh
# analyze (or compare: pass its arguments) across the machines of an MPI hostfile, one rank per machine,
# each rank's threads on every core of its machine. docs/distributed.md.
#   examples/distributed/mpirun_hostfile.sh HOSTFILE NP diffract-arguments...
# e.g. examples/distributed/mpirun_hostfile.sh hosts 2 analyze /data/model --out /data/an
set -eu
hostfile=$1 np=$2
shift 2
exec mpirun --hostfile "$hostfile" -np "$np" --bind-to none "${DIFFRACT:-./build/diffract}" "$@"
