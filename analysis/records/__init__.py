"""analysis.records: a study's records read, checked and narrowed to what the report stands on.

Reading and validating records (`read`, `values`), each run's health (`health`), the passes over
the training data (`data_ledger`), the choice among swept settings on validation (`selection`) and
the lr it carries to other budgets (`carry`), and the fit cells the rows group into (`cells`).
"""
