# Stop 57's second call (issues 36 and 37): where the feeding thread's time goes now (native frames), and where
# AuraFace's batch of 16 and YuNet's 640x640 batch of 16 spend their GPU time dispatch by dispatch
# (benchmarks/gpu_families.py --each: each dispatch alone, the submission's cost taken out), and AuraFace's
# Winograd products under other tiles (benchmarks/winograd_tiles.py).
# TREE: the tree timed (default .device/s57; stop 58's prep.sh packs s58 instead: TREE=$PWD/.device/s58).
source docs/bench/h200-issue35/setup.sh
T=${TREE:-$PWD/.device/s57}
C=/tmp/cache-$(basename $T)
profile $T
fam() { PYTHONPATH=/tmp/site:$T:$PWD/benchmarks FACERUN_CACHE=$C python3 -P benchmarks/gpu_families.py "$@"; }
fam auraface-arch --shape 16,3,112,112 --repeat 10 --rounds 3 --each > $OUT/aura-each.txt 2>&1
head -20 $OUT/aura-each.txt
fam yunet-2023mar --shape 16,3,640,640 --repeat 10 --rounds 3 --each > $OUT/yunet-each.txt 2>&1
head -20 $OUT/yunet-each.txt
python3 docs/bench/h200-stop56/each_sum.py $OUT/aura-each.txt $OUT/yunet-each.txt
# AuraFace's F(4x4) products (86% of its batch of 16) under deeper K steps and other register blocks than plan.TILES
# (checked on lavapipe, auraface-arch-small batch 2: every spec gives the planned tiles' outputs, maxdiff 0)
PYTHONPATH=/tmp/site:$T:$PWD/benchmarks FACERUN_CACHE=$C python3 -P benchmarks/winograd_tiles.py 16 \
  --tiles 128x64/8x4/k32/u8,128x128/8x8/k32/u4,64x128/4x8/k32/u8 2>&1 | tail -8
