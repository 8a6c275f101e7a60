#!/usr/bin/env bash
# The runner's command line on one GPU (or, with `cpu`, on this machine's CPU):
#   bash benchmarks/gpu_cli_check.sh [cuda|cpu]
# 1-rank schedules of the examples' small GPT (interleaved-zb and zb-v put 2 stages on the rank), each:
# self-launched with --check against one process; zb-v under torchrun with --check, the weight-gradient
# side stream and a trace, then `layersched compare`; bf16 with AdamW; a checkpoint after 2 steps
# resumed for 2 more against 4 steps straight (parameters, optimizer and random-number states bit for
# bit), and the same for the examples' mlp with dropout; torch's runtime with --check. Takes 5-6
# minutes on a GPU (CUDA and NCCL start-up in every run), 2 on 2 CPU cores. Run it from the checkout's
# root: python3 and torchrun come from .venv there (what `make demo` set up) unless an environment is
# active.
set -u
if [ -z "${VIRTUAL_ENV:-}" ] && [ -x .venv/bin/python3 ]; then PATH="$PWD/.venv/bin:$PATH"; fi
DEV=${1:-cuda}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
python3 - "$T" <<'PY'
import sys
from benchmarks.gpu_check import stage_pipe
from layersched.formats.export import schedule_file
from layersched.schedule.solve import solve_pipeline
for name, spr in [("1f1b", 1), ("interleaved-zb", 2), ("zb-v", 2)]:
    doc = schedule_file(solve_pipeline(stage_pipe(1, 4, spr), schedule=name))
    open(f"{sys.argv[1]}/{name}.json", "w").write(doc.model_dump_json())
PY
M=examples/models.py:gpt_small
run() { timeout 120 python3 -m layersched.run "$@" --model $M --device $DEV 2>&1 | tail -3; echo "rc=${PIPESTATUS[0]}"; }
for s in 1f1b interleaved-zb zb-v; do echo "== $s self-launched --check"; run $T/$s.json --steps 4 --check --no-trace; done
echo "== zb-v torchrun --check --weight-stream"
timeout 120 torchrun --nproc-per-node 1 -m layersched.run $T/zb-v.json --model $M --device $DEV --steps 4 --check --weight-stream --trace $T/trace.json 2>&1 | tail -3; echo "rc=${PIPESTATUS[0]}"
echo "== compare"; timeout 60 python3 -m layersched.cli.main compare $T/zb-v.json $T/trace.json 2>&1 | tail -6
echo "== bf16 adamw"; run $T/interleaved-zb.json --steps 4 --precision bf16 --optimizer adamw --no-trace
echo "== checkpoint 2+2 vs 4"
run $T/zb-v.json --steps 2 --checkpoint $T/ck --no-trace
run $T/zb-v.json --steps 2 --resume $T/ck --checkpoint $T/ck4 --no-trace
run $T/zb-v.json --steps 4 --checkpoint $T/full --no-trace
echo "== the same with dropout (examples' mlp, dropout=0.5): the GPU's generator is in the checkpoint"
D="$T/1f1b.json --model-arg dropout=0.5 --no-trace"
M=examples/models.py:mlp run $D --steps 2 --checkpoint $T/dck
M=examples/models.py:mlp run $D --steps 2 --resume $T/dck --checkpoint $T/dck4
M=examples/models.py:mlp run $D --steps 4 --checkpoint $T/dfull
python3 - "$T" <<'PY'
import sys, torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
t = sys.argv[1]
def flat(x, p=""):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from flat(v, f"{p}.{k}")
    elif torch.is_tensor(x):
        yield p, x
for label, pair in [("gpt_small", ("ck4", "full")), ("mlp with dropout", ("dck4", "dfull"))]:
    got = []
    for d in pair:
        dcp_to_torch_save(f"{t}/{d}", f"{t}/{d}.pt")
        got.append(dict(flat(torch.load(f"{t}/{d}.pt", weights_only=False))))
    a, b = got
    same = sorted(a) == sorted(b) and all(torch.equal(a[k].cpu(), b[k].cpu()) for k in a)
    print(f"{label}: resumed 2+2 vs 4 steps: {len(a)} tensors (random-number states included), bit for bit equal: {same}")
PY
echo "== torch runtime 1f1b"; run $T/1f1b.json --steps 4 --runtime torch --check --no-trace
