"""Server-side mathematics of aggregation: w-mixing and eq. 9, Ripple-HDB refinement, robust
update bounds, the clustered baselines' maths (IFCA, FeSEM, CFL).

Pure numpy on state dicts and weight matrices; imports nothing of Flower, the app or runs.
"""
