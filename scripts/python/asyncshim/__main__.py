"""python -m asyncshim: the launcher."""
from asyncshim._run import launcher

launcher()
