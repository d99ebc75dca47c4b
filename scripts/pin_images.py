#!/usr/bin/env python3
"""Write the release's image digests into charts/vramfit/values.yaml (operator.image.digest,
agent.image.digest), keeping every comment and the rest of the file as it is.

    scripts/pin_images.py --operator sha256:<64 hex> --agent sha256:<64 hex> [--values PATH]

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


class PinError(Exception):
    """The values file does not have the shape this script edits."""


def pin(text: str, digests: dict[str, str]) -> str:
    """`text` (values.yaml) with `<component>.image.digest` set for each component given.
    Walks the top-level `<component>:` block, its `image:` block, and its `digest:` line."""
    for component, digest in digests.items():
        if not DIGEST.fullmatch(digest):
            raise PinError(f"{component}: {digest!r} is not sha256:<64 lower-case hex digits>")
    lines = text.splitlines(keepends=True)
    done: set[str] = set()
    top = image = None
    for i, line in enumerate(lines):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent == 0:
            top, image = line.split(":", 1)[0], None
        elif indent == 2:
            image = line.strip() == "image:"
        elif indent == 4 and image and top in digests and line.strip().startswith("digest:"):
            lines[i] = f'    digest: "{digests[top]}"\n'
            done.add(top)
    missing = sorted(set(digests) - done)
    if missing:
        raise PinError(f"no {', '.join(c + '.image.digest' for c in missing)} line found")
    return "".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for component in COMPONENTS:
        parser.add_argument(f"--{component}", required=True, metavar="sha256:…",
                            help=f"digest of the {component} image the release pushed")
    parser.add_argument("--values", type=Path, default=VALUES, help="the values file to edit")
    args = parser.parse_args()
    try:
        text = pin(args.values.read_text(), {c: getattr(args, c) for c in COMPONENTS})
    except (OSError, PinError) as e:
        print(f"pin_images: {e}", file=sys.stderr)
        return 2
    args.values.write_text(text)
    print(f"pin_images: {args.values}: " + ", ".join(f"{c}.image.digest = {getattr(args, c)}" for c in COMPONENTS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
