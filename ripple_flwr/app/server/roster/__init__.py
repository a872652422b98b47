"""Who takes part: the one-shot query round, node admission and late joiners, the bounded wait
for nodes, nodes with their own data, and partition claims."""
