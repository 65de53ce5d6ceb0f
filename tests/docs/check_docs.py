"""The user's documentation holds together (no GPU, no third-party modules):

  a. every ASYNCSHIM_* variable of the settings table (config/src/variables.cpp)
     is named in README.md or in a docs/*.md page that README.md links to;
  b. every relative link in README.md, CONTRIBUTING.md and docs/*.md points to
     a file that exists and, where it has a #anchor into a Markdown file, to a
     heading of that file (GitHub's slugs) or an explicit <a id/name> anchor;
  c. README.md has at most 200 lines and keeps the line with scripts/test.sh
     (CI runs the README's test command).

    python3 check_docs.py REPOSITORY_ROOT
    python3 check_docs.py --self-test

Prints "check_docs: ok" when everything holds, else one line per problem and
exits 1.
"""
import os
import re
import sys
import tempfile

README_MAX_LINES = 200
VARIABLES_SOURCE = os.path.join("config", "src", "variables.cpp")
# Where the table's names may be named constants rather than literals.
CONSTANT_SOURCES = (os.path.join("config", "src", "variables.cpp"), os.path.join("config", "src", "variables.hpp"))
# Fewer names than this means the parser no longer understands the table.
MIN_VARIABLES = 10


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# ---------------------------------------------------------------------------
# a. The settings table's variables.

def table_variables(root):
    """The ASYNCSHIM_* names of the table `constexpr std::array table{ ... };`,
    in order: each entry's `.name = "LITERAL"` or `.name = constant`, a
    constant being a `std::string_view constant = "LITERAL"` of config/src/."""
    text = read(os.path.join(root, VARIABLES_SOURCE))
    start = re.search(r"constexpr\s+std::array\s+table\s*\{", text)
    if not start:
        raise ValueError(f"{VARIABLES_SOURCE}: no `constexpr std::array table{{` found")
    # The table ends at the first `};` at the start of a line after it.
    end = re.compile(r"^\};", re.M).search(text, start.end())
    if not end:
        raise ValueError(f"{VARIABLES_SOURCE}: the settings table does not end")
    body = text[start.end():end.start()]
    constants = {}
    for source in CONSTANT_SOURCES:
        path = os.path.join(root, source)
        if os.path.exists(path):
            for name, value in re.findall(r"std::string_view\s+(\w+)\s*=\s*\"([^\"]*)\"", read(path)):
                constants[name] = value
    names = []
    for value in re.findall(r"\.name\s*=\s*(\"[^\"]*\"|\w+)", body):
        if value.startswith('"'):
            names.append(value[1:-1])
        elif value in constants:
            names.append(constants[value])
        else:
            raise ValueError(f"{VARIABLES_SOURCE}: the table names a variable by {value}, which is not a "
                             "std::string_view constant of config/src/")
    if len(names) < MIN_VARIABLES:
        raise ValueError(f"{VARIABLES_SOURCE}: only {len(names)} variables found in the settings table")
    for name in names:
        if not re.fullmatch(r"ASYNCSHIM_[A-Z0-9_]+", name):
            raise ValueError(f"{VARIABLES_SOURCE}: {name!r} in the settings table is not an ASYNCSHIM_* name")
    return names


# ---------------------------------------------------------------------------
# Markdown: links and headings, outside code.

FENCE = re.compile(r"^ {0,3}(```|~~~)")


def prose_lines(text):
    """(line number, line) of the lines outside fenced code blocks."""
    out = []
    fenced = None
    for number, line in enumerate(text.split("\n"), 1):
        fence = FENCE.match(line)
        if fenced:
            if fence and fence.group(1) == fenced:
                fenced = None
            continue
        if fence:
            fenced = fence.group(1)
            continue
        out.append((number, line))
    return out


def prose(text):
    """The text with fenced code blocks emptied and code spans (which may wrap
    over lines, not over a blank line) replaced by `code`, so that a link's
    text may hold one; line numbers are kept."""
    lines = [""] * len(text.split("\n"))
    for number, line in prose_lines(text):
        lines[number - 1] = line
    joined = "\n".join(lines)
    span = re.compile(r"(`+)(?:(?!\1)(?!\n[ \t]*\n)[^`]|(?!\1)`+(?!`))+?\1")
    return span.sub(lambda m: "code" + "\n" * m.group(0).count("\n"), joined)


