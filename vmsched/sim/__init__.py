"""vmsim: the launcher's policies on a simulated clock, at archive scale (the second driver of the
decision core), with a runtime model whose folding costs are measured on this node."""
