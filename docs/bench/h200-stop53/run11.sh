# Stop 53's call: where the upload of photos' bytes goes (issue 37), f16 sums in Winograd F(2x2) against f16 storage
# and f32 (the AuraFace replica, batch 16; stop 52's unrun run10), and `--processes auto` end to end against one
# process (issue 36).
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
N=$PWD/.device/s53
E="--embedder MobileFaceNet"
T=docs/bench/h200-stop52/cli_time.py
mkdir -p /tmp/c20 && for i in $(seq 20); do [ -d /tmp/c20/r$i ] || cp -r $PWD/.device/photos /tmp/c20/r$i; done
PYTHONPATH=/tmp/site:$N python3 -P benchmarks/upload.py --rounds 15 --mb 1.2,4.9,19.7,78.6
FACERUN_PHOTO_ITEMS=on row $N yunet-b16 models yunet-2023mar --sizes 640x640 --batch 16 --paths gpu-photo,gpu-photo-batch,gpu-batch --roofline
row $N f32-f16 models auraface-arch --batch 16 --paths gpu-batch,gpu-batch-f16 --repeat 20
FACERUN_F16_MATH=on row $N f16-math models auraface-arch --batch 16 --paths gpu-batch-f16 --repeat 20
row $N f16-2 models auraface-arch --batch 16 --paths gpu-batch-f16 --repeat 20
FACERUN_F16_MATH=on row $N f16-math-2 models auraface-arch --batch 16 --paths gpu-batch-f16 --repeat 20
python3 $T index-auto $N -- index /tmp/c20 $E --json --db /tmp/a1.db
python3 $T index-one $N -- index /tmp/c20 $E --json --db /tmp/o1.db --processes 1
python3 $T index-auto-2 $N -- index /tmp/c20 $E --json --db /tmp/a2.db
python3 $T index-one-2 $N -- index /tmp/c20 $E --json --db /tmp/o2.db --processes 1
python3 $T detect-auto $N -- detect /tmp/c20 --json
python3 $T detect-one $N -- detect /tmp/c20 --json --processes 1
python3 $T detect-206-auto $N -- detect $PWD/.device/photos --json
python3 $T index-206-auto $N -- index $PWD/.device/photos $E --json --db /tmp/s.db