def heading_slug(title):
    """GitHub's anchor of a heading: the rendered text, lower case, every
    character but letters, digits, spaces, '-' and '_' dropped, spaces to '-'."""
    title = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", title)  # links: their text
    title = re.sub(r"<[^>]+>", "", title)                       # inline HTML
    title = title.strip().lower()
    title = "".join(c for c in title if c.isalnum() or c in " -_")
    return title.replace(" ", "-")


def anchors(text):
    """The anchors a Markdown file has: its headings' slugs (repeats get -1,
    -2, ... as on GitHub) and explicit <a id=...>/<a name=...>."""
    found = set()
    seen = {}
    # Headings from the raw lines (a code span keeps its text in a slug).
    raw = text.split("\n")
    for number, _ in prose_lines(text):
        line = raw[number - 1]
        heading = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            slug = heading_slug(heading.group(1).replace("`", ""))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    for name in re.findall(r"<a\s+(?:[^>]*\s)?(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", text):
        found.add(name)
    return found


# [text](target "title"): the text may wrap over lines (not over a blank line)
# and hold one level of brackets.
LINK = re.compile(r"!?\[(?:[^\[\]\n]|\n(?![ \t]*\n)|\[[^\[\]\n]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)


def links(text):
    """(line number, target) of every inline link and reference definition."""
    body = prose(text)
    out = []
    for pattern in (LINK, REFERENCE):
        for match in pattern.finditer(body):
            out.append((body.count("\n", 0, match.start(1)) + 1, match.group(1)))
    return sorted(out)


def is_external(target):
    return re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) is not None or target.startswith("//")


def check_links(root, relative, problems, anchor_cache):
    path = os.path.join(root, relative)
    text = read(path)
    for number, target in links(text):
        if is_external(target):
            continue
        file_part, _, anchor = target.partition("#")
        file_part = file_part.split("?")[0]
        if file_part:
            if file_part.startswith("/"):
                problems.append(f"{relative}:{number}: link {target}: absolute paths do not work on GitHub")
                continue
            linked = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
        else:
            linked = path
        shown = os.path.relpath(linked, root)
        if not os.path.exists(linked):
            problems.append(f"{relative}:{number}: link {target}: {shown} does not exist")
            continue
        if not anchor or not linked.endswith(".md") or not os.path.isfile(linked):
            continue
        if linked not in anchor_cache:
            anchor_cache[linked] = anchors(read(linked))
        if anchor not in anchor_cache[linked]:
            problems.append(f"{relative}:{number}: link {target}: {shown} has no heading #{anchor}")


def linked_pages(root):
    """README.md and the docs/*.md pages README.md links to."""
    readme = os.path.join(root, "README.md")
    pages = [readme]
    for _, target in links(read(readme)):
        if is_external(target):
            continue
        file_part = target.partition("#")[0]
        if not file_part:
            continue
        linked = os.path.normpath(os.path.join(root, file_part))
        if (os.path.dirname(linked) == os.path.join(root, "docs") and linked.endswith(".md")
                and os.path.isfile(linked) and linked not in pages):
            pages.append(linked)
    return pages


# ---------------------------------------------------------------------------

def check(root):
    """The problems found, one line each."""
    problems = []
    readme_path = os.path.join(root, "README.md")
    if not os.path.isfile(readme_path):
        return [f"{root}: no README.md"]
    readme = read(readme_path)

    # a. Every variable of the settings table is documented.
    try:
        names = table_variables(root)
    except (OSError, ValueError) as error:
        problems.append(str(error))
        names = []
    pages = linked_pages(root)
    documented = "\n".join(read(page) for page in pages)
    for name in names:
        if not re.search(r"(?<![A-Z0-9_])" + re.escape(name) + r"(?![A-Z0-9_])", documented):
            problems.append(f"{name} (settings table) is named neither in README.md nor in a docs page it links to ("
                            + ", ".join(os.path.relpath(p, root) for p in pages[1:]) + ")")

    # b. Relative links and their anchors.
    anchor_cache = {}
    files = ["README.md", "CONTRIBUTING.md"]
    docs = os.path.join(root, "docs")
    if os.path.isdir(docs):
        files += sorted(os.path.join("docs", f) for f in os.listdir(docs) if f.endswith(".md"))
    for relative in files:
        if os.path.isfile(os.path.join(root, relative)):
            check_links(root, relative, problems, anchor_cache)
        elif relative == "CONTRIBUTING.md":
            problems.append("CONTRIBUTING.md is missing")

    # c. The README's length and its test command.
    lines = readme.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) > README_MAX_LINES:
        problems.append(f"README.md has {len(lines)} lines; at most {README_MAX_LINES}")
    if not any(re.match(r"^\s*(\./)?scripts/test\.sh(\s|$)", line) for line in lines):
        problems.append("README.md has no line with the test command scripts/test.sh")
    return problems


