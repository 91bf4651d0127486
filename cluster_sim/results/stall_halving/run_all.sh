#!/bin/bash
# Every run of README.md's table, one JSON line per run, into runs.jsonl (from the repo root).
set -e
out=cluster_sim/results/stall_halving/runs.jsonl
: > "$out"
run() { OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python cluster_sim/results/stall_halving/stall_run.py "$@" \
          | paste -sd' ' | sed 's/} {/, /' >> "$out"; }
c8=cluster_sim/scenarios/bench/costs_25ms.json
cps=cluster_sim/scenarios/bench/costs_ps.json
for variant in off A G T P P2; do
  for seed in 100 101; do
    for scenario in homogeneous static; do
      for lr in 0.01 0.02 0.04 0.08; do run $scenario 8 adaptive@$lr $seed --variant $variant --costs $c8; done
    done
    for lr in 0.025 0.05 0.1 0.2; do run ctr_static 8 adaptive@$lr $seed --variant $variant --costs $cps; done
  done
done
# The late target (loss 0.75; a time budget, not a push cap: time_run.LATE_BUDGET).
for variant in off P G A; do
  for seed in 100 101; do
    for scenario in homogeneous static; do
      run $scenario 8 adaptive@0.02 $seed --variant $variant --costs $c8 --target late
    done
  done
done
