"""A trained DSpark-style draft head for the embedded model: the head, its training data and recipe."""
