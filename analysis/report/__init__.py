"""analysis.report: the report written from the fits and comparisons.

Markdown/HTML blocks (`render`), the summary and sections (`summary`, `sections`, `scope`), figures
(`figures`, `frontier_figures`, `frontier_lead`) and the atomic writes of every file it keeps
(`atomic`).
"""
