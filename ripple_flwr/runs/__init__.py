"""What a run leaves behind: the results file and its metrics, plots, output confinement, resume
files and saved runs for zero-shot onboarding.

May import the layers below (mathematics, training, data, io, settings); never Flower or the
app.
"""
