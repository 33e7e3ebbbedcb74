"""scaling.run: a study on disk and in flight (docs/DESIGN.md §2).

The study directory as a ledger (`study_ledger`), the journal that makes its changes survive a
kill (`journal`), the backends (`backends`) and the scheduler that submits runs (`scheduler`).
"""
