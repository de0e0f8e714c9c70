# Rebuild what the device calls carry (run here, in the project root, once a session: a new checkout has none of it):
# .gl and .whl (the Vulkan loader, wgpu, simplejpeg, py-spy), .device/photos (the 206 shared photos) and the trees
# the calls compare, packed in .device/trees.tar.gz (setup.sh unpacks them): s55 = 3d355d4 (stop 55),
# s56 = 07bbb15 (40 dispatches), s58 = this checkout's HEAD (31 dispatches, kept checks, FACERUN_DECODERS).
set -euo pipefail
bash ../shared/tools/device-prep.sh simplejpeg py-spy > /tmp/device-prep.log
mkdir -p .device/photos/wider
[ -d .device/photos/faces ] || cp -r ../shared/data/faces .device/photos/
[ -d .device/photos/wider/images ] || cp -r ../shared/data/wider/images .device/photos/wider/
rm -rf /tmp/trees && mkdir -p /tmp/trees
for t in s55:3d355d4 s56:07bbb15 s58:HEAD; do
  mkdir -p /tmp/trees/${t%%:*}
  git archive ${t#*:} facerun | tar -x -C /tmp/trees/${t%%:*}
  rm -f /tmp/trees/${t%%:*}/facerun/zoo/data/*.onnx  # setup.sh points FACERUN_MODELS at this checkout's
done
tar -czf .device/trees.tar.gz -C /tmp/trees s55 s56 s58
rm -rf .device/s55 .device/s56 .device/s57 .device/s58
du -sk --apparent-size .device .gl .whl
