"""The README, the design and user docs, and the code's comments describe what
is, not when it changed: none of them holds a date (YYYY-MM-DD) or a commit
hash. Dated runs and per-commit figures belong in tests/bench/RESULTS.md
(and the generated docs/PERFORMANCE.md, which names its run).

    python3 check_history.py REPOSITORY_ROOT
    python3 check_history.py --self-test

Prints "check_history: ok" when nothing is found, else one line per finding
(file:line: what) and exits 1. Only comments are read in code (after // or
#, and the lines of a /* */ block), so strings and data stay free.
"""
import os
import re
import sys
import tempfile

DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
# A commit hash: 7 to 40 hex digits with a letter and a digit among them, not
# part of a longer word or a 0x number.
HASH = re.compile(r"(?<![0-9A-Za-z_])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![0-9A-Za-z_])")

DOCS = ["README.md", "SECURITY.md", "CONTRIBUTING.md"]
DOCS_FOLDER = "docs"
DOCS_EXEMPT = {"PERFORMANCE.md"}  # generated from one run, which it names
CODE_FOLDERS = ["shim", "config", "resource", "tests", "scripts", "cmake"]
SLASH_COMMENTS = {".cpp", ".hpp", ".cu", ".cuh", ".h", ".def", ".c"}
HASH_COMMENTS = {".py", ".sh", ".cmake"}
HASH_COMMENT_NAMES = {"CMakeLists.txt", "asyncshim", "asyncshim-ab", "asyncshim-replay", "run"}


def comment_of(line, style, in_block):
    """The comment text of `line` and whether a /* */ block goes on after it."""
    if style == "#":
        return (line.split("#", 1)[1] if "#" in line else ""), False
    text = ""
    if in_block:
        end = line.find("*/")
        if end < 0:
            return line, True
        text, line, in_block = line[:end], line[end + 2:], False
    if "//" in line:
        return text + " " + line.split("//", 1)[1], False
    start = line.find("/*")
    if start >= 0:
        rest = line[start + 2:]
        end = rest.find("*/")
        return text + " " + (rest if end < 0 else rest[:end]), end < 0
    return text, False


def findings(text):
    for rx, what in ((DATE, "a date"), (HASH, "a commit hash")):
        m = rx.search(text)
        if m:
            yield f"{what} ({m.group(0)})"


def check_file(path, shown, style, problems):
    in_block = False
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if style is None:
                text = line
            else:
                text, in_block = comment_of(line, style, in_block)
            for what in findings(text):
                problems.append(f"{shown}:{number}: {what}")


def style_of(name):
    ext = os.path.splitext(name)[1]
    if ext in SLASH_COMMENTS:
        return "//"
    if ext in HASH_COMMENTS or name in HASH_COMMENT_NAMES:
        return "#"
    return ""


def check(root):
    problems = []
    for doc in DOCS:
        if os.path.exists(os.path.join(root, doc)):
            check_file(os.path.join(root, doc), doc, None, problems)
    docs = os.path.join(root, DOCS_FOLDER)
    for name in sorted(os.listdir(docs)) if os.path.isdir(docs) else []:
        if name.endswith(".md") and name not in DOCS_EXEMPT:
            check_file(os.path.join(docs, name), f"{DOCS_FOLDER}/{name}", None, problems)
    for folder in CODE_FOLDERS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, folder)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "build")))
            for name in sorted(filenames):
                style = style_of(name)
                if style:
                    path = os.path.join(dirpath, name)
                    check_file(path, os.path.relpath(path, root), style, problems)
    return problems


def self_test():
    """Each kind of finding is found, and strings and plain text are not."""
    cases = [
        ("shim/a.cpp", "int x = 1;  // measured on 2026-12-01\n", 1),
        ("shim/b.hpp", "/* the fix (b5a9bba) made it\n   so */\n", 1),
        ("shim/c.cpp", "/*\n * since 3c6ec05\n */\n", 1),
        ("scripts/d.sh", "echo 2026-12-01  " + "#" + " only the comment counts: 9db7" + "a5a\n", 1),
        ("shim/e.cpp", 'char const* s = "2026-12-01 b5a9bba";  // 0xFF51AFD7 and 1048576 are numbers\n', 0),
        ("docs/f.md", "Run on 2026-12-01.\n", 1),
        ("docs/PERFORMANCE.md", "Run on 2026-12-01, commit b5a9bba.\n", 0),
        ("tests/g.py", 'meta = "date\\t2026-12-01"  # a made-up run\n', 0),
        ("README.md", "# asyncshim\nNo history here.\n", 0),
    ]
    ok = True
    for relative, text, expected in cases:
        with tempfile.TemporaryDirectory() as root:
            path = os.path.join(root, relative)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            found = check(root)
            if len(found) != expected:
                print(f"check_history: self-test: {relative}: expected {expected} finding(s), got {found}")
                ok = False
    return ok


def main(argv):
    if argv[1:] == ["--self-test"]:
        if not self_test():
            return 1
        print("check_history: ok")
        return 0
    if len(argv) != 2:
        print("usage: check_history.py REPOSITORY_ROOT | --self-test", file=sys.stderr)
        return 2
    problems = check(os.path.abspath(argv[1]))
    for p in problems:
        print(p)
    if problems:
        print(f"check_history: {len(problems)} finding(s): dates and commits belong in tests/bench/RESULTS.md")
        return 1
    print("check_history: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
