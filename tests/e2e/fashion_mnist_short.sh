#!/usr/bin/env bash
# fashion_mnist_short.sh RUN PROGRAM WORKDIR: the main job in a short mode
# (2,000 samples), then a resume from its checkpoint.
set -uo pipefail
run=$1; program=$2; work=$3
fail() { echo "FAIL: $*"; exit 1; }
if [ ! -f /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz ]; then
  echo "dataset-fashion-mnist is not installed (run scripts/setup)"; exit 1
fi
rm -rf "$work"; mkdir -p "$work"
ckpt="$work/ckpt"
out=$("$run" --nproc-per-node 2 "$program" --epochs 1 --limit 2000 --checkpoint-dir "$ckpt") || fail "run: $out"
echo "$out"
line=$(grep -E '^\[rank0\]: epoch 1/1 \| train loss [0-9.]+ over 2000 samples \| test accuracy 0\.[0-9]{4}, macro F1 0\.[0-9]{4} over 2000 samples \| [0-9]+ samples/s at world size 2$' <<<"$out") \
  || fail "epoch line"
[ "$(grep -c 'epoch 1/1' <<<"$out")" = 1 ] || fail "epoch line printed once (rank 0 only)"
acc=$(sed -E 's/.*test accuracy (0\.[0-9]+),.*/\1/' <<<"$line")
awk -v a="$acc" 'BEGIN { exit !(a > 0.55) }' || fail "accuracy $acc after one short epoch should exceed 0.55"
[ "$(cat "$ckpt/latest")" = checkpoint-0000000016.pt ] || fail "checkpoint of step 16 (1000 samples per rank / 64) not the latest"
ls "$ckpt" | grep -q tmp && fail "temporary file left behind"
out2=$("$run" --nproc-per-node 2 "$program" --epochs 2 --limit 2000 --checkpoint-dir "$ckpt" --resume) || fail "resume: $out2"
echo "$out2"
grep -q "^\[rank0\]: resumed from $ckpt/checkpoint-0000000016.pt at step 16 (epoch 2, 0 samples into it on each rank)$" <<<"$out2" || fail "resume line"
grep -q 'epoch 2/2' <<<"$out2" || fail "second epoch after resume"
grep -q 'epoch 1/2' <<<"$out2" && fail "epoch 1 ran again after resume"
# --resume without a checkpoint says so and starts from epoch 1.
out3=$("$run" --nproc-per-node 2 "$program" --epochs 1 --limit 200 --checkpoint-dir "$work/none" --resume) \
  || fail "resume without checkpoint: $out3"
grep -q "^\[rank0\]: no checkpoint in $work/none; starting from epoch 1$" <<<"$out3" || fail "missing-checkpoint note"
# An unusable checkpoint directory fails before any training, naming it.
out4=$("$run" --nproc-per-node 2 "$program" --epochs 1 --limit 200 --checkpoint-dir /proc/rankwise-fm 2>&1)
rc=$?
[ $rc = 1 ] || fail "unusable checkpoint directory: exit code $rc, expected 1"
grep -q "cannot create the checkpoint directory '/proc/rankwise-fm'" <<<"$out4" \
  || fail "unusable checkpoint directory message: $out4"
grep -q 'epoch 1/1' <<<"$out4" && fail "trained before checking the checkpoint directory"
# A --device that cannot work is refused before any training, saying what to use.
for bad in gpu "" cpu:0; do
  out5=$("$run" --nproc-per-node 1 "$program" --epochs 1 --limit 200 --checkpoint-dir "$work/dev" --device "$bad" 2>&1)
  grep -q "'$bad' is not a device; use auto, cpu, cuda or cuda:N" <<<"$out5" || fail "--device '$bad' message: $out5"
  grep -q 'epoch 1/1' <<<"$out5" && fail "trained with --device '$bad'"
done
out6=$("$run" --nproc-per-node 1 "$program" --epochs 1 --limit 200 --checkpoint-dir "$work/dev" --device cuda:5 2>&1)
grep -q -- "device cuda:5: this process sees 0 GPUs; use auto or cpu" <<<"$out6" || fail "--device cuda:5 message: $out6"
grep -q 'epoch 1/1' <<<"$out6" && fail "trained with --device cuda:5"
# Resumed mid-epoch past --epochs: says where the checkpoint is. (The
# `latest` pointer is set back to the mid-epoch checkpoint of step 20.)
out7=$("$run" --nproc-per-node 2 "$program" --epochs 2 --limit 2000 --checkpoint-dir "$work/mid" --checkpoint-every 5 \
  --keep-last 10 2>&1) || fail "run with --checkpoint-every 5: $out7"
[ -f "$work/mid/checkpoint-0000000020.pt" ] || fail "mid-epoch checkpoint of step 20: $out7"
echo checkpoint-0000000020.pt > "$work/mid/latest"
out8=$("$run" --nproc-per-node 2 "$program" --epochs 1 --limit 2000 --checkpoint-dir "$work/mid" --resume) || fail "resume past --epochs: $out8"
grep -q "^\[rank0\]: nothing left to do: the checkpoint is 256 samples into epoch 2 on each rank and the run's total is 1 epoch; raise the total to train further$" <<<"$out8" \
  || fail "nothing-left message: $out8"
