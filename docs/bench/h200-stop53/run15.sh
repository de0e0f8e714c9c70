# Stop 53's fifth call (issue 36): the whole job's first photo, its faces now embedded at once (a batch of their own),
# on the 206 photos (twice) and the 4120; detecting alone beside it in each row.
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
N=$PWD/.device/s53c
E="--embedder MobileFaceNet"
T=docs/bench/h200-stop52/cli_time.py
row $N small photos $PWD/.device/photos --paths gpu $E
row $N small-2 photos $PWD/.device/photos --paths gpu $E
row $N p4120 photos /tmp/p20 --paths gpu $E
python3 $T index-206 $N -- index $PWD/.device/photos $E --json --db /tmp/i1.db
python3 $T index-206-2 $N -- index $PWD/.device/photos $E --json --db /tmp/i2.db
