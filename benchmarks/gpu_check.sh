#!/usr/bin/env bash
# The CUDA checks of the GPU-native decode, on one GPU, in under 8 minutes; writes one JSON with the environment and
# every figure (default torchgcc-results/gpu-check/gpu_check.json):
#   1. pytest -m cuda          (kernel vs CPU path, fp16/bf16 decode, device moves, no sync, CUDA-graph capture)
#   2. python benchmarks/decode.py --device cuda        (default, spacing and natural decode vs bare bmm, N = 32..4096)
#   3. python benchmarks/fused_kernel_check.py --device cuda   (the acceptance grid, N = 8, 33, 64, 1024)
#   4. torchgcc profile --device cuda for resnet18 and vit_base_patch16_224 (K = 16, N = 64)
# Usage, from the repository root with torchgcc importable:  bash benchmarks/gpu_check.sh [OUT_DIR]
# Each step has its own time limit (7 minutes in all); a failed step is recorded (its exit code and log tail) and the
# others still run. DEVICE=cpu runs the same steps on the CPU (slow: the kernel check uses Triton's interpreter and
# times out at N = 1024; for checking the script itself).
set -u
OUT=${1:-torchgcc-results/gpu-check}
PYTHON=${PYTHON:-python}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
START=$(date +%s)

step() {  # step NAME SECONDS COMMAND...: run with a time limit, log to $OUT/NAME.log, exit code to $OUT/NAME.rc
  local name=$1 seconds=$2
  shift 2
  echo "== $name (limit ${seconds} s): $*"
  timeout "$seconds" "$@" > "$OUT/$name.log" 2>&1
  echo $? > "$OUT/$name.rc"
  tail -n 5 "$OUT/$name.log"
}

step pytest_cuda 120 "$PYTHON" -m pytest -m cuda -q -p no:cacheprovider tests
step decode 110 "$PYTHON" benchmarks/decode.py --device "$DEVICE" --repeats 5 --out "$OUT/decode.json"
step fused_kernel 50 "$PYTHON" benchmarks/fused_kernel_check.py --device "$DEVICE" --workers 8 33 64 1024 \
  --out "$OUT/fused_kernel.json"
# torchgcc profile writes <--out folder>/profile.json (older versions took --output FILE instead)
if "$PYTHON" -m torchgcc profile --help | grep -q -- "--output"; then OUT_FLAG=output; else OUT_FLAG=out; fi
for model in resnet18 vit_base_patch16_224; do
  mkdir -p "$OUT/profile_$model"
  target="$OUT/profile_$model"
  [ "$OUT_FLAG" = output ] && target="$OUT/profile_$model/profile.json"
  step "profile_$model" 70 "$PYTHON" -m torchgcc profile --device "$DEVICE" --model "$model" --num-inputs 16 \
    --num-workers 64 "--$OUT_FLAG" "$target"
done

"$PYTHON" - "$OUT" "$START" <<'PYEOF'
import json, platform, subprocess, sys, time
from pathlib import Path

import torch

out, start = Path(sys.argv[1]), float(sys.argv[2])
steps = ["pytest_cuda", "decode", "fused_kernel", "profile_resnet18", "profile_vit_base_patch16_224"]
figures = {"decode": "decode.json", "fused_kernel": "fused_kernel.json",
           "profile_resnet18": "profile_resnet18/profile.json",
           "profile_vit_base_patch16_224": "profile_vit_base_patch16_224/profile.json"}


def read(path):
    return json.loads(path.read_text()) if path.exists() else None


def version(module):
    try:
        return __import__(module).__version__
    except Exception as error:  # reported, not fatal
        return f"unavailable: {error}"


try:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
except OSError:
    commit = None
report = {
    "environment": {
        "torch": torch.__version__, "cuda": torch.version.cuda, "triton": version("triton"), "timm": version("timm"),
        "python": platform.python_version(), "commit": commit,
        "device_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "cuda_available": torch.cuda.is_available(),
    },
    "steps": {},
    "wall_seconds": time.time() - start,
}
for name in steps:
    rc = out / f"{name}.rc"
    log = out / f"{name}.log"
    entry = {"exit_code": int(rc.read_text()) if rc.exists() else None,
             "log_tail": log.read_text()[-3000:] if log.exists() else None}
    if name in figures:
        entry["figures"] = read(out / figures[name])
    report["steps"][name] = entry
decode = report["steps"]["decode"].get("figures")
vit = report["steps"]["profile_vit_base_patch16_224"].get("figures")
report["acceptance"] = {
    "decode_over_bmm at B = 512 (default <= 2.5, spacing <= 1.5 at N = 64)": decode and {
        f"N={row['N']} {row['masks']}": row["over_bmm"] for row in decode["rows"] if row["B"] == 512},
    "vit_base_decode_over_forward (< 0.005)": vit and vit["decode_over_forward"],
    "fused_kernel_all_ok": (report["steps"]["fused_kernel"].get("figures") or {}).get("all_ok"),
    "pytest_cuda_exit_code (0)": report["steps"]["pytest_cuda"]["exit_code"],
}
path = out / "gpu_check.json"
path.write_text(json.dumps(report, indent=2))
print(json.dumps(report["acceptance"], indent=2))
print(f"wrote {path} ({report['wall_seconds']:.0f} s)")
PYEOF
