"""What the bench scripts' CPU checks share (check_report.py,
check_torch_streams.py): expectations that print each one that failed, and
the end that says "NAME: ok" when none did."""

failures = 0


def expect(condition, what):
    """Counts and prints a failed expectation; `what` says what was expected."""
    global failures
    if not condition:
        print(f"FAILED: {what}")
        failures += 1


def finish(name):
    """The exit status: 0 (after printing "NAME: ok") when every expectation held."""
    if failures == 0:
        print(f"{name}: ok")
    return 1 if failures else 0
