"""Print the README's n-th ```bash block (1: the try-it command, 2: the test command), so that CI and
tests/fresh_machine.sh run exactly what the README tells a newcomer to run."""

import re
import sys
from pathlib import Path

blocks = re.findall(r"^```bash\n(.*?)^```", (Path(__file__).resolve().parents[1] / "README.md").read_text(),
                    flags=re.M | re.S)
n = int(sys.argv[1])
if len(blocks) < n:
    sys.exit(f"README.md: {len(blocks)} bash blocks, no block {n}")
print(blocks[n - 1].strip())
