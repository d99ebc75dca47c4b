#!/usr/bin/env python3
"""Write the release's image digests into charts/vramfit/values.yaml (operator.image.digest,
agent.image.digest, and modelCache.agent.image.digest when --cache-agent is given), keeping
every comment and the rest of the file as it is.

    scripts/pin_images.py --operator sha256:<64 hex> --agent sha256:<64 hex>
                          [--cache-agent sha256:<64 hex>] [--values PATH]

Run through scripts/pin-images.sh, which then re-renders deploy/. Standard library only.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

VALUES = Path(__file__).resolve().parent.parent / "charts" / "vramfit" / "values.yaml"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
COMPONENTS = ("operator", "agent")
# Images a release may pin too (their component is off by default).
OPTIONAL_COMPONENTS = ("cache-agent",)
# Where each component's `image:` block is in values.yaml.
IMAGE_PATHS = {
    "operator": ("operator", "image"),
    "agent": ("agent", "image"),
    "cache-agent": ("modelCache", "agent", "image"),
}


class PinError(Exception):
    """The values file does not have the shape this script edits."""


def pin(text: str, digests: dict[str, str]) -> str:
    """`text` (values.yaml) with each given component's `image.digest` set (IMAGE_PATHS).
    Follows the keys of the block lines by their indentation to each `digest:` line."""
    for component, digest in digests.items():
        if component not in IMAGE_PATHS:
            raise PinError(f"{component}: not an image of the chart")
        if not DIGEST.fullmatch(digest):
            raise PinError(f"{component}: {digest!r} is not sha256:<64 lower-case hex digits>")
    by_path = {IMAGE_PATHS[c]: c for c in digests}
    lines = text.splitlines(keepends=True)
    done: set[str] = set()
    stack: list[tuple[int, str]] = []
    for i, line in enumerate(lines):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        key = line.strip().split(":", 1)[0]
        while stack and stack[-1][0] >= indent:
            stack.pop()
        component = by_path.get(tuple(k for _, k in stack))
        if component is not None and key == "digest":
            lines[i] = f'{" " * indent}digest: "{digests[component]}"\n'
            done.add(component)
        stack.append((indent, key))
    missing = sorted(set(digests) - done)
    if missing:
        raise PinError(f"no {', '.join('.'.join(IMAGE_PATHS[c]) + '.digest' for c in missing)} line found")
    return "".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for component in COMPONENTS:
        parser.add_argument(f"--{component}", required=True, metavar="sha256:…",
                            help=f"digest of the {component} image the release pushed")
    for component in OPTIONAL_COMPONENTS:
        parser.add_argument(f"--{component}", metavar="sha256:…",
                            help=f"digest of the {component} image the release pushed")
    parser.add_argument("--values", type=Path, default=VALUES, help="the values file to edit")
    args = parser.parse_args()
    given = {c: getattr(args, c.replace("-", "_")) for c in COMPONENTS + OPTIONAL_COMPONENTS}
    digests = {c: d for c, d in given.items() if d is not None}
    try:
        text = pin(args.values.read_text(), digests)
    except (OSError, PinError) as e:
        print(f"pin_images: {e}", file=sys.stderr)
        return 2
    args.values.write_text(text)
    print(f"pin_images: {args.values}: " + ", ".join(
        f"{'.'.join(IMAGE_PATHS[c])}.digest = {d}" for c, d in digests.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
