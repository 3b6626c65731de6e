"""`attnserve-train tune`: the Optuna search, its space and its report."""
