"""``python -m attnlab_course.publish {slides,site,guide}``: see the package docstring."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import __doc__ as DOC
from . import guide
from .build import ROOT, build_site, build_slides


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnlab_course.publish", description=DOC.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, default in (("slides", "build/slides"), ("site", "build/site")):
        p = sub.add_parser(name)
        p.add_argument("--out", type=Path, default=ROOT / default)
    p = sub.add_parser("guide", help=f"write {guide.GUIDE.relative_to(ROOT)}")
    p.add_argument("--check", action="store_true", help="exit 1 if the file is out of date instead of writing it")
    args = parser.parse_args(argv)

    if args.command == "slides":
        result = build_slides(args.out)
        for stem, deck in result["decks"].items():
            print(f"  {stem + '.html':32s} {deck['slides']:3d} slides + {deck['subslides']:3d} subslides  "
                  f"{_size(deck['bytes'])}")
        print(f"{len(result['decks'])} decks in {args.out} in {result['seconds']} s "
              f"(+ {_size(result['static_bytes'])} of shared _static/); open {args.out / 'index.html'}")
    elif args.command == "site":
        result = build_site(args.out)
        print(f"{len(result['pages'])} notebook pages, the landing page, the guide and {len(result['docs'])} pages "
              f"of docs/ in {args.out} in "
              f"{result['seconds']} s; open {args.out / 'index.html'}")
    elif args.check:
        if guide.stale():
            print(f"{guide.GUIDE} is out of date: python -m attnlab_course.publish guide", file=sys.stderr)
            return 1
        print(f"{guide.GUIDE} is up to date")
    else:
        print(f"wrote {guide.write()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
