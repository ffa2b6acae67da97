"""The layering of src/ as docs/design.md's table declares it: every folder includes
only the folders its row names, and the table has no cycle.

    layering_test.py <repo root>              checks the tree
    layering_test.py <repo root> --self-test  checks that an upward include and a
                                               cyclic table are caught
"""
import os
import re
import shutil
import sys
import tempfile

TABLE_MARK = "<!-- layering table"
ROW = re.compile(r"^\| `([^`]+)` \|.*\| *([^|]*?) *\|$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"src/([^"]+)"')


def read_table(design_md):
    """{folder: set of folders it may include}, in the table's order."""
    lines = open(design_md, encoding="utf-8").read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(TABLE_MARK))
    table = {}
    for line in lines[start + 3:]:
        match = ROW.match(line)
        if not match:
            break
        allowed = {name.strip() for name in match.group(2).split(",") if name.strip()}
        table[match.group(1)] = allowed
    return table


def folder_of(path, table):
    """The table's longest folder holding `path` (relative to src/)."""
    parts = path.split("/")
    for depth in range(len(parts) - 1, 0, -1):
        folder = "/".join(parts[:depth])
        if folder in table:
            return folder
    return None


def cycle_in(table):
    """A cycle of the declared graph as a list of folders, or None."""
    state = {}

    def visit(folder, path):
        state[folder] = "open"
        for below in sorted(table.get(folder, ())):
            if state.get(below) == "open":
                return path + [folder, below]
            if below not in state:
                found = visit(below, path + [folder])
                if found:
                    return found
        state[folder] = "done"
        return None

    for folder in table:
        if folder not in state:
            found = visit(folder, [])
            if found:
                return found
    return None


def problems(root):
    """Every violation of the table in root/src, as readable lines."""
    table = read_table(os.path.join(root, "docs", "design.md"))
    found = []
    for folder, allowed in table.items():
        for name in sorted(allowed - set(table)):
            found.append(f"table: {folder} may include '{name}', which has no row")
    cycle = cycle_in(table)
    if cycle:
        found.append("table: cycle " + " -> ".join(cycle))
    src = os.path.join(root, "src")
    for directory, _, files in os.walk(src):
        for name in sorted(files):
            if not re.search(r"\.(h|cc|c)$", name):
                continue
            path = os.path.relpath(os.path.join(directory, name), src)
            folder = folder_of(path, table)
            if folder is None:
                found.append(f"src/{path}: its folder has no row in docs/design.md")
                continue
            with open(os.path.join(src, path), encoding="utf-8") as text:
                for number, line in enumerate(text, 1):
                    match = INCLUDE.match(line)
                    if not match:
                        continue
                    target = folder_of(match.group(1), table)
                    if target != folder and target not in table[folder]:
                        found.append(f"src/{path}:{number}: {folder} includes "
                                     f"src/{match.group(1)} ({target}), not in its row")
    return found


def self_test(root):
    """The checker fails an upward include and a cyclic table."""
    with tempfile.TemporaryDirectory() as scratch:
        copy = os.path.join(scratch, "repo")
        shutil.copytree(os.path.join(root, "src"), os.path.join(copy, "src"))
        shutil.copytree(os.path.join(root, "docs"), os.path.join(copy, "docs"))
        assert not problems(copy), "the copied tree should pass"
        upward = os.path.join(copy, "src", "base", "check.cc")
        with open(upward, "a", encoding="utf-8") as text:
            text.write('#include "src/layer/layer.h"\n')
        upward_found = problems(copy)
        assert any("base includes src/layer/layer.h" in p for p in upward_found), upward_found
        os.remove(upward)
        design = os.path.join(copy, "docs", "design.md")
        text = open(design, encoding="utf-8").read()
        base_row = next(line for line in text.splitlines() if line.startswith("| `base` |"))
        text = text.replace(base_row, base_row.rstrip("| ").rstrip() + " | layer |")
        open(design, "w", encoding="utf-8").write(text)
        cyclic = problems(copy)
        assert any(p.startswith("table: cycle") for p in cyclic), cyclic
    print("the checker rejects an upward include and a cyclic table")


def main():
    root = sys.argv[1]
    if "--self-test" in sys.argv:
        self_test(root)
        return 0
    found = problems(root)
    for line in found:
        print(line)
    print(f"{len(found)} layering problem(s)" if found else "layering follows docs/design.md")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
