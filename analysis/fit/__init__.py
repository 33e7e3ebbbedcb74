"""analysis.fit: power laws fitted to the cells, with their intervals.

The law and its solvers (`powerlaw`, `varpro`, `scalefit`), one fit per cell (`fits`) and the status
every fit reports (`fitstatus`), seed statistics and intervals (`stats`, `evalnoise`), the ensemble
sensitivity fits (`ensemble`) and a part computed on a second core (`background`).
"""
