"""The slot table: each host's capacity over time, and the host states that rank hosts for the mapper."""
