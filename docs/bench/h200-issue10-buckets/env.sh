export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export PYTHONPATH=/tmp/site:$PWD FACERUN_MODELS=$PWD/.device/models
facerun() { python3 -c "import sys; from facerun.cli import main; sys.argv[0]=\"facerun\"; main()" "$@"; }
