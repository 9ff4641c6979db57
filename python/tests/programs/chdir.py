"""A program that changes its working directory, as a daemon does: `chdir.py DIR
SECONDS`. It moves to DIR, then computes for SECONDS (progutil.spin)."""

import os
import sys

import progutil

os.chdir(sys.argv[1])
progutil.spin(float(sys.argv[2]))
