#!/usr/bin/env python3
# Layer check: every src/<layer> file includes only layers above its own, and every layer library links exactly
# the layers its files include (DESIGN.md §2). The order is the top-level CMakeLists.txt's `foreach(layer ...)`
# list (cli last), so the build and this check share one list. Exit 1 naming each violation (ctest: layer_order).
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
match = re.search(r"foreach\(layer ([a-z_ ]+)\)", (root / "CMakeLists.txt").read_text())
if match is None:
    sys.exit("check_layers: no `foreach(layer ...)` list in CMakeLists.txt")
order = match.group(1).split() + ["cli"]
rank = {layer: i for i, layer in enumerate(order)}
# Libraries that live inside a layer's folder under another name.
library_layer = {f"llmserve_{layer}": layer for layer in order}
library_layer.update({"llmserve_chat_template": "tokenizer", "llmserve_bench_serve": "cli", "llmserve": "cli"})

errors = []
included = {layer: set() for layer in order}
for layer in order:
    for path in sorted((root / "src" / layer).rglob("*")):
        if path.suffix not in {".h", ".cc", ".cu", ".cuh"}:
            continue
        for line in path.read_text(errors="replace").splitlines():
            m = re.match(r'\s*#\s*include\s+"([a-z_]+)/', line)
            if m is None or m.group(1) not in rank or m.group(1) == layer:
                continue
            used = m.group(1)
            included[layer].add(used)
            if rank[used] > rank[layer]:
                header = line.split('"')[1]
                above = ", ".join(order[: rank[layer]]) or "none"
                errors.append(f"{path.relative_to(root)}: includes {header}, but {layer} may use only the layers "
                              f"above it: {above}")

# The layer library's own target_link_libraries (cli: the llmserve binary links every layer, checked by order only).
for layer in order:
    cmake = root / "src" / layer / "CMakeLists.txt"
    if not cmake.exists():
        continue
    text = cmake.read_text()
    linked = set()
    for m in re.finditer(r"target_link_libraries\((\w+)([^)]*)\)", text):
        for lib in re.findall(r"llmserve_\w+", m.group(2)):
            used = library_layer.get(lib)
            if used is None or used == layer:
                continue
            if rank[used] > rank[layer]:
                errors.append(f"src/{layer}/CMakeLists.txt: {m.group(1)} links {lib}, a layer below {layer}")
            if m.group(1) == f"llmserve_{layer}":
                linked.add(used)
    if layer != "cli" and re.search(rf"add_library\(llmserve_{layer}\b", text):
        for used in sorted(included[layer] - linked):
            errors.append(f"src/{layer}/CMakeLists.txt: llmserve_{layer} does not link llmserve_{used}, "
                          f"which its files include")
        for used in sorted(linked - included[layer]):
            errors.append(f"src/{layer}/CMakeLists.txt: llmserve_{layer} links llmserve_{used}, "
                          f"which none of its files include")

for e in errors:
    print(e)
print(f"check_layers: {len(errors)} violation(s); order (top first): {' '.join(order)}")
sys.exit(1 if errors else 0)
