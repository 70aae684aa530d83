#!/usr/bin/env python3
"""Print the Debian archive mirror this machine's apt uses for SUITE (default bookworm).

Reads /etc/apt/sources.list (one-line format) and /etc/apt/sources.list.d/*.list
and *.sources (deb822). The first enabled `deb` source that carries SUITE and
the `main` component wins. SP_DEBIAN_MIRROR, when set, overrides everything.
No address is ever written into the repository: it is read here at build time.
"""

from __future__ import annotations

import glob
import os
import sys


def one_line(path: str, suite: str):
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            words = line.split("#", 1)[0].split()
            if not words or words[0] != "deb":
                continue
            words = words[1:]
            if words and words[0].startswith("["):          # [arch=amd64 signed-by=...]
                while words and not words[0].endswith("]"):
                    words = words[1:]
                words = words[1:]
            if len(words) >= 3 and words[1] == suite and "main" in words[2:]:
                yield words[0]


def deb822(path: str, suite: str):
    with open(path, encoding="utf-8", errors="replace") as f:
        stanzas = f.read().split("\n\n")
    for stanza in stanzas:
        fields: dict[str, str] = {}
        key = None
        for line in stanza.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            if line[0] in " \t" and key:                        # continuation line
                fields[key] += " " + line.strip()
                continue
            if ":" in line:
                key, value = line.split(":", 1)
                key = key.strip().lower()
                fields[key] = value.strip()
        if fields.get("enabled", "yes").lower() == "no":
            continue
        if "deb" not in fields.get("types", "").split():
            continue
        if suite in fields.get("suites", "").split() and "main" in fields.get("components", "").split():
            yield from fields.get("uris", "").split()


def main() -> None:
    suite = sys.argv[1] if len(sys.argv) > 1 else "bookworm"
    override = os.environ.get("SP_DEBIAN_MIRROR")
    if override:
        print(override)
        return
    candidates = []
    if os.path.exists("/etc/apt/sources.list"):
        candidates += list(one_line("/etc/apt/sources.list", suite))
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
        candidates += list(one_line(path, suite))
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        candidates += list(deb822(path, suite))
    if not candidates:
        sys.exit(f"apt-mirror: no enabled 'deb' source for suite {suite} with component main in /etc/apt; "
                 "set SP_DEBIAN_MIRROR")
    print(candidates[0])


if __name__ == "__main__":
    main()
