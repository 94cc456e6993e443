"""``torch.compile(CodedModule(timm model, GCC(K=4, N=16), FixedStragglers(4)))`` against eager, on the CPU.

For each model (random weights, eval mode), an eager and a compiled CodedModule with straggler models of the same
seed run the same batches; prints and writes the largest absolute difference per call (JSON). Usage:

    python benchmarks/compile_check.py                              # resnet18 and vit_tiny_patch16_224, inductor
    python benchmarks/compile_check.py --backend aot_eager --models resnet18
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import timm
import torch

import torchgcc
from torchgcc.stragglers import FixedStragglers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "vit_tiny_patch16_224"])
    parser.add_argument("--backend", default="inductor", help="torch.compile backend")
    parser.add_argument("--samples", type=int, default=8, help="images per call (K = 4 per group)")
    parser.add_argument("--calls", type=int, default=2, help="calls per model (each draws new masks)")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("torchgcc-results/compile-check/results.json"))
    args = parser.parse_args()

    rows = []
    for name in args.models:
        torch.manual_seed(args.seed)
        model = timm.create_model(name, pretrained=False, num_classes=10).eval()
        code = torchgcc.GCC(num_inputs=4, num_workers=16)
        eager = torchgcc.CodedModule(model, code, FixedStragglers(4, seed=args.seed))
        compiled = torch.compile(
            torchgcc.CodedModule(model, code, FixedStragglers(4, seed=args.seed)), backend=args.backend
        )
        images = torch.randn(
            args.calls,
            args.samples,
            *model.pretrained_cfg["input_size"],
            generator=torch.Generator().manual_seed(args.seed),
        )
        with torch.no_grad():
            for call in range(args.calls):
                start = time.perf_counter()
                got = compiled(images[call])
                seconds = time.perf_counter() - start
                difference = float((got - eager(images[call])).abs().max())
                rows.append(
                    {
                        "model": name,
                        "call": call,
                        "max_abs_difference": difference,
                        "ok": difference <= args.tolerance,
                        "compiled_seconds": seconds,
                    }
                )
                print(
                    f"{name:<22} call {call}: max |compiled - eager| = {difference:.2e} "
                    f"({'ok' if difference <= args.tolerance else 'FAILED'}; compiled call {seconds:.1f} s)"
                )
        torch._dynamo.reset()
    result = {
        "settings": {
            "models": args.models,
            "backend": args.backend,
            "code": "GCC(num_inputs=4, num_workers=16)",
            "stragglers": "FixedStragglers(4)",
            "samples": args.samples,
            "calls": args.calls,
            "tolerance": args.tolerance,
            "seed": args.seed,
            "torch": torch.__version__,
            "timm": timm.__version__,
        },
        "rows": rows,
        "all_ok": all(row["ok"] for row in rows),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"all within {args.tolerance:g}: {result['all_ok']}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
