#!/usr/bin/env bash
# The GPU checklist in one pass, for a machine lent for minutes, most wanted first: the default
# `python train.py` (the GPU recipe) with GPU utilisation sampled each second, `translate.py --eval
# test --beam 5` on its best checkpoint and the run's results record; then the test split decoded
# in float32 and bfloat16 in one process (python -m bench.decode.dtypes), then with the captured
# decoder step (decode.capture: DTYPE+captured), the training loop profiled on the GPU
# (python -m bench.train.step_profile --device cuda), the training-step
# benchmarks, the captured step (compile=true with data.static_shapes=true: python -m
# bench.train.step --capture, with inductor's CUDA graphs and with CUDA graphs alone), the recipe
# trained captured (part capture_train: on its ladder, data.shape_rungs, dropout on from the start
# so no shape compiles twice; then a one-minute run of it again, whose shapes load from the compile
# cache under data.cache_dir; the compile time per batch shape of each in compile_times.txt), and the tests (one pytest-xdist worker per
# core, as everywhere: tests/conftest.py gives each worker its share of threads). On request, the
# part batch: the batch study, one recipe run per size in BATCHES (see below). Each step gets
# what is left of one deadline, so a slow step shortens the ones after it instead of losing them;
# every log lands in OUT_DIR.
#
#   bash bench/gpu_checklist.sh OUT_DIR [TRAIN_MINUTES (15, the recipe's)] [DEADLINE_SECONDS (1500)]
#
# TRAIN_MINUTES 0 skips training and the steps that need its checkpoint, for a machine whose
# minutes are better spent on the benchmarks and the tests. PARTS (default: all of "train decode
# profile train_step capture capture_train tests") picks the parts, e.g. PARTS=tests for a second
# command on the same machine; decode reuses the checkpoint of an earlier train in RUN_DIR when
# there is one. PARTS="train decode profile capture" with TRAIN_MINUTES 3 and DEADLINE_SECONDS 540
# fits one 10-minute command, as does PARTS=capture_train with TRAIN_MINUTES 4 and DEADLINE_SECONDS 540.
# On request, PARTS=compile_cache: python -m bench.train.compile_cache for the base model, two processes.
# DRY_RUN=1 prints each step's command instead of running it.
set -u
out=${1:?usage: bench/gpu_checklist.sh OUT_DIR [TRAIN_MINUTES] [DEADLINE_SECONDS]}
minutes=${2:-15}
deadline=$((SECONDS + ${3:-1500}))
python=${PYTHON:-python3}
run_dir=${RUN_DIR:-/tmp/gpu-checklist-run}
parts=" ${PARTS:-train decode profile train_step capture capture_train tests} "
mkdir -p "$out"

