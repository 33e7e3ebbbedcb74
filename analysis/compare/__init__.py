"""analysis.compare: the families set side by side.

The gap to AR and its trend (`gap`), the compute multiplier (`multiplier`), the isoFLOP frontier and
its round planner (`frontier`, `frontier_plan`), ablation and generation tables (`ablations`,
`generation`), which quantities are distinct (`distinct`) and whether the arms were fair (`fairness`).
"""