def self_test():
    """Builds a small repository that passes, then breaks it one way at a time."""
    failures = []
    with tempfile.TemporaryDirectory() as root:
        def write(relative, text):
            os.makedirs(os.path.dirname(os.path.join(root, relative)) or root, exist_ok=True)
            with open(os.path.join(root, relative), "w", encoding="utf-8") as f:
                f.write(text)
        names = [f"ASYNCSHIM_V{i}" for i in range(MIN_VARIABLES)]
        entries = "".join(f'  variable{{\n    .info = {{.name = "{n}",\n             .field = "x"}},\n  }},\n'
                          for n in names[1:])
        write("config/src/variables.cpp",
              'constexpr std::string_view first = "ASYNCSHIM_V0";\n'
              "constexpr std::array table{\n  variable{\n    .info = {.name = first},\n  },\n" + entries + "};\n")
        write("README.md", "# T\n\n    scripts/test.sh\n\n## The `launcher`: options\n\n"
              "[p](docs/p.md#more-and-more) [c](CONTRIBUTING.md) [self](#the-launcher-options) "
              "`[not](a-link.md)` [ext](https://example.com/x.md) [a `wrapped`\nlink](docs/p.md#more-and-more)\n\n"
              "```\n[code](missing.md)\n```\n"
              + " ".join(names[:5]) + "\n")
        write("docs/p.md", "# P\n\n## More and more\n\n" + " ".join(names[5:]) + "\n[back](../README.md#t)\n")
        write("CONTRIBUTING.md", "[r](README.md#the-launcher-options)\n")
        got = check(root)
        if got:
            failures.append(f"a good repository: {got}")
        cases = [
            ("docs/p.md", "# P\n\n## More\n\n" + " ".join(names[5:]) + "\n", "has no heading #more-and-more"),
            ("docs/p.md", "# P\n\n## More and more\n\n" + " ".join(names[5:-1]) + "\n",
             f"{names[-1]} (settings table)"),
            ("CONTRIBUTING.md", "[r](READ.md)\n", "READ.md does not exist"),
            ("README.md", read_back(root, "README.md").replace("link](docs/p.md#more-and-more)",
                                                            "link](docs/p.md#nowhere)"),
             "README.md:8: link docs/p.md#nowhere"),
            ("README.md", read_back(root, "README.md").replace("scripts/test.sh", "scripts/tests.sh"),
             "no line with the test command"),
            ("README.md", read_back(root, "README.md") + "x\n" * README_MAX_LINES, "at most 200"),
        ]
        for relative, text, expected in cases:
            saved = read_back(root, relative)
            write(relative, text)
            got = check(root)
            if not any(expected in problem for problem in got):
                failures.append(f"{relative} broken: expected a problem with {expected!r}, got {got}")
            write(relative, saved)
    for failure in failures:
        print(f"check_docs self-test: {failure}")
    return not failures


def read_back(root, relative):
    return read(os.path.join(root, relative))


def main(argv):
    if argv[1:] == ["--self-test"]:
        if not self_test():
            return 1
        print("check_docs: ok (self-test)")
        return 0
    if len(argv) != 2:
        print(__doc__.strip())
        return 2
    problems = check(os.path.abspath(argv[1]))
    for problem in problems:
        print(problem)
    if problems:
        return 1
    print("check_docs: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
