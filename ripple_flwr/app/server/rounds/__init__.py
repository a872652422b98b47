"""The round loop, the grid it polls, and the records of what each round cost."""
