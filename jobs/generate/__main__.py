"""`python -m jobs.generate`: the command line of `jobs.eval.generate` (its `main(argv)`)."""
import sys

from jobs.eval.generate import main

sys.exit(main())
