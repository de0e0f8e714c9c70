# Stop 52's fifth call (issue 37): Winograd F(2x2)'s products summed in f16 (FACERUN_F16_MATH=on) against f16
# storage alone and f32, the AuraFace replica (IResNet-100) at batch 16.
source docs/bench/h200-issue35/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
N=$PWD/.device/s52
row $N f32-f16 models auraface-arch --batch 16 --paths gpu-batch,gpu-batch-f16 --repeat 20
FACERUN_F16_MATH=on row $N f16-math models auraface-arch --batch 16 --paths gpu-batch-f16 --repeat 20
row $N f16-2 models auraface-arch --batch 16 --paths gpu-batch-f16 --repeat 20
