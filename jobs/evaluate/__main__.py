"""`python -m jobs.evaluate`: the command line of `jobs.eval.evaluate` (its `main(argv)`)."""
import sys

from jobs.eval.evaluate import main

sys.exit(main())