# --resume and --overwrite-checkpoints exclude each other.
out9=$("$run" --nproc-per-node 1 "$program" --epochs 1 --limit 200 --checkpoint-dir "$work/mid" --resume --overwrite-checkpoints 2>&1)
grep -q -- "--resume excludes --overwrite-checkpoints" <<<"$out9" || fail "--resume with --overwrite-checkpoints: $out9"
# A new run in a directory of an earlier run is refused before training.
out10=$("$run" --nproc-per-node 2 "$program" --epochs 1 --limit 200 --checkpoint-dir "$work/mid" 2>&1)
grep -q "holds checkpoints of an earlier run; resume it (Resume::kLatest, --resume), replace them (Resume::kOverwrite, --overwrite-checkpoints)" <<<"$out10" \
  || fail "earlier run's directory: $out10"
grep -q 'epoch 1/1' <<<"$out10" && fail "trained in an earlier run's directory"
# One process without a launcher: world size 1, its own store on a free port.
out11=$("$program" --epochs 1 --limit 500 --checkpoint-dir "$work/solo" 2>&1) || fail "without launcher: $out11"
grep -qE '^epoch 1/1 \| train loss [0-9.]+ over 500 samples .* at world size 1$' <<<"$out11" || fail "without launcher: $out11"
# The resume above kept the learning rate: no note. Another --lr is the
# checkpoint's to decide (the optimizer's options are restored): a note says so.
grep -q "learning rate" <<<"$out2" && fail "learning-rate note on a resume with the same --lr: $out2"
out12=$("$run" --nproc-per-node 2 "$program" --epochs 3 --limit 2000 --checkpoint-dir "$ckpt" --resume --lr 0.05) \
  || fail "resume with another --lr: $out12"
grep -q "^\[rank0\]: note: this program set the learning rate 0.05 but the checkpoint's run started with 0.02; " <<<"$out12" \
  || fail "learning-rate note: $out12"
[ "$(grep -c 'learning rate 0.05' <<<"$out12")" = 1 ] || fail "learning-rate note printed once: $out12"
# --help under the launcher prints once, not once per rank.
out13=$("$run" --nproc-per-node 2 "$program" --help 2>&1) || fail "--help: $out13"
[ "$(grep -c -- '--checkpoint-dir,--checkpoint_dir TEXT' <<<"$out13")" = 1 ] || fail "--help printed once: $out13"
grep -q '^\[rank1\]' <<<"$out13" && fail "--help printed by rank 1: $out13"
# --device cuda without a GPU names the flag and what to use instead.
out14=$("$run" --nproc-per-node 1 "$program" --epochs 1 --limit 200 --checkpoint-dir "$work/cuda" --device cuda 2>&1)
if ! grep -q 'epoch 1/1' <<<"$out14"; then  # no usable GPU here
  grep -q -- "asked for a GPU per process (--device cuda, DeviceKind::kCuda)" <<<"$out14" || fail "--device cuda message: $out14"
  grep -q -- "use --device auto or cpu" <<<"$out14" || fail "--device cuda advice: $out14"
fi
# --metrics-dir DIR: the JSON Lines log goes there (not beside the
# checkpoints): the run's config, step records with the loss, samples/s and
# MFU (the MLP's FLOPs are counted; the CPU's peak measured), and the
# epoch's record at step 2 (100 samples per rank in batches of 64).
logs="$work/logs"; log="$logs/metrics.jsonl"
out15=$("$run" --nproc-per-node 2 "$program" --epochs 1 --limit 200 --checkpoint-dir "$work/mlog" \
  --metrics-dir "$logs" --progress-every 1 2>&1) || fail "--metrics-dir: $out15"
[ -s "$log" ] || fail "--metrics-dir wrote nothing at $log: $out15"
[ -e "$work/mlog/metrics.jsonl" ] && fail "--metrics-dir also wrote metrics.jsonl beside the checkpoints"
/usr/bin/python3 - "$log" <<'PY' || fail "--metrics-dir content: $(cat "$log")"
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
kinds = [r["kind"] for r in records]
assert kinds[0] == "config" and kinds[-1] == "epoch" and kinds.count("step") == 2, kinds
assert records[0]["config"]["precision"] == "32-true", records[0]
steps = [r for r in records if r["kind"] == "step"]
assert [r["step"] for r in steps] == [1, 2], steps
for r in steps:
    assert r["samples_per_s"] > 0 and len(r["ranks"]) == 2, r
    assert 0 < r["metrics"]["mfu"] < 1.5 and r["metrics"]["loss"] > 0, r
assert records[-1]["step"] == 2 and "train_loss" in records[-1]["metrics"], records[-1]
assert records[-1]["samples_per_s"] > 0, records[-1]
PY
echo PASS
