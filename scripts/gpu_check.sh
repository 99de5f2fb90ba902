#!/usr/bin/env bash
# One command that checks mhfast on the GPU it finds, and writes every result under OUTDIR.
#
#   scripts/gpu_check.sh OUTDIR [--quick] [--only STEP,STEP,...]
#
# Steps (each logged, timed, and listed in OUTDIR/summary.md):
#   1. environment: python, torch, GPU, nvcc, compute-sanitizer
#   2. wheels: installs .whl/*.whl (or $MHFAST_WHEELS/*.whl) into a private folder when present:
#      fairseq and its needs, so that the bundled translation model loads (the GPU machine has none)
#   3. build: mhfast._C in place for the GPU found (TORCH_CUDA_ARCH_LIST from its compute
#      capability: 9.0 on Hopper), against the torch that is there
#   4. tests: the op tests (uniform_mix and the fused single-site ops mh_propose_site /
#      mh_site_rows / mh_commit_site_ included) and the sampler's exactness/API tests on cuda (-k cuda: delayed
#      acceptance's and parallel tempering's among them), with fairseq
#      also the fairseq masked-LM adapter's (its cuda-graph capture);
#      AntiBERTy's tests and the HF fast-forward tests (CPU only) are not run (their weights do not travel)
#   5. compute-sanitizer memcheck, racecheck, synccheck over bench/sweeps/op_sweep.py --small (odd shapes;
#      every kernel of the run is instrumented, torch's included: no name filter to get wrong)
#   6. bench/ops_floor.py: each op against its reference and its memory-traffic floor
#   7. bench/sampler_e2e.py: mhfast.sample end to end (bundled De->En CMLM, BERT-base-sized random
#      MLM; fp32 and bf16; many inputs x chains)
#   8. bench/bench_decoder.py (with fairseq): the CMLM's fast decoder forward vs fairseq's decoder on the
#      device (max logit difference, ms per row, the same chains or a failed step)
#   9. bench/bench_mixmatch.py: mhfast vs the mixmatch MH loop on the device (issue 14's side-by-side), on a
#      randomly initialized model of AntiBERTy's shape (the antiberty package's 100 MB of weights do not travel):
#      T 16/32/64 x 1/5/16 chains, fp32 and bf16, random start, 3 alternating repeats; mhfast both as it is
#      (capture=none) and with its step captured as CUDA graphs (capture=cuda-graph), each against the same
#      mixmatch run (tests/sampler/test_static_step.py, in step 4, checks the graphs' chains first)
#  10. bench/bench_forward.py --compile-only on the device: compile=True (torch.compile of the encoder layers on
#      the sampler's path, AntiBERTy's shape, random weights) against eager, fp32 and bf16: compile time, ms per row
#      (issue 14's "compile=True where it pays": not on CPU, 0.93-1.03x on a Xeon and an AMD EPYC, nor on an H200,
#      0.76-1.10x; off by default). Skipped on CPU with --quick.
#  11. the real-model sampling check (with the sapiens package, from .whl/ on the GPU machine): Sapiens, the BioPhi
#      heavy-chain model (a fairseq RoBERTa through mhfast.models.sapiens), on the device: bench/sapiens_check.py
#      (masked logits equal the CPU's, forward fast and full give the same chains, proposals/s from a real parent at
#      T=120, fp32 and bf16; exit 1 otherwise), then bench/bench_mixmatch.py --model sapiens-h (mhfast vs the
#      mixmatch loop on the real model). Skipped, and said so, without the package.
#  12. mixing on the device (issues 34 and 38: judged per second, not per row): bench/bench_delayed.py --device
#      (the main job, plain MH against delayed="influence:2", "window:0", whose stage 1 forwards no row, and
#      "cascade:1": rows per accepted change and wall seconds; needs fairseq) and bench/tempering_device.py
#      (Sapiens at target temperature 0.5, tempering=8 against plain MH at equal sweeps: wall seconds per sweep;
#      needs sapiens). ESS and R-hat need arviz-stats, which the GPU machine lacks: the tempering runs' traces come
#      back in mixing.pt (eager steps), mixing_graphs.pt (capture cuda-graph, the same chains) and
#      mixing_graphs_long.pt (6,000 sweeps: R-hat 1.01), and `python3 bench/tempering_device.py --from-traces
#      OUTDIR/mixing.pt` prints their figures.
#      Then bench/graph_overhead.py --device cuda: the calls made around the graphs' replays per sweep.
#  13. AntiBERTy on the device, where its weights are there: joined from the parts in .ab/ (or
#      $MHFAST_ANTIBERTY_PARTS) that successive calls carried (scripts/carry_parts.py: 104 MB do not fit one call), or
#      the installed antiberty package. bench/sapiens_check.py --model antiberty (logits equal the CPU's, fast and
#      full forwards the same chains, proposals/s), bench/tempering_device.py --model antiberty (issue 38's T=8
#      dispersed case, 6 rungs, steps as CUDA graphs, 4,000 sweeps: traces in antiberty_tempering.pt) and
#      bench/bench_delayed.py --case antiberty-infill (issue 34: plain MH, early-2, delayed-i2). Skipped with --quick
#      on the CPU, and where there are no weights.
# MHFAST_SANITIZERS (default 'memcheck racecheck synccheck') and MHFAST_SANITIZER_TIMEOUT (150 s each) trim step 5.
# Steps 1-3 always run; --only names which of the others do (tests, sanitizer, ops, e2e, decoder, mixmatch,
# compile, sapiens, mixing, antiberty; default all). The device tool allows 10 minutes per command: with the sanitizers
# that is tight, so the plan is four calls,
#   timeout 585 bash scripts/gpu_check.sh "$OUT" --only tests,sanitizer,ops
#   timeout 585 bash scripts/gpu_check.sh "$OUT" --only e2e,decoder,compile
#   timeout 585 bash scripts/gpu_check.sh "$OUT" --only mixmatch,sapiens
#   timeout 585 bash scripts/gpu_check.sh "$OUT" --only mixing
# (the build is ~1 min with 16 cores and runs in both: a later call may find a fresh machine), and for AntiBERTy three
# calls back to back, each carrying one part (bench/CUDA_NOTES.md, "AntiBERTy's weights in three calls"), the last
#   timeout 585 bash scripts/gpu_check.sh "$OUT" --only antiberty
#
# Without a GPU it runs the CPU half of the same steps (CPU build, -k cpu tests, the op sweep on
# the CPU kernels instead of the sanitizer, the benchmarks on CPU), says so in the summary, and
# exits 0 when they pass. --quick: tiny sizes, a short test subset, and the existing build reused
# when it is newer than every source (what tests/install/test_gpu_check.py runs in CI).
#
# Wheels needed on the GPU machine beyond its own packages (Python 3.12, x86-64), for the bundled
# model only; copy them into .whl/ of the repository and carry that folder:
#   cp /work/shared/wheels/gpu-cp312/*.whl .whl/      # or download them:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl \
#     fairseq-fixed==0.12.3.1 hydra-core==1.3.2 omegaconf==2.3.0 bitarray==3.12.3
#   (antlr4-python3-runtime==4.9.3 is source-only: `pip wheel --no-deps antlr4-python3-runtime==4.9.3 -w .whl`)
#   For step 11 also the sapiens wheel (pure Python, 7 MB with the weights; not in /work/shared/wheels/gpu-cp312):
#     python3 -m pip download --no-deps --only-binary=:all: sapiens==1.0.5 -d .whl
#   (installed with --no-deps like the others: mhfast reads its checkpoints without importing it, so pandas is
#   not needed there).
# The files that come back from the device tool are at most 8: each call of the plan above writes 8 or fewer (a run
# of every step at once writes 11, mixing's three trace files included).
set -uo pipefail

