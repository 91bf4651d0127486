#!/bin/bash
# Every run of README.md's tables, one JSON pair per run, into runs.jsonl (from the repo root).
set -e
out=cluster_sim/results/dog_step/runs.jsonl
: > "$out"
run() { OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python cluster_sim/results/dog_step/dog_run.py "$@" \
          | paste -sd' ' | sed 's/} {/, /' >> "$out"; }
c8=cluster_sim/scenarios/bench/costs_25ms.json
for seed in 100 101; do
  for scen in homogeneous static; do
    run $scen 8 bsp@0.08 $seed --variant off --costs $c8
    for lr in 0.005 0.02 0.08 0.32; do run $scen 8 bsp@$lr $seed --variant dog --costs $c8; done
    for lr in 0.01 0.02 0.04 0.08; do
      for v in off fresh; do run $scen 8 adaptive@$lr $seed --variant $v --costs $c8; done
      run $scen 64 adaptive@$lr $seed --variant off
      run $scen 64 adaptive@$lr $seed --variant dog
    done
  done
  run homogeneous 8 adaptive@0.02 $seed --variant dog --costs $c8
  for arm in asp@0.02 kasync=4@0.02; do
    for v in off dog stale weighted; do run homogeneous 8 $arm $seed --variant $v --costs $c8; done
  done
  for lr in 0.02 0.08; do for v in off dog; do run homogeneous 256 adaptive@$lr $seed --variant $v; done; done
done
for scale in 1.5 2; do for lr in 0.02 0.08; do
  run static 64 adaptive@$lr 100 --variant dog --scale $scale
done; done
