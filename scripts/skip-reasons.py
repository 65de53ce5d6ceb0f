#!/usr/bin/env python3
"""Why the tests that ctest skipped skipped: one line per reason, with how many
tests and one of them, read from ctest's log (<build>/Testing/Temporary/LastTest.log).
scripts/test.sh prints it after each ctest run, since ctest itself shows a
skipped test's reason only with -V.

    scripts/skip-reasons.py BUILD_DIR/Testing/Temporary/LastTest.log
"""
import re
import sys


def skipped_tests(log_text):
    """(test name, reason) for each test the log says was skipped."""
    found = []
    for block in re.split(r"\n(?=\d+/\d+ Testing: )", log_text):
        name = re.search(r"^\d+/\d+ Test: (.+)$", block, re.M)
        regex = re.search(r"Skip regular expression found in output\. Regex=\[(.*)\]", block)
        if not name or not regex:
            continue
        output = block.split("<end of output>")[0]
        lines = [line.strip() for line in output.splitlines()]
        # A GPU-tier test's own verdict (tests/gpu/gpu_test.py) says "gpu-test: SKIP: why".
        reason = next((re.sub(r"^(gpu-test: )?SKIP:", "", line).strip() for line in lines
                       if re.match(r"(gpu-test: )?SKIP:", line)), None)
        if reason is None:
            pattern = regex.group(1)
            reason = next((line for line in lines if line and re.search(pattern, line)), pattern)
        found.append((name.group(1).strip(), reason))
    return found


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    try:
        with open(sys.argv[1], errors="replace") as f:
            text = f.read()
    except OSError as exc:
        print("asyncshim: no ctest log to read the skip reasons from (%s)" % exc, file=sys.stderr)
        return 0
    by_reason = {}
    for name, reason in skipped_tests(text):
        by_reason.setdefault(reason, []).append(name)
    for reason, names in sorted(by_reason.items(), key=lambda item: -len(item[1])):
        print("asyncshim: %d test%s skipped: %s (e.g. %s)"
              % (len(names), "" if len(names) == 1 else "s", reason, names[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