ALL_STEPS="tests,sanitizer,ops,e2e,decoder,mixmatch,compile,sapiens,mixing,antiberty"
usage() { echo "usage: $0 OUTDIR [--quick] [--only STEP,STEP,... (of $ALL_STEPS)]" >&2; exit 2; }
[ $# -ge 1 ] || usage
OUTDIR=$1
shift
QUICK=0
ONLY=$ALL_STEPS
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    --only) [ $# -ge 2 ] || usage; ONLY=$2; shift ;;
    *) usage ;;
  esac
  shift
done
for s in ${ONLY//,/ }; do
  case ",$ALL_STEPS," in *",$s,"*) ;; *) echo "$0: --only: unknown step '$s' (steps: $ALL_STEPS)" >&2; exit 2 ;; esac
done
# wanted STEP: whether --only selected it.
wanted() { case ",$ONLY," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)  # (before the cd below: a relative --out is the caller's, not the repository's)
cd "$ROOT" || exit 2
SUMMARY=$OUTDIR/summary.md
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
FAILED=0
STEPS=()

# run_step NAME LOGFILE COMMAND...: runs, appends output to LOGFILE, records status and seconds.
run_step() {
  local name=$1 log=$2
  shift 2
  local t0=$SECONDS
  echo "== $name: $*" | tee -a "$log"
  "$@" >>"$log" 2>&1
  local rc=$?
  local dt=$((SECONDS - t0))
  if [ $rc -eq 0 ]; then
    STEPS+=("| $name | ok | ${dt} s | $(basename "$log") |")
  else
    STEPS+=("| $name | FAILED (rc=$rc) | ${dt} s | $(basename "$log") |")
    FAILED=1
  fi
  echo "   -> rc=$rc in ${dt} s" | tee -a "$log"
  return $rc
}

