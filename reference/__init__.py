"""Drivers of the reference studies whose results ship in `docs/`: the review's results book
(`python -m reference.review_book`) and the quickstart tuner (`python -m reference.tune_quickstart`).

They train through the same commands a user runs and write only from a finished study's own tables;
they may import any package of ours, and no package imports them (tests/test_boundaries.py).
"""
