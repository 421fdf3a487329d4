#!/usr/bin/env bash
# The runs of this folder (see README.md), from the repository root with the package importable:
#   bash results/pipedream-real-gpu-inrun/run.sh OUT [REPEATS] [BUDGET_S]
# Each repeat runs the scenario's five schedules (OUT/runN/<schedule>); after the first repeat,
# experiments.pipedream_gpu compares ours with torch.distributed.pipelining on 4 GPUs (OUT/torch).
# A repeat is skipped once BUDGET_S seconds have passed. EXTRA (environment) adds --set overrides, e.g.
# for a CPU check of the same command.
set -u
out=$1
repeats=${2:-1}
budget=${3:-100000}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
ct="python3 -m clustertwin run scenarios/pipedream-real-gpu.yaml --backend real --no-plots ${EXTRA:-}"
began=$(date +%s)
left() { echo $(( budget - ($(date +%s) - began) )); }
for n in $(seq 1 "$repeats"); do
    run="$out/run$n"
    mkdir -p "$run"
    for s in 1f1b 2bw gpipe flush interleaved; do
        if [ "$(left)" -lt 45 ]; then echo "SKIP run$n/$s (budget)"; continue; fi
        case $s in
            1f1b) extra="" ;;
            interleaved) extra="--set schedule=interleaved --set chunks_per_device=2 --set real.ddp_baseline=false" ;;
            *) extra="--set schedule=$s --set real.ddp_baseline=false" ;;
        esac
        echo "== run$n/$s ($(left) s left)"
        timeout "$(left)" $ct $extra --out "$run/$s" > "$run/$s.log" 2>&1 || echo "FAILED run$n/$s"
        grep -E 'own_sim_(profile_|no_traffic_)?throughput_error|ddp_own_sim(_profile)?_throughput_error|^│ throughput_samples|speedup_over_ddp' "$run/$s.log" || tail -5 "$run/$s.log"
    done
    if [ "$n" = 1 ] && [ -n "${TORCH_CMD:-python3 -m experiments.pipedream_gpu run --gpus 4 --steps 3}" ]; then
        echo "== torch ($(left) s left)"
        timeout "$(left)" ${TORCH_CMD:-python3 -m experiments.pipedream_gpu run --gpus 4 --steps 3} \
            --out "$out/torch" > "$out/torch.log" 2>&1 || echo "FAILED torch"
        cat "$out/torch/baseline.csv" 2>/dev/null
    fi
done
