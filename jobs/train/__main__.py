"""`python -m jobs.train`: the command line of `jobs.train.loop` (its `main(argv)`)."""
import sys

from jobs.train.loop import main

sys.exit(main())
