"""The cells' owner: the queue of each shell, and each cell's clock, output cap, refusals and late output."""
