"""Print constraints.txt's pins from a `pip install --dry-run --ignore-installed --report` JSON file.

Usage: python .ci/constraints_from_report.py REPORT.json > constraints.txt (the header lines are kept from the
current constraints.txt). torch's local label (+cpu) is dropped so the pin matches the build the machine has.
"""

import json
import sys
from pathlib import Path

report = json.loads(Path(sys.argv[1]).read_text())
header = [line for line in (Path(__file__).parent.parent / "constraints.txt").read_text().splitlines() if line.startswith("#")]
pins = {}
for item in report["install"]:
    name = item["metadata"]["name"].lower().replace("_", "-")
    if name != "ratchet":
        pins[name] = item["metadata"]["version"].split("+")[0] if name == "torch" else item["metadata"]["version"]
print("\n".join(header + [f"{n}=={v}" for n, v in sorted(pins.items())]))
