#!/usr/bin/env bash
# Train the bundled Multi30k De->En CMLM (fairseq cmlm_transformer, task translation_lev) on CPU.
#
# Usage (after training/prepare_multi30k.py wrote $WORK/data-bin):
#   nohup bash training/train_cmlm.sh > /work/train_run/nohup.out 2>&1 &
# Re-running it resumes from $SAVE_DIR/checkpoint_last.pt (fairseq's default). The bundled model's run and
# its two stages are described in training/README.md.
# Every size can be overridden through the environment, e.g. MAX_UPDATE=20 SAVE_DIR=/tmp/x for a speed probe.
set -euo pipefail
WORK=${WORK:-/work/train_run}
SAVE_DIR=${SAVE_DIR:-$WORK/checkpoints}
LOG_FILE=${LOG_FILE:-$(dirname "$0")/logs/train.log}
SEED=${SEED:-1}
LAYERS=${LAYERS:-3}
DIM=${DIM:-256}
FFN=${FFN:-1024}
HEADS=${HEADS:-4}
MAX_TOKENS=${MAX_TOKENS:-4096}
WARMUP=${WARMUP:-400}
LR=${LR:-7e-4}
MAX_UPDATE=${MAX_UPDATE:-2750}   # ~95 min on 2 quiet CPU cores (~0.48 updates/s)
SAVE_EVERY=${SAVE_EVERY:-250}
LOG_EVERY=${LOG_EVERY:-25}
DROPOUT=${DROPOUT:-0.1}
# Resuming from $SAVE_DIR/checkpoint_last.pt needs full unpickling (fairseq stores an argparse.Namespace and
# meters; torch>=2.6 defaults to weights_only=True). These are our own files.
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
mkdir -p "$SAVE_DIR" "$(dirname "$LOG_FILE")"

exec fairseq-train "$WORK/data-bin" \
  --cpu --num-workers 0 --seed "$SEED" \
  --task translation_lev --source-lang de --target-lang en --noise random_mask \
  --arch cmlm_transformer --share-all-embeddings --apply-bert-init \
  --encoder-layers "$LAYERS" --decoder-layers "$LAYERS" \
  --encoder-embed-dim "$DIM" --decoder-embed-dim "$DIM" \
  --encoder-ffn-embed-dim "$FFN" --decoder-ffn-embed-dim "$FFN" \
  --encoder-attention-heads "$HEADS" --decoder-attention-heads "$HEADS" \
  --encoder-learned-pos --decoder-learned-pos \
  --dropout "$DROPOUT" --weight-decay 0.01 \
  --criterion nat_loss --label-smoothing 0.1 --length-loss-factor 0.1 \
  --optimizer adam --adam-betas '(0.9,0.98)' --lr "$LR" \
  --lr-scheduler inverse_sqrt --warmup-updates "$WARMUP" --warmup-init-lr 1e-7 --stop-min-lr 1e-9 \
  --max-tokens "$MAX_TOKENS" --max-update "$MAX_UPDATE" \
  --ddp-backend legacy_ddp --fixed-validation-seed 7 \
  --save-dir "$SAVE_DIR" --save-interval-updates "$SAVE_EVERY" --keep-interval-updates 5 \
  --keep-last-epochs 2 --no-epoch-checkpoints \
  --log-format simple --log-interval "$LOG_EVERY" --log-file "$LOG_FILE"
