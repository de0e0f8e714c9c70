# one call: the before/after check (run.sh) first, then the library and kernel figures (run2.sh); a line a row
echo "== call 1: before (.device/base = d2db377) / after"; bash docs/bench/h200-issue35/run.sh
python3 -P -c "import facerun, sys; print('after tree:', facerun.__file__)"
echo "== call 2"; bash docs/bench/h200-issue35/run2.sh
