"""Only the `python -m jobs.evaluate` entry point (`__main__`); the code is `jobs.eval.evaluate`."""
