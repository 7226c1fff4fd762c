#!/usr/bin/env bash
# Every figure the GPU issues ask for, in one run on a CUDA machine with 16 cores or more:
#   bash benchmarks/gpu_session.sh OUT_DIR
# writes OUT_DIR/gpu.{json,md} (the loop against a hand-written device-resident loop, the
# 12-trial grid: span, overhead, evaluation share, GPU utilisation), OUT_DIR/gpu_node.{json,md}
# (the grid at 1, 0.5 and 0.25 GPU per trial, a grid that runs out of memory, the quickstart on
# one GPU and on the CPU cores), OUT_DIR/orchestrator_load.md (sleeping trials on a Ray head
# told 16 and 32 CPUs, on real cores), OUT_DIR/fused_gpu.{json,md} (8 fused members' samples/s
# against one solo trial's; the 12-trial grid alone, four to a GPU and fused) and
# OUT_DIR/nvidia-smi.txt. About 10 minutes on one H100, plus about 3 for the fused figures (not
# yet measured on a GPU).
# Where the project is not installed, prefix the python commands with the environment that has
# it (e.g. a bundle's enter script); RUN overrides the prefix.
set -uo pipefail
out="${1:?usage: bash benchmarks/gpu_session.sh OUT_DIR}"
mkdir -p "$out"
run="${RUN:-}"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
$run python -m benchmarks.gpu --out "$out" > "$out/gpu.log" 2>&1; echo "gpu: exit $?"
$run python -m benchmarks.gpu_node --out "$out" > "$out/gpu_node.log" 2>&1; echo "gpu_node: exit $?"
$run python -m benchmarks.orchestrator_load --baseline none > "$out/orchestrator_load.md" 2> "$out/orchestrator_load.log"
echo "orchestrator_load: exit $?"
$run python -m benchmarks.fused_gpu --out "$out" > "$out/fused_gpu.log" 2>&1; echo "fused_gpu: exit $?"