# 1. Environment.
GPU=$($PY -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null || echo 0)
ENV=$($PY - <<'EOF' 2>&1
import platform, torch
print(f"python {platform.python_version()}, torch {torch.__version__} (CUDA {torch.version.cuda})")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"GPU {p.name}, compute capability {p.major}.{p.minor}, {p.multi_processor_count} SMs, "
          f"{p.total_memory / 2**30:.0f} GiB")
else:
    print("no GPU visible")
EOF
)
ENV+=$'\n'"nvcc: $(command -v nvcc >/dev/null && nvcc --version | tail -1 || echo 'not found')"
ENV+=$'\n'"compute-sanitizer: $(command -v compute-sanitizer || echo 'not found')"
# (whether the ESS/R-hat of the mixing step can be computed there: arviz-stats needs scipy, whose wheel does not fit
# in what the device tool carries beside fairseq's)
ENV+=$'\n'"scipy: $($PY -c 'import scipy; print(scipy.__version__)' 2>/dev/null || echo 'not installed'), arviz-stats: $($PY -c 'import arviz_stats; print(arviz_stats.__version__)' 2>/dev/null || echo 'not installed')"
if [ "$GPU" = 1 ]; then
  # torch's arch detection needs a visible GPU; set the list explicitly (9.0 on Hopper).
  CAP=$($PY -c 'import torch; m, n = torch.cuda.get_device_capability(0); print(f"{m}.{n}")')
  export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-$CAP}
  # CUDA kernels or a failed build step: without it, no nvcc found meant a quiet CPU-only build, "ok"
  export MHFAST_FORCE_CUDA=1
  DEV=cuda
  MODE="GPU: the CUDA half"
elif command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "$0: nvidia-smi lists a GPU that torch cannot use (torch.cuda.is_available() is not True;" \
    "see the summary's environment)" >&2
  FAILED=1
  export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
  export MHFAST_FORCE_CPU=1
  DEV=cpu
  MODE="NO USABLE GPU (nvidia-smi lists one, torch cannot use it): the CPU half only, and the check fails"
else
  # No GPU: the CPU half. (A CUDA build here would still need TORCH_CUDA_ARCH_LIST: torch's arch
  # detection crashes without a visible GPU; 9.0 = Hopper, the target.)
  export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
  export MHFAST_FORCE_CPU=1
  DEV=cpu
  MODE="NO GPU: the CPU half of every step (no CUDA build, no CUDA tests, no sanitizer, CPU timings)"
fi
echo "gpu_check: $MODE; TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST"

