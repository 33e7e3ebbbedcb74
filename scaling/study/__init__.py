"""scaling.study: what a study is (docs/DESIGN.md §2, §3).

The arms (`arms`), the
parameter and FLOP accounting (`accounting`), the sweep axes (`sweep`), the named presets
(`presets`, `review_presets`), the layered settings (`settings`) and the study built from them
(`study_spec`: families × variants × sizes × seeds, with data, budget and engine). Each rung's
run rules (tokens, batch, learning rate) are `jobs.run.recipes`, which the trainer reads too.
"""