left() { echo $((deadline - SECONDS)); }
# step NAME CAP COMMAND...: runs COMMAND with at most CAP seconds (or what is left), logs to OUT_DIR.
step() {
    local name=$1 cap=$2 start=$SECONDS
    shift 2
    local budget=$(( $(left) < cap ? $(left) : cap ))
    if [[ -n ${DRY_RUN:-} ]]; then echo "== $name (cap ${budget}s): $*" | tee -a "$out/steps.txt"; return; fi
    if ((budget < 10)); then echo "== $name: skipped, ${budget}s left" | tee -a "$out/steps.txt"; return; fi
    timeout --signal=INT --kill-after=20 "$budget" "$@" >"$out/$name.log" 2>&1
    echo "== $name: rc $? in $((SECONDS - start))s (cap ${budget}s)" | tee -a "$out/steps.txt"
    tail -n 25 "$out/$name.log"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$out/gpu.txt" 2>&1
"$python" -c "import torch, pytorch_lightning as pl, tokenizers, datasets, hydra
print('torch', torch.__version__, 'lightning', pl.__version__, 'datasets', datasets.__version__,
      'hydra', hydra.__version__)" \
    >>"$out/gpu.txt" 2>&1
cat "$out/gpu.txt"

# recipe NAME DIR [OVERRIDES...]: the GPU recipe for TRAIN_MINUTES in DIR with GPU utilisation
# sampled each second, then translate.py --eval test --beam 5 on its best.ckpt and its record NAME.
recipe() {
    local name=$1 dir=$2
    shift 2
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits -l 1 \
        >"$out/${name}_util.csv" 2>/dev/null &
    local sampler=$!
    rm -rf "$dir"
    step "$name" $((minutes * 60 + 150)) "$python" train.py \
        "trainer.max_time=00:00:$(printf %02d "$minutes"):00" "hydra.run.dir=$dir" "$@"
    kill "$sampler" 2>/dev/null
    # Whole process, and from the first busy sample to the last: training with its validations.
    [[ -z ${DRY_RUN:-} ]] && "$python" - "$out/${name}_util.csv" <<'EOF2' | tee "$out/${name}_util.txt"
import statistics, sys
rows = [line.split(", ") for line in open(sys.argv[1]) if line.count(",") == 2]
util, memory = [float(r[1]) for r in rows], [float(r[2]) for r in rows]
if not util:
    sys.exit("no utilisation samples")
busy = [i for i, u in enumerate(util) if u > 0] or [0]
training = util[busy[0] : busy[-1] + 1]
print(f"samples {len(util)} (1 s apart, the whole train.py process): utilisation mean {statistics.mean(util):.1f} %,"
      f" median {statistics.median(util):.0f} %; first to last busy sample ({len(training)} s):"
      f" mean {statistics.mean(training):.1f} %, median {statistics.median(training):.0f} %;"
      f" peak memory.used {max(memory) / 1024:.2f} GiB")
EOF2
    step "${name}_translate" 240 "$python" translate.py --ckpt "$dir/checkpoints/best.ckpt" --eval test \
        --beam 5 --metrics-out "$out/${name}_test.json"
    step "${name}_record" 60 "$python" -m tools.docs.results_page --records "$out" record "$dir" --name "$name" \
        --test-metrics "$out/${name}_test.json" --machine "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
    cp "$dir/config.yaml" "$out/${name}_config.yaml" 2>/dev/null
    cp "$dir/train.log" "$out/${name}_log.txt" 2>/dev/null
}

((minutes > 0)) && [[ $parts == *" train "* ]] && recipe gpu-checklist "$run_dir"

if [[ $parts == *" decode "* ]] && [[ -f $run_dir/checkpoints/best.ckpt ]]; then
    step decode 150 "$python" -m bench.decode.dtypes --device cuda --ckpt "$run_dir/checkpoints/best.ckpt" \
        --decoders float32 bfloat16 --reps 3
    # the captured step compiles each batch shape first: a step of its own, so its compiles cannot
    # cost the figures above
    step decode_captured 240 "$python" -m bench.decode.dtypes --device cuda \
        --ckpt "$run_dir/checkpoints/best.ckpt" --decoders float32 float32+captured --reps 3
fi
[[ $parts == *" profile "* ]] && step profile 120 "$python" -m bench.train.step_profile --device cuda \
    --warmup 40 --loop-steps 20
[[ $parts == *" train_step "* ]] && step train_step 150 "$python" -m bench.train.step --device cuda \
    --max-tokens 16384 --sizes base
[[ $parts == *" train_step "* ]] && step train_step_lengths 90 "$python" -m bench.train.step_lengths \
    --device cuda --max-tokens 16384 --sizes base
if [[ $parts == *" capture "* ]]; then
    for backend in inductor cudagraphs; do
        step "train_step_captured_$backend" 150 "$python" -m bench.train.step --device cuda --max-tokens 16384 \
            --sizes base --capture --capture-backend "$backend" --batches 2
    done
fi
if [[ $parts == *" capture_train "* ]] && ((minutes > 0)); then
    captured=(data.static_shapes=true compile=true optim.dropout_min_epochs=0)
    recipe gpu-checklist-captured "$run_dir-captured" "${captured[@]}"
    # the same recipe again, its shapes' graphs from the compile cache the first run filled
    rm -rf "$run_dir-captured-again"
    step capture_train_again 240 "$python" train.py trainer.max_time=00:00:01:00 \
        "hydra.run.dir=$run_dir-captured-again" "${captured[@]}"
    for run in captured captured-again; do
        echo "# $run" && grep -h "compiled the training step\|compiled graphs cached\|budget:" "$run_dir-$run/train.log"
    done 2>&1 | tee "$out/compile_times.txt"
fi
[[ $parts == *" compile_cache "* ]] && step compile_cache 540 "$python" -m bench.train.compile_cache --device cuda \
    --model base
# The batch study: the recipe at each of BATCHES tokens per batch (default 32768 65536 131072), the
# learning rate scaled by the square root of the batch's size against the recipe's 16,384 tokens and
# the warm-up kept in tokens; one record each (e.g. BATCHES=65536 PARTS=batch for one 10-minute command).
if [[ $parts == *" batch "* ]] && ((minutes > 0)); then
    for tokens in ${BATCHES:-32768 65536 131072}; do
        lr=$(awk -v t="$tokens" 'BEGIN { printf "%.3g", 7e-4 * sqrt(t / 16384) }')
        recipe "gpu-checklist-batch-$tokens" "$run_dir-batch-$tokens" "data.max_tokens=$tokens" \
            "data.eval_max_tokens=$((tokens > 32768 ? tokens : 32768))" "optim.lr=$lr" \
            "optim.warmup_steps=$((1000 * 16384 / tokens))"
    done
fi
[[ $parts == *" tests "* ]] && step tests 1200 "$python" -m pytest -p no:cacheprovider --continue-on-collection-errors
echo "== done with $(left)s of the deadline left" | tee -a "$out/steps.txt"
