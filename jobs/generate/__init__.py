"""Only the `python -m jobs.generate` entry point (`__main__`); the code is `jobs.eval.generate`."""
