"""Local training: the models, the training and evaluation loops, and the clients' training
rules (FedProx, SCAFFOLD, FedDyn, Per-FedAvg, pFedMe).

torch only; imports nothing of Flower, the app or runs.
"""
