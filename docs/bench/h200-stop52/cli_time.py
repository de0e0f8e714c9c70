"""Time one facerun command end to end (a new process, as a user runs it): label, wall seconds, and the JSON
summary's counts. Usage: cli_time.py LABEL TREE -- facerun-args..."""
import json
import os
import subprocess
import sys
import time

label, tree = sys.argv[1], sys.argv[2]
args = sys.argv[sys.argv.index("--") + 1:]
env = {**os.environ, "PYTHONPATH": f"/tmp/site:{tree}", "FACERUN_CACHE": f"/tmp/cache-{os.path.basename(tree)}"}
code = "import sys; from facerun.cli import main; sys.argv[0] = 'facerun'; main()"
start = time.perf_counter()
done = subprocess.run([sys.executable, "-P", "-c", code, *args], env=env, capture_output=True, text=True)
wall = time.perf_counter() - start
try:
    summary = json.loads(done.stdout)
    counts = {k: summary[k] for k in ("added", "faces", "faces_total", "photos", "failed", "processes") if k in summary}
except (json.JSONDecodeError, TypeError):
    counts = {"stdout": done.stdout[-200:]}
print(f"{label:>16} cli {wall:7.2f} s exit {done.returncode} {counts} {done.stderr.strip()[-200:]}")
