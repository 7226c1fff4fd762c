#!/usr/bin/env bash
# Every figure the GPU issues ask for, in one run on a CUDA machine with 16 cores or more:
#   bash benchmarks/gpu_session.sh OUT_DIR [--budget SECONDS] [--only PART,...]
# runs python -m benchmarks.gpu_session (the loop against a hand-written device-resident loop; the
# 12-trial grid alone, fused, at 0.25 and 0.5 GPU per trial; 8 fused members against one solo
# trial; a profile of one trial; a grid that runs out of memory; the quickstart on one GPU and on
# the CPU cores), most wanted first, within the budget: OUT_DIR/session.json after each part,
# gpu.md, gpu_node.md and fused_gpu.md where all their parts ran, profile.txt, nvidia-smi.txt.
# About 10 minutes on one H100. The orchestrator's load on real cores is separate:
#   python -m benchmarks.orchestrator_load --baseline none
# Where the project is not installed, prefix the python command with the environment that has it
# (e.g. a bundle's enter script); RUN overrides the prefix.
set -uo pipefail
out="${1:?usage: bash benchmarks/gpu_session.sh OUT_DIR [--budget SECONDS] [--only PART,...]}"
shift
mkdir -p "$out"
run="${RUN:-}"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
$run python -m benchmarks.gpu_session --out "$out" "$@" 2>&1 | tee "$out/session.log"
