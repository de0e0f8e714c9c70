# call 1: install the wheels into .site (kept between calls on the warm machine)
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl .wcv/*.whl || exit 1
