#!/usr/bin/env python3
"""Checks the import direction of proxy/src (docs/life-of-a-request.md).

The request path's stages, top to bottom, are modules of the `courier` crate:

    accept > codec, l4, udp > conn_manager, access_log, trace > filter_chain > router > attempt > upstream

below them the leaf and support modules (request, stats, overload, tls,
maybe_tls, heap_trim, log_time, app_log), and above them the wiring (lib, main, cli,
server, worker, admin, xds, serve_check, fuzzing), which sees everything.

Rule: a file may name (by a `crate::` or `super::` path) only modules of its own
stage or of stages below it; a leaf or support module only leaf and support
modules; no stage names the wiring. Prints each violation as
`file:line: <its module> (<its stage>) imports <module> (<stage>)` and exits 1
if there is any.
"""

import pathlib
import re
import sys

STAGES = [
    ["accept"],
    ["codec", "l4", "udp"],
    ["conn_manager", "access_log", "trace"],
    ["filter_chain"],
    ["router"],
    ["attempt"],
    ["upstream"],
    ["request", "stats", "overload", "tls", "maybe_tls", "heap_trim", "log_time", "app_log"],
]
WIRING = {"lib", "main", "cli", "server", "worker", "admin", "xds", "serve_check", "fuzzing"}
RANK = {m: i + 1 for i, group in enumerate(STAGES) for m in group}
RANK.update({m: 0 for m in WIRING})
NAMES = {0: "wiring", len(STAGES): "leaf"}


def stage_name(rank):
    return NAMES.get(rank, STAGES[rank - 1][0] if rank else "wiring")


def module_path(src, file):
    """The module path of `file` as directories see it (`codec/h1.rs` -> [codec, h1])."""
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] == "mod":
        parts.pop()
    return parts


def referenced(text, mod_path):
    """(line, top-level module) for each module `text` names through a `crate::`
    path (braced groups included) or a `super::` path that climbs to the root."""
    line_of = lambda pos: text.count("\n", 0, pos) + 1
    out = []
    for m in re.finditer(r"\bcrate::(\{[^}]*\}?|\w+)", text):
        target = m.group(1)
        names = re.findall(r"(?:^|[{,])\s*(\w+)", target) if target.startswith("{") else [target]
        out += [(line_of(m.start()), n) for n in names]
    for m in re.finditer(r"(?<![\w:])((?:super::)+)(\w+)", text):
        depth = m.group(1).count("super::")
        if len(mod_path) - depth <= 0:  # climbed to the crate root
            out.append((line_of(m.start()), m.group(2)))
    return out


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    src = root / "proxy" / "src"
    problems = []
    for file in sorted(src.rglob("*.rs")):
        mod_path = module_path(src, file)
        top = mod_path[0] if mod_path else "lib"
        own = RANK.get(top)
        if own is None:
            problems.append(f"{file.relative_to(root)}: module {top} has no stage in {__file__}")
            continue
        if own == 0:
            continue
        # Comments out, lines kept, so a `use crate::{...}` group may span lines.
        text = "\n".join(l.split("//", 1)[0] for l in file.read_text().splitlines())
        for no, name in referenced(text, mod_path):
            rank = RANK.get(name)
            if rank is None or name == top:
                continue
            leaf = len(STAGES)
            if rank == 0 or rank < own or (own == leaf and rank != leaf):
                problems.append(
                    f"{file.relative_to(root)}:{no}: {top} ({stage_name(own)}) imports "
                    f"{name} ({stage_name(rank)})"
                )
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} import(s) against the stage order (see docs/life-of-a-request.md)")
        return 1
    print("proxy/src: every import goes down the request path")
    return 0


if __name__ == "__main__":
    sys.exit(main())
