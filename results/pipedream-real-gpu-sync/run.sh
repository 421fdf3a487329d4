#!/usr/bin/env bash
# The runs of this folder (see README.md), from the repository root with the package importable:
#   bash results/pipedream-real-gpu-sync/run.sh OUT [GPUS]        (GPUS: 4 by default)
set -u
out=$1
gpus=${2:-4}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
ct="python3 -m clustertwin run scenarios/pipedream-real-gpu.yaml --backend real --no-plots"
ct="$ct --set cluster.devices_per_server=$gpus"
$ct --out "$out/1f1b"
for s in 2bw gpipe flush; do
    $ct --set schedule=$s --set real.ddp_baseline=false --out "$out/$s"
done
$ct --set schedule=interleaved --set chunks_per_device=2 --set real.ddp_baseline=false --out "$out/interleaved"
python3 -m experiments.pipedream_op_slowdown --out "$out/slowdown"
