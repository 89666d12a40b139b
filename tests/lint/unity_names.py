#!/usr/bin/env python3
"""Fails when two source files of one library define the same name at the top of an anonymous
namespace. The libraries build as unity batches (DTRAIN_UNITY_BUILD), which share such names,
and the batches differ between builds (the CUDA build's NCCL and IPC files join them), so a
clash that compiles here may break only the GPU build. Identical type aliases are allowed.
  usage: tests/lint/unity_names.py SOURCE_DIR"""
import collections
import pathlib
import re
import sys

LIBRARIES = ["common", "models", "data", "optim", "dist", "trainer"]
DEFINITIONS = [
    re.compile(r"^(?:inline\s+)?constexpr\s+[\w:<>, ]+?\s+(\w+)\s*(?:=|\{|\[)"),
    re.compile(r"^(?:class|struct|enum(?:\s+class)?|union)\s+(\w+)"),
    re.compile(r"^(?:template\s*<.*>\s*)?(?:static\s+)?(?:inline\s+)?(?:const\s+)?"
               r"[\w:<>,*& ]+?[\s*&]+(\w+)\s*\("),
    re.compile(r"^(?:static\s+)?(?:const\s+)?[\w:<>,]+\s+(\w+)\s*(?:=|;|\{)"),
]
ALIAS = re.compile(r"^using\s+(\w+)\s*=\s*(.*?);")


def names_in(path):
    inside = False
    for line in path.read_text().splitlines():
        if line.startswith("namespace {"):
            inside = True
        elif line.startswith("}  // namespace") and inside:
            inside = False
        elif inside and line and line[0] not in " \t}/#":
            alias = ALIAS.match(line)
            if alias:
                yield alias.group(1), alias.group(2)
                continue
            for pattern in DEFINITIONS:
                match = pattern.match(line)
                if match:
                    yield match.group(1), None
                    break


def main():
    root = pathlib.Path(sys.argv[1])
    clashes = 0
    for library in LIBRARIES:
        seen = collections.defaultdict(list)  # name -> [(file, alias target or None)]
        for path in sorted((root / library).rglob("*.cpp")):
            for name, target in names_in(path):
                seen[name].append((path.relative_to(root), target))
        for name, where in sorted(seen.items()):
            files = sorted({str(f) for f, _ in where})
            targets = {t for _, t in where}
            if len(files) > 1 and not (len(targets) == 1 and None not in targets):
                print(f"{library}: '{name}' is defined in the anonymous namespaces of "
                      f"{', '.join(files)}: in one unity batch they clash; share it in a "
                      f"header or rename one")
                clashes += 1
    if clashes:
        sys.exit(1)
    print(f"no anonymous-namespace name defined twice in {', '.join(LIBRARIES)}")


if __name__ == "__main__":
    main()
