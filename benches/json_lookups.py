#!/usr/bin/env python3
"""Counts string-key look-ups into untyped JSON in the crate's non-test code (#30 item 5).

A look-up is `x["key"]` (indexing a serde_json::Value by a literal) or `.get("key")`
followed by a JSON accessor (`?.get(`, `.as_str()`, `.as_u64()`, `.and_then(Value::...)`,
...). Test modules (from a `#[cfg(test)]` line followed by `mod`) are left out. Chains that
name a fingerprint (`fp`, `fingerprint`) are also counted on their own; a key may be a
literal or a variable (`v.get(section)?.get(field)`).

    python3 benches/json_lookups.py            # the working tree
    python3 benches/json_lookups.py a0e6368    # a commit
"""
import re
import subprocess
import sys
from collections import Counter

INDEX = re.compile(r'[\w\)\]]\[\s*"[^"\n]+"\s*\]')
GET = re.compile(
    r'\.get\(\s*("[^"\n]+"|&?[\w.]+)\s*\)(?=\??\.get\(|\??\.as_(str|u64|i64|f64|bool|object|array)\(|\.and_then\((serde_json::)?Value::)'
)
FP = re.compile(r'\b(fp|fingerprint|live)\b')


def files(rev):
    if rev:
        out = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "src"],
                             capture_output=True, text=True, check=True).stdout
        for path in out.split():
            if path.endswith(".rs"):
                yield path, subprocess.run(["git", "show", f"{rev}:{path}"],
                                           capture_output=True, text=True, check=True).stdout
    else:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "src"],
                             capture_output=True, text=True, check=True).stdout
        for path in out.split():
            if path.endswith(".rs"):
                with open(path) as f:
                    yield path, f.read()


def non_test(text):
    """The lines before the test module, comments removed, each method chain on one line."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.strip() == "#[cfg(test)]" and i + 1 < len(lines) and lines[i + 1].lstrip().startswith("mod "):
            lines = lines[:i]
            break
    code = "\n".join(l.split("//")[0] for l in lines)
    code = re.sub(r"\)\s*\n\s*(\??)\s*\.", r")\1.", code)
    return code.split("\n")


def main():
    rev = sys.argv[1] if len(sys.argv) > 1 else None
    per_file, fp_total, total = Counter(), 0, 0
    for path, text in files(rev):
        for line in non_test(text):
            code = line
            n = len(INDEX.findall(code)) + len(GET.findall(code))
            if n:
                per_file[path] += n
                total += n
                if FP.search(code):
                    fp_total += n
    print(f"string-key JSON look-ups outside tests ({rev or 'working tree'}): {total}")
    print(f"  of them on a line naming a fingerprint: {fp_total}")
    for path, n in per_file.most_common():
        print(f"  {n:4}  {path}")


if __name__ == "__main__":
    main()
