#!/usr/bin/env bash
# The GPU checks of the decode, in one run of at most 9 minutes: every part has its own time limit, and the report
# ($OUT/gpu_check.json: environment, each part's exit code, seconds, log tail and figures) is rewritten after every
# part, so a part that fails or runs out of time costs only itself.
#   env          versions, the device, the commit
#   pytest_cuda  pytest -m cuda tests/test_cuda.py: the Triton kernels against the numba ones (N = 8 .. 4096,
#                tolerances from conditioning), float16/bfloat16, device moves, no host sync with check=False,
#                torch.compile(fullgraph=True), CUDA-graph capture; tests/test_code_contract.py's CUDA decode of
#                every registered code and decoder variant against its CPU decode                          (200 s)
#   kernels      benchmarks/fused_kernel_check.py --device cuda: the grid of N, masks and decoders       (90 s)
#   decode       benchmarks/decode.py --device cuda: eager, compiled and graph-replayed decode against a bare
#                bmm, B = 1, 8, 512, d = 10, 1000, N = 64, 1024                                           (170 s)
#   profile      torchgcc profile resnet18 on the GPU                                                     (50 s)
# Usage, from the repository root:  bash benchmarks/gpu_check.sh [--dry-run] [OUT_DIR]  (--help prints this line)
# (default OUT_DIR torchgcc-results/gpu-check). --dry-run runs every part on the CPU with small shapes and the
# Triton kernels in Triton's interpreter, and pytest only collects the CUDA tests: it checks the script and
# everything it calls, not the hardware (tests/test_gpu_check.py runs it in CI). pytest's addopts are overridden,
# so no plugin beyond pytest is needed (the GPU image has no nbmake, nor csaps, which the CUDA tests do not import).
set -u
USAGE="usage: bash benchmarks/gpu_check.sh [--dry-run] [OUT_DIR]   (default OUT_DIR torchgcc-results/gpu-check)"
DRY_RUN=0
OUT=""
for arg in "$@"; do
  case "$arg" in
    -h | --help) echo "$USAGE"; exit 0 ;;
    --dry-run) DRY_RUN=1 ;;
    -*) echo "gpu_check.sh: unknown option $arg" >&2; echo "$USAGE" >&2; exit 2 ;;
    *)
      if [ -n "$OUT" ]; then
        echo "gpu_check.sh: one OUT_DIR only, got $OUT and $arg" >&2; echo "$USAGE" >&2; exit 2
      fi
      OUT=$arg ;;
  esac
done
OUT=${OUT:-torchgcc-results/gpu-check}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
START=$(date +%s)

if [ "$DRY_RUN" = 1 ]; then
  export TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES=""
  DEVICE=cpu
  PYTEST_MODE=(--collect-only)
  KERNELS=(--workers 8 13)
  DECODE=(--workers 16 --groups 1 8 --outputs 10 --threads 1 --inputs 4 --repeats 2 --compile-backend aot_eager)
  PROFILE=(--model resnet18 --num-inputs 2 --num-workers 4 --repeats 1 --warmup 1 --image-size 32 --num-classes 10)
else
  DEVICE=cuda
  PYTEST_MODE=()
  KERNELS=()
  DECODE=(--threads 1)
  PROFILE=(--model resnet18 --num-inputs 16 --num-workers 64)
fi

report() {  # rewrite $OUT/gpu_check.json from the parts run so far
  "$PYTHON" - "$OUT" "$START" "$DRY_RUN" <<'PYEOF'
import json, platform, subprocess, sys, time
from pathlib import Path

out, start, dry_run = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "1"
parts = ["pytest_cuda", "kernels", "decode", "profile"]
figures = {"kernels": "kernels.json", "decode": "decode.json", "profile": "profile/profile.json"}


def version(module):
    try:
        return __import__(module).__version__
    except Exception as error:  # reported, not fatal
        return f"unavailable: {error}"


import torch  # noqa: E402

commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip() or None
report = {
    "dry_run": dry_run,
    "environment": {
        "torch": torch.__version__, "cuda": torch.version.cuda, "triton": version("triton"),
        "numba": version("numba"), "python": platform.python_version(), "commit": commit,
        "device_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "cuda_available": torch.cuda.is_available(),
    },
    "parts": {},
    "wall_seconds": time.time() - start,
}
for name in parts:
    rc, log, seconds = (out / f"{name}.{suffix}" for suffix in ("rc", "log", "seconds"))
    if not rc.exists():
        continue
    entry = {"exit_code": int(rc.read_text()), "seconds": float(seconds.read_text()), "log_tail": log.read_text()[-3000:]}
    if name in figures and (out / figures[name]).exists():
        entry["figures"] = json.loads((out / figures[name]).read_text())
    report["parts"][name] = entry
decode = report["parts"].get("decode", {}).get("figures")
kernels = report["parts"].get("kernels", {}).get("figures")
report["acceptance"] = {
    "pytest_cuda_exit_code (0)": report["parts"].get("pytest_cuda", {}).get("exit_code"),
    "kernels_all_within_tolerance": kernels and kernels.get("all_ok"),
    "decode_over_bmm at N = 64, d = 1000 (B = 8: 1.5x, B = 512: 1.2x)": decode and decode.get("acceptance"),
}
(out / "gpu_check.json").write_text(json.dumps(report, indent=2))
PYEOF
}

part() {  # part NAME SECONDS COMMAND...: run with a time limit, log to $OUT/NAME.log, then rewrite the report
  local name=$1 seconds=$2 begin=$SECONDS
  shift 2
  echo "== $name (limit ${seconds} s): $*"
  timeout "$seconds" "$@" > "$OUT/$name.log" 2>&1
  echo $? > "$OUT/$name.rc"
  echo $((SECONDS - begin)) > "$OUT/$name.seconds"
  tail -n 3 "$OUT/$name.log"
  report
}

report
part pytest_cuda 200 "$PYTHON" -m pytest -m cuda tests/test_cuda.py tests/test_code_contract.py -q -p no:cacheprovider -o addopts="" \
  "${PYTEST_MODE[@]}"
part kernels 90 "$PYTHON" benchmarks/fused_kernel_check.py --device "$DEVICE" "${KERNELS[@]}" --out "$OUT/kernels.json"
part decode 170 "$PYTHON" benchmarks/decode.py --device "$DEVICE" "${DECODE[@]}" --out "$OUT/decode.json"
part profile 50 "$PYTHON" -m torchgcc profile --device "$DEVICE" "${PROFILE[@]}" --no-progress --out "$OUT/profile"
"$PYTHON" -c "import json, sys; r = json.load(open(sys.argv[1])); print(json.dumps(r['acceptance'], indent=2))" \
  "$OUT/gpu_check.json"
echo "wrote $OUT/gpu_check.json ($(( $(date +%s) - START )) s)"
for name in pytest_cuda kernels decode profile; do  # the exit code: 0 only if every part passed
  [ "$(cat "$OUT/$name.rc")" = 0 ] || exit 1
done
