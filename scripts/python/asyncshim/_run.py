"""The console scripts: each replaces this process with the packaged script,
which finds the library and asyncshim-settings beside itself (../lib,
../libexec/asyncshim), as in any installed tree."""
import os
import sys

from asyncshim import tool_path


def _exec(argv):
    try:
        os.execv(argv[0], argv)
    except OSError as e:
        sys.stderr.write("asyncshim: cannot run %s: %s\n" % (argv[0], e.strerror))
        sys.exit(127)


def launcher():
    """asyncshim [options] [--] program [args...] (also python -m asyncshim)."""
    _exec([tool_path("asyncshim")] + sys.argv[1:])


def ab():
    """asyncshim-ab: the A/B wrapper, with the Python running this."""
    _exec([sys.executable, tool_path("asyncshim-ab")] + sys.argv[1:])


def replay():
    """asyncshim-replay: an event log replayed, with the Python running this."""
    _exec([sys.executable, tool_path("asyncshim-replay")] + sys.argv[1:])
