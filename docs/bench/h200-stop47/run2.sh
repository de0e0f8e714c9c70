# call 2 of stop 47, 4120 photos, alternating: the tree before (.device/prev = ffb0314) against the working tree,
# whose feeding thread also makes its queue writes and the staged buffers' unmapping through ctypes with the
# interpreter lock held, whose alignment warps planes of a uint8 region (1.4x faster a face, the same crops bit for
# bit) and whose embedder input is made planes first (4.6x faster, the same floats): the whole job with
# MobileFaceNet first (each run also gives its detect-only row), then detect alone, the floor, detect again
# (ordered so that what the device time left allows comes first)
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
row $PWD/.device/prev prev-embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $PWD new-embed photos /tmp/p20 --paths gpu --embedder MobileFaceNet
row $PWD floor photos /tmp/p20 --paths decode-processes
for round in 1 2; do
  row $PWD/.device/prev prev-$round photos /tmp/p20 --paths gpu
  row $PWD new-$round photos /tmp/p20 --paths gpu
done
