#!/usr/bin/env bash
# Checks that every `<name>.md §N` citation in the code and documents names a file of docs/ and
# a section heading that exists there ("## N." or "### N.M"). Ranges and lists after the first
# number (`§5–§7`, `§2–3`, `§6, §8`) are checked number by number. Outside docs/ a citation
# must spell the path (`docs/ws-protocol.md §3`); inside docs/ the bare name is enough.
# Prints each bad citation and exits 1 if there is one; prints the count otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 - "$@" <<'PY'
import os, re, subprocess, sys

files = subprocess.run(
    ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--",
     "src", "tests", "benches", "client/src", "client/e2e", "mcp_servers", "docs", "scripts",
     "*.md"],
    capture_output=True, text=True, check=True).stdout.split()
files = [f for f in files if os.path.isfile(f) and "node_modules" not in f
         and f.endswith((".rs", ".md", ".ts", ".tsx", ".mjs", ".js", ".py", ".sh"))]

sections = {}
def heads(doc):
    if doc not in sections:
        found = set()
        with open(doc, encoding="utf-8") as fh:
            for line in fh:
                m = re.match(r"#{2,4} (\d+(?:\.\d+)*)\.? ", line)
                if m:
                    found.add(m.group(1))
        sections[doc] = found
    return sections[doc]

# A citation: a .md name, then "§N" and any "–§M", "-M", ", §M" that follow.
CITE = re.compile(r"([A-Za-z0-9_./-]*[a-z0-9-]+\.md) (§\d+(?:\.\d+)*(?:\s*(?:–|-|,|and)\s*§?\d+(?:\.\d+)*)*)")
NUM = re.compile(r"\d+(?:\.\d+)*")
bad, count = [], 0
for f in files:
    in_docs = f.startswith("docs/")
    with open(f, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            for m in CITE.finditer(line):
                name, secs = m.group(1), m.group(2)
                count += 1
                where = f"{f}:{lineno}: {m.group(0)}"
                if name.startswith("docs/"):
                    doc = name
                elif in_docs and "/" not in name:
                    doc = "docs/" + name
                else:
                    bad.append(f"{where}  (cite it as docs/{os.path.basename(name)})")
                    continue
                if not os.path.isfile(doc):
                    bad.append(f"{where}  ({doc} does not exist)")
                    continue
                nums = []
                for part in re.split(r",|and", secs):
                    ends = NUM.findall(part)
                    # "§6–9" and "§5–§7": every section of the range must exist.
                    if len(ends) == 2 and "." not in part:
                        ends = [str(n) for n in range(int(ends[0]), int(ends[1]) + 1)]
                    nums += ends
                for n in nums:
                    if n not in heads(doc):
                        bad.append(f"{where}  ({doc} has no §{n})")
for b in bad:
    print(b)
if bad:
    print(f"{len(bad)} bad of {count} citations", file=sys.stderr)
    sys.exit(1)
print(f"{count} citations, all resolve")
PY