# 2. Wheels (fairseq for the bundled translation model).
WHEELS=${MHFAST_WHEELS:-$ROOT/.whl}
HAVE_FAIRSEQ=0
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  SITE=$(mktemp -d)
  if run_step "wheels" "$OUTDIR/build.log" $PY -m pip install -q --no-index --no-deps --no-compile \
      --no-cache-dir --target "$SITE" "$WHEELS"/*.whl; then
    export PYTHONPATH=$PYTHONPATH:$SITE
  fi
fi
$PY -c 'import fairseq' >/dev/null 2>&1 && HAVE_FAIRSEQ=1

# 3. Build in place. This interpreter's build only (with a _C of another Python beside it, `-newer mhfast/_C*.so` was
# find's usage error, an empty answer, and --quick reused a stale build).
SO=mhfast/_C$($PY -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
newest_source=$(find csrc setup.py -type f -newer "$SO" 2>/dev/null | head -1)
if [ "$QUICK" = 1 ] && [ "$DEV" = cpu ] && [ -f "$SO" ] && [ -z "$newest_source" ]; then
  STEPS+=("| build | reused (--quick: mhfast/_C is newer than every source) | 0 s | - |")
else
  run_step "build ($DEV, arch $TORCH_CUDA_ARCH_LIST)" "$OUTDIR/build.log" \
    env MAX_JOBS=${MAX_JOBS:-$(nproc)} $PY setup.py build_ext --inplace
fi
$PY -c 'import mhfast; print("built_with_cuda", mhfast.built_with_cuda())' >>"$OUTDIR/build.log" 2>&1
# The C++ runtime must be the shared one torch uses (a static copy crashed on the first error message; setup.py's
# shared_cxx_runtime_args): say which in the build log and the summary.
CXXRT=$(ldd "$SO" 2>/dev/null | grep -o 'libstdc++[^ ]*' | head -1)
CXXRT=${CXXRT:-static (no libstdc++.so linked)}
echo "C++ runtime of mhfast._C: $CXXRT" | tee -a "$OUTDIR/build.log"

# 4. Tests on this device ("cuda" / "cpu" are the ids of the device fixture's parameters).
# The fused single-site ops and uniform_mix: every op test takes the `device` fixture; their -k cuda
# selection leaves out only the device-free option / CLI checks of test_uniform_mix.py.
OP_TESTS="tests/ops/test_masked_copies.py tests/ops/test_gather_energies.py tests/ops/test_propose.py
  tests/ops/test_mh_accept.py tests/ops/test_opcheck.py tests/ops/test_cpu_portable_path.py tests/ops/test_uniform_mix.py
  tests/ops/test_mh_propose_site.py tests/ops/test_mh_commit_site.py tests/ops/test_mh_site_rows.py
  tests/ops/test_mh_memo_ops.py tests/ops/test_counter_uniforms.py"
SAMPLER_TESTS="tests/sampler/test_sampler_exact.py tests/sampler/test_sampler_api.py tests/sampler/test_static_step.py
  tests/sampler/test_proposal_memo.py tests/sampler/test_delayed.py tests/sampler/test_delayed_block.py
  tests/sampler/test_delayed_influence.py tests/sampler/test_delayed_surrogate.py tests/sampler/test_tempering.py
  tests/sampler/test_early_rejection.py tests/sampler/test_delayed_cascade.py
  tests/sampler/test_delayed_min_temperature.py"
# With fairseq (from the wheels): the fairseq masked-LM adapter on the device, its cuda-graph capture included
# (it failed on an H200 before the adapter ran fairseq's encoder without its host-synced padding test).
[ "$HAVE_FAIRSEQ" = 1 ] && SAMPLER_TESTS="$SAMPLER_TESTS tests/models/test_fairseq_mlm.py"
if ! wanted tests; then
  :
elif [ "$QUICK" = 1 ]; then
  # shellcheck disable=SC2086
  run_step "tests (-k $DEV, quick subset)" "$OUTDIR/tests.log" \
    $PY -m pytest -q -x -p no:cacheprovider tests/ops/test_masked_copies.py tests/ops/test_mh_accept.py \
    tests/ops/test_mh_propose_site.py -k "$DEV"
else
  # With pytest-xdist (the GPU image has it), MHFAST_TEST_WORKERS processes (default 8): faster, and a test that
  # crashes its process (a segfault) is reported as failed by name while the others still run.
  XDIST=""
  $PY -c 'import xdist' >/dev/null 2>&1 && XDIST="-n ${MHFAST_TEST_WORKERS:-8}"
  # shellcheck disable=SC2086
  run_step "tests (-k $DEV)" "$OUTDIR/tests.log" \
    $PY -m pytest -q -p no:cacheprovider --durations=15 $XDIST $OP_TESTS $SAMPLER_TESTS -k "$DEV"
fi

# 5. Sanitizers (GPU) / the same sweep on the CPU kernels.
SWEEP="bench/sweeps/op_sweep.py --device $DEV --small"
[ "$QUICK" = 1 ] && SWEEP="$SWEEP --tiny"
if ! wanted sanitizer; then
  :
elif [ "$DEV" = cuda ] && command -v compute-sanitizer >/dev/null; then
  # MHFAST_SANITIZERS / MHFAST_SANITIZER_TIMEOUT: which tools, and seconds each (a short device lease).
  for tool in ${MHFAST_SANITIZERS:-memcheck racecheck synccheck}; do
    # shellcheck disable=SC2086
    run_step "compute-sanitizer $tool" "$OUTDIR/sanitizer.log" timeout ${MHFAST_SANITIZER_TIMEOUT:-150} \
      compute-sanitizer --tool $tool --error-exitcode 99 $PY $SWEEP
  done
else
  # shellcheck disable=SC2086
  run_step "op sweep on $DEV (no compute-sanitizer: no GPU)" "$OUTDIR/sanitizer.log" $PY $SWEEP
fi

# 6-7. Benchmarks.
BQ=""
[ "$QUICK" = 1 ] || [ "$DEV" = cpu ] && BQ="--quick"
wanted ops && run_step "ops vs reference and floor ($DEV)" "$OUTDIR/bench.log" $PY bench/ops_floor.py \
  --out "$OUTDIR" --device $DEV $BQ
TR=""
[ "$HAVE_FAIRSEQ" = 1 ] || TR="--skip-translation"
wanted e2e && run_step "sampler end to end ($DEV)" "$OUTDIR/bench.log" $PY bench/sampler_e2e.py --out "$OUTDIR" \
  --device $DEV $BQ $TR
# The CMLM's fast decoder forward against fairseq's decoder on this device: max logit difference, ms per row,
# and the check that both give the same chains (exit 1 otherwise).
if [ "$HAVE_FAIRSEQ" = 1 ] && wanted decoder; then
  DQ=""
  [ "$QUICK" = 1 ] && DQ="--sentences 2 --epochs 2 --repeats 1 --rows 16 --lengths 8 --budgets"
  # shellcheck disable=SC2086
  run_step "fast CMLM decoder vs fairseq ($DEV)" "$OUTDIR/bench.log" $PY bench/bench_decoder.py --device $DEV \
    --no-write $DQ
fi

# 9. mhfast vs the mixmatch loop on this device (issue 14), on AntiBERTy's shape with random weights. On the CPU
# (no GPU here) one small case only: the full CPU grid, on the real AntiBERTy, is bench/RESULTS.md's (40 min).
if wanted mixmatch; then
  if [ "$DEV" = cuda ]; then
    MM="--lengths 16 32 64 --chains 1 5 16 --dtypes float32 bfloat16 --repeats 3 --captures none cuda-graph"
  else
    MM="--lengths 8 --chains 2 --dtypes float32 --budget 16 --repeats 1"
  fi
  # shellcheck disable=SC2086
  run_step "mhfast vs mixmatch loop ($DEV)" "$OUTDIR/bench.log" timeout 480 $PY bench/bench_mixmatch.py \
    --device $DEV --model antiberty-random --starts random $MM --json "$OUTDIR/mixmatch.json" --no-write
  [ -f "$OUTDIR/mixmatch.json" ] && $PY bench/bench_mixmatch.py --render "$OUTDIR/mixmatch.json" --no-write \
    >"$OUTDIR/mixmatch.md" 2>&1
fi

# 10. torch.compile on the sampler's path, on this device (the CPU's figures are bench/RESULTS.md's).
if wanted compile && { [ "$DEV" = cuda ] || [ "$QUICK" = 0 ]; }; then
  CR="--repeats 5"
  [ "$DEV" = cpu ] && CR="--repeats 1"
  # shellcheck disable=SC2086
  run_step "torch.compile vs eager ($DEV)" "$OUTDIR/bench.log" timeout 300 $PY bench/bench_forward.py --compile-only \
    --device $DEV --model antiberty-random --no-write $CR
fi

# 11. The real model: Sapiens on this device (needs the sapiens and fairseq wheels on the GPU machine).
HAVE_SAPIENS=0
$PY -c 'import importlib.util as u; assert u.find_spec("sapiens") and u.find_spec("fairseq")' >/dev/null 2>&1 && HAVE_SAPIENS=1
if wanted sapiens && [ "$HAVE_SAPIENS" = 1 ]; then
  SQ=""
  [ "$QUICK" = 1 ] && SQ="--quick"
  # shellcheck disable=SC2086
  run_step "Sapiens real-model check ($DEV)" "$OUTDIR/bench.log" timeout 300 $PY bench/sapiens_check.py --device $DEV $SQ
  grep -A40 "^Sapiens heavy chain on" "$OUTDIR/bench.log" | grep "^Sapiens\|^|" >"$OUTDIR/sapiens.md" 2>/dev/null
  if [ "$QUICK" = 0 ]; then  # --quick (CI): the check above only
    if [ "$DEV" = cuda ]; then
      SM="--lengths 32 64 96 --chains 1 5 16 --dtypes float32 bfloat16 --repeats 3 --captures none cuda-graph"
    else
      SM="--lengths 32 --chains 1 5 --dtypes float32 --repeats 1"
    fi
    # shellcheck disable=SC2086
    run_step "mhfast vs mixmatch loop on Sapiens ($DEV)" "$OUTDIR/bench.log" timeout 300 $PY bench/bench_mixmatch.py \
      --device $DEV --model sapiens-h --starts random parent $SM --json "$OUTDIR/mixmatch_sapiens.json" --no-write
    [ -f "$OUTDIR/mixmatch_sapiens.json" ] && $PY bench/bench_mixmatch.py --render "$OUTDIR/mixmatch_sapiens.json" \
      --starts random parent --no-write >>"$OUTDIR/sapiens.md" 2>&1
    rm -f "$OUTDIR/mixmatch_sapiens.json"
  fi
elif wanted sapiens; then
  STEPS+=("| Sapiens real-model check | skipped: no sapiens package (put its wheel in .whl/, see the header) | 0 s | - |")
fi

# 12. Mixing per second on this device (the GPU's figures; the CPU's are bench/RESULTS.md's, per row).
if wanted mixing && [ "$DEV" = cuda ]; then
  if [ "$HAVE_FAIRSEQ" = 1 ]; then
    run_step "delayed acceptance on the main job ($DEV)" "$OUTDIR/bench.log" timeout 150 $PY bench/bench_delayed.py \
      --case cmlm-translate --device $DEV --seeds 0 1 --settings mh delayed-i2 delayed-w0 delayed-c1
  fi
  if [ "$HAVE_SAPIENS" = 1 ]; then
    run_step "parallel tempering at equal sweeps ($DEV)" "$OUTDIR/bench.log" timeout 240 $PY bench/tempering_device.py \
      --device $DEV --sweeps 600 --seeds 0 1 --traces "$OUTDIR/mixing.pt"
    run_step "parallel tempering at equal sweeps, steps as CUDA graphs ($DEV)" "$OUTDIR/bench.log" timeout 240 \
      $PY bench/tempering_device.py --device $DEV --sweeps 600 --seeds 0 1 --capture cuda-graph \
      --traces "$OUTDIR/mixing_graphs.pt"
    # Long enough for R-hat 1.01 (an H200, fifth run: max R-hat 1.008 at 5,700 sweeps, ~70 s; plain MH 3.76).
    run_step "parallel tempering to R-hat 1.01, steps as CUDA graphs ($DEV)" "$OUTDIR/bench.log" timeout 200 \
      $PY bench/tempering_device.py --device $DEV --sweeps 6000 --burn-in 2850 --seeds 0 --capture cuda-graph \
      --traces "$OUTDIR/mixing_graphs_long.pt"
    # What is left of a captured sweep besides the replays: the calls around them, those on the device apart.
    run_step "calls around the CUDA graphs ($DEV)" "$OUTDIR/bench.log" timeout 120 $PY bench/graph_overhead.py \
      --device $DEV
  fi
elif wanted mixing && [ "$QUICK" = 0 ]; then
  STEPS+=("| mixing per second | skipped: no GPU (the CPU's figures are bench/RESULTS.md's) | 0 s | - |")
fi

# 13. AntiBERTy on this device. Its 104 MB of weights exceed what one device call carries (64 MiB with the ~26 MB
# working tree), so they travel as parts, one per call (scripts/carry_parts.py; the plan in bench/CUDA_NOTES.md), and
# are joined here; where the antiberty package is installed (this CPU machine) it is used as it is.
AB_PARTS=${MHFAST_ANTIBERTY_PARTS:-$ROOT/.ab}
if wanted antiberty; then
  if [ -f "$AB_PARTS/manifest.json" ]; then
    AB_SITE=$(mktemp -d)
    # (first on the path: the joined copy is what runs, also where a package is installed)
    run_step "AntiBERTy's weights joined from their parts" "$OUTDIR/build.log" $PY scripts/carry_parts.py join \
      "$AB_PARTS" --to "$AB_SITE" && export PYTHONPATH=$AB_SITE:$PYTHONPATH
  fi
  if AB_DIR=$($PY -c 'from mhfast.models.antiberty import antiberty_dir; print(antiberty_dir())' 2>/dev/null); then
    echo "AntiBERTy weights: $AB_DIR" >>"$OUTDIR/bench.log"
    if [ "$DEV" = cuda ]; then
      AQ="" TQ="--sweeps 4000 --burn-in 1000" DQ="--seeds 0 1 --epochs 50"  # (eager steps are launch-bound there)
    elif [ "$QUICK" = 0 ]; then  # the CPU half, small: the CPU's figures are bench/RESULTS.md's
      AQ="--quick" TQ="--sweeps 6 --burn-in 2 --length 4" DQ="--seeds 0 --epochs 2"
    fi
    if [ "$DEV" = cuda ] || [ "$QUICK" = 0 ]; then
      # shellcheck disable=SC2086
      run_step "AntiBERTy real-model check ($DEV)" "$OUTDIR/bench.log" timeout 200 $PY bench/sapiens_check.py \
        --model antiberty --device $DEV $AQ
      grep -A40 "^AntiBERTy on" "$OUTDIR/bench.log" | grep "^AntiBERTy\|^|" >"$OUTDIR/antiberty.md" 2>/dev/null
      # Issue 38's AntiBERTy case (T=8 from dispersed random starts, 6 rungs): R-hat where the CPU could not reach it
      CAPTURE=none
      [ "$DEV" = cuda ] && CAPTURE=cuda-graph
      # shellcheck disable=SC2086
      run_step "AntiBERTy: parallel tempering at equal sweeps, capture $CAPTURE ($DEV)" "$OUTDIR/bench.log" \
        timeout 300 $PY bench/tempering_device.py --model antiberty --temperature 1 --rungs 6 --device $DEV \
        --seeds 0 $TQ --capture $CAPTURE --traces "$OUTDIR/antiberty_tempering.pt"
      # Issue 34's AntiBERTy infilling: rows and wall seconds of plain MH, exact early rejection, delayed acceptance
      # shellcheck disable=SC2086
      run_step "AntiBERTy infilling: early rejection and delayed acceptance ($DEV)" "$OUTDIR/bench.log" timeout 240 \
        $PY bench/bench_delayed.py --case antiberty-infill --device $DEV --settings mh early-2 delayed-i2 $DQ
    else
      STEPS+=("| AntiBERTy | skipped: --quick on the CPU (its CPU figures are bench/RESULTS.md's) | 0 s | - |")
    fi
  else
    STEPS+=("| AntiBERTy | skipped: no antiberty package (its weights travel in parts: carry_parts.py) | 0 s | - |")
  fi
fi

# Summary (tables of the benchmarks folded in: at most 8 files come back from the device tool).
{
  echo "# mhfast gpu_check ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
  echo
  echo "Mode: $MODE. TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST. Quick: $QUICK. Steps: $ONLY."
  echo "C++ runtime of mhfast._C: $CXXRT."
  [ "$HAVE_FAIRSEQ" = 1 ] || echo "fairseq not importable: the bundled translation model was skipped (see the wheels note in scripts/gpu_check.sh)."
  echo
  echo '```'
  echo "$ENV"
  echo '```'
  echo
  echo "| step | status | time | log |"
  echo "|---|---|---|---|"
  printf '%s\n' "${STEPS[@]}"
  echo
  grep -hs "passed\|failed\|error" "$OUTDIR/tests.log" | tail -3
  grep -hs "op sweep on" "$OUTDIR/sanitizer.log" | tail -3
  grep -hs "ERROR SUMMARY" "$OUTDIR/sanitizer.log" | tail -3
  grep -hs "^torch.compile on the sampler's path\|^Weight casts" "$OUTDIR/bench.log" | tail -3
  for md in ops_floor.md sampler_e2e.md mixmatch.md sapiens.md antiberty.md; do
    if [ -f "$OUTDIR/$md" ]; then
      echo
      cat "$OUTDIR/$md"
      rm -f "$OUTDIR/$md"
    fi
  done
  echo
  echo "Overall: $([ $FAILED = 0 ] && echo PASS || echo FAIL)"
} >"$SUMMARY"
cat "$SUMMARY"
exit $FAILED
